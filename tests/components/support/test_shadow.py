"""The shadow check's measures, and how it reads logged traffic."""

import os

import numpy as np
import pytest

from components.support import shadow
from tests.helpers import REPO_ROOT, span_like, write_records

SOURCE_SPAN = REPO_ROOT / "data" / "span-16"


def test_the_flip_rate_counts_classes_that_change_at_the_threshold_and_the_shift_is_ks():
    serving = [0.1, 0.4, 0.6, 0.9]
    measures = shadow.measure([0.1, 0.55, 0.45, 0.9], serving, threshold=0.5)
    assert measures.flip_rate == 0.5 and measures.requests == 4
    # The same scores in another order: no distribution moved, classes did.
    assert shadow.measure(serving[::-1], serving, 0.5).score_shift == 0.0
    assert shadow.ks_distance([0.1, 0.2], [0.8, 0.9]) == 1.0
    assert shadow.ks_distance([0.1, 0.2, 0.3, 0.4], [0.3, 0.4, 0.5, 0.6]) == 0.5
    assert sum(measures.candidate_histogram) == 4 and len(measures.serving_histogram) == shadow.HISTOGRAM_BINS
    with pytest.raises(ValueError, match="two equal, non-empty sets of scores"):
        shadow.measure([0.1], [0.1, 0.2], 0.5)


def test_a_sample_takes_the_newest_requests_first(tmp_path):
    records = span_like(SOURCE_SPAN, 1, lambda example: None)
    old = write_records(tmp_path / "old.gz", records[:50])
    write_records(tmp_path / "new.gz", records[50:80])
    os.utime(old, (1_000_000, 1_000_000))
    found = shadow.sample(str(tmp_path / "*.gz"), 40, max_malformed=0.01)
    assert not found.problem and len(found.examples) == 40 and found.files == 2
    assert found.examples[:30] == records[50:80][::-1]  # all of the newest file, its last first
    assert found.examples[30:] == records[:50][::-1][:10]


def test_traffic_past_the_malformed_bound_or_with_a_mistyped_feature_is_not_judged(tmp_path):
    records = span_like(SOURCE_SPAN, 1, lambda example: None)[:100]
    write_records(tmp_path / "requests.gz", records[:95] + [b"not an example"] * 5)
    found = shadow.sample(str(tmp_path / "*.gz"), 2000, max_malformed=0.01)
    assert found.problem == "5 of the 100 records read are malformed, more than 1%"

    def fare_as_text(example):
        example.features.feature["fare"].ClearField("float_list")
        example.features.feature["fare"].bytes_list.value[:] = [b"12.5"]

    write_records(tmp_path / "requests.gz", span_like(SOURCE_SPAN, 10, fare_as_text)[:100])
    found = shadow.sample(str(tmp_path / "*.gz"), 2000, max_malformed=0.01)
    assert found.problem == "a request carries fare as bytes, where the model reads float"
    assert shadow.sample(str(tmp_path / "none-*.gz"), 10, 0.01).problem.startswith("no files match ")


def test_scores_come_from_the_serving_signature_in_batches(tmp_path):
    tf = pytest.importorskip("tensorflow")

    class Model(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
        def serve(self, examples):
            return {"probability": tf.fill([tf.shape(examples)[0], 1], 0.25)}

    model = Model()
    tf.saved_model.save(model, str(tmp_path / "model"), signatures={"serving_default": model.serve})
    scores = shadow.score(str(tmp_path / "model"), [b"a"] * 5, batch=2)
    assert np.allclose(scores, 0.25) and scores.shape == (5,)


def test_each_threshold_the_candidate_exceeds_is_named():
    against = "the 200 newest requests, against version 7"

    def said(flip_rate, score_shift):
        return shadow.judged(shadow.Measures(200, flip_rate, score_shift, [], []), 0.05, 0.3, against)

    assert said(0.055, 0.458) == ("flip rate 0.055 over its threshold 0.05 and score shift 0.458 over its "
                                  f"threshold 0.3 on {against}", True)
    assert said(0.01, 0.458) == (f"score shift 0.458 over its threshold 0.3 on {against}", True)
    assert said(0.01, 0.1) == ("passed: flip rate 0.010 (threshold 0.05), score shift 0.100 (threshold 0.3) on "
                               f"{against}", False)
