"""The drift gate's comparison of the newest span with the previous one."""

import glob

import apache_beam as beam
import pytest
import tensorflow as tf
import tensorflow_data_validation as tfdv
from apache_beam.options.pipeline_options import PipelineOptions

from components import drift, spans
from pipeline import config

pytestmark = pytest.mark.slow  # Beam pipelines


def _schema():
    return tfdv.load_schema_text(config.schema_file())


def _pipeline():
    return beam.Pipeline(options=PipelineOptions(list(config.LOCAL_BEAM_ARGS)))


@pytest.fixture
def two_spans(tmp_path, repo, copy_spans):
    """`two_spans(edit)`: spans 15 and 16 of data/ under a data root; `edit` rewrites every
    example of span 16."""

    def make(edit=None):
        copy_spans(tmp_path / "data", (15,))
        target = tmp_path / "data" / "span-16"
        target.mkdir()
        source = glob.glob(str(repo / "data" / "span-16" / "*"))
        options = tf.io.TFRecordOptions(compression_type="GZIP")
        with tf.io.TFRecordWriter(str(target / "trips.tfrecord.gz"), options) as out:
            for record in tf.data.TFRecordDataset(source, compression_type="GZIP"):
                example = tf.train.Example.FromString(record.numpy())
                if edit:
                    edit(example)
                out.write(example.SerializeToString())
        return str(tmp_path / "data")

    return make


def _report(data_root, output_dir):
    stats = drift.compute_span_statistics(_pipeline(), data_root, [15, 16], str(output_dir))
    return drift.describe(drift.drift_anomalies(stats[16], stats[15], _schema()), 16, 15)


def test_schema_declares_drift_thresholds_for_categorical_and_numeric_features():
    schema = _schema()
    assert tfdv.get_feature(schema, "payment_type").drift_comparator.infinity_norm.threshold > 0
    assert tfdv.get_feature(schema, "fare").drift_comparator.jensen_shannon_divergence.threshold > 0


def test_every_pair_of_consecutive_real_spans_passes(repo, tmp_path):
    numbers = spans.span_numbers(str(repo / "data"))
    stats = drift.compute_span_statistics(_pipeline(), str(repo / "data"), numbers, str(tmp_path))
    assert sorted(stats) == numbers
    assert all(stats[span].datasets[0].num_examples > 0 for span in numbers)
    for previous, newest in zip(numbers, numbers[1:]):
        found = drift.drift_anomalies(stats[newest], stats[previous], _schema())
        assert not found.anomaly_info, (previous, newest, drift.describe(found, newest, previous))


def test_categorical_drift_is_reported_with_its_l_infinity_distance(two_spans, tmp_path):
    def all_cash(example):
        example.features.feature["payment_type"].bytes_list.value[:] = [b"Cash"]

    report = _report(two_spans(all_cash), tmp_path)
    assert len(report) == 1
    assert "'payment_type'" in report[0] and "L_INFTY" in report[0] and "span 15 -> 16" in report[0]


def test_numeric_drift_is_reported_with_its_jensen_shannon_divergence(two_spans, tmp_path):
    def tenfold_fares(example):
        fare = example.features.feature["fare"].float_list
        fare.value[:] = [value * 10 for value in fare.value]

    report = _report(two_spans(tenfold_fares), tmp_path)
    assert any("'fare'" in line and "JENSEN_SHANNON" in line for line in report), report


def test_spans_that_left_the_data_root_since_they_were_ingested_are_named(two_spans, tmp_path):
    data_root = two_spans()
    with pytest.raises(ValueError, match=r"spans \[15, 16, 17\] were ingested but are no longer all under"):
        drift.compute_span_statistics(_pipeline(), data_root, [15, 16, 17], str(tmp_path))
