"""The exported SavedModel: signatures, hermeticity, warmup file, bad input, and the
serving check on it."""

import math
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2

from components.model import features
from components.model.trainer import export
from components.support import serving_probe
from tests.components.model.trainer import serving_inputs


def test_serving_default_scores_examples_without_label_after_transform_output_is_gone(
    exported, loaded, rows, to_example, copied_transform_dir
):
    assert not os.path.exists(copied_transform_dir)
    assert sorted(os.listdir(os.path.join(exported[0], "assets"))) == sorted(
        f.vocabulary_name for f in features.FEATURES if f.kind is features.Kind.CATEGORICAL)
    examples = tf.constant([to_example(r, include_label=False) for r in rows])
    outputs = loaded.signatures[export.SERVING_SIGNATURE](examples=examples)
    probability = outputs[export.PROBABILITY_KEY].numpy()
    assert probability.shape == (len(rows),)
    assert np.all((probability >= 0) & (probability <= 1))
    np.testing.assert_array_equal(outputs[export.CLASS_KEY].numpy(), (probability > 0.5).astype(np.int64))


def test_raw_signature_takes_one_typed_input_per_feature_and_agrees_with_serving_default(loaded, rows, to_example):
    raw = loaded.signatures[export.RAW_SIGNATURE]
    _, input_specs = raw.structured_input_signature
    assert {name: spec.dtype for name, spec in input_specs.items()} == {f.name: f.dtype for f in features.FEATURES}
    by_name = raw(**serving_inputs.raw_inputs(rows))[export.PROBABILITY_KEY].numpy()
    examples = tf.constant([to_example(r, include_label=False) for r in rows])
    by_example = loaded.signatures[export.SERVING_SIGNATURE](examples=examples)[export.PROBABILITY_KEY].numpy()
    np.testing.assert_allclose(by_name, by_example, rtol=1e-5, atol=1e-6)


def test_transform_features_signature_returns_the_model_features(loaded, rows, to_example):
    examples = tf.constant([to_example(r) for r in rows[:3]])
    outputs = loaded.signatures[export.TRANSFORM_SIGNATURE](examples=examples)
    assert {f.transformed_name for f in features.FEATURES} <= set(outputs)
    hours = [row["trip_start_hour"][0] for row in rows[:3]]
    assert outputs["trip_start_hour_xf"].numpy().tolist() == hours


def test_the_transform_layer_is_exported_without_keras_traces(exported, loaded, copied_transform_output):
    """Only the Transform layer's `call` is used (see `data.transform_fn`), so Keras has no
    input spec to trace it with at export: the SavedModel holds the Transform graph once,
    in the signatures, and none of Keras' per-layer functions."""
    assert copied_transform_output.transform_features_layer().save_spec() is None
    assert not hasattr(loaded.transform_layer, "call_and_return_all_conditional_losses")


def test_warmup_file_holds_serving_default_requests_without_label(exported, loaded):
    export_dir, written = exported
    records = list(tf.data.TFRecordDataset(os.path.join(export_dir, export.WARMUP_FILE)))
    assert written == len(records) == 25
    serve = loaded.signatures[export.SERVING_SIGNATURE]
    for record in records[:5]:
        log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
        request = log.predict_log.request
        assert request.model_spec.signature_name == export.SERVING_SIGNATURE
        examples = tf.make_ndarray(request.inputs[export.EXAMPLES_INPUT])
        parsed = tf.train.Example.FromString(examples[0])
        assert features.LABEL_KEY not in parsed.features.feature
        assert serve(examples=tf.constant(examples))[export.PROBABILITY_KEY].shape == (1,)


def test_warmup_is_capped_at_what_tf_serving_reads(tmp_path, rows, to_example):
    many = [to_example(rows[0])] * (export.MAX_WARMUP_RECORDS + 5)
    assert export.write_warmup_requests(str(tmp_path), many, "big_tip") == export.MAX_WARMUP_RECORDS
    assert export.write_warmup_requests(str(tmp_path / "none"), many, "big_tip", limit=0) == 0
    assert not (tmp_path / "none").exists()


def test_saved_model_cli_lists_the_three_signatures(exported):
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    shown = subprocess.run([cli, "show", "--dir", exported[0], "--all"], capture_output=True, text=True, check=True)
    for name in (export.SERVING_SIGNATURE, export.RAW_SIGNATURE, export.TRANSFORM_SIGNATURE):
        assert f"signature_def['{name}']" in shown.stdout


def test_malformed_bytes_give_a_clear_error_and_the_model_keeps_serving(loaded, rows, to_example):
    serve = loaded.signatures[export.SERVING_SIGNATURE]
    with pytest.raises(tf.errors.InvalidArgumentError, match="Could not parse example"):
        serve(examples=tf.constant([b"\x00not a tf.Example\xff"]))
    good = serve(examples=tf.constant([to_example(rows[0], include_label=False)]))
    assert math.isfinite(float(good[export.PROBABILITY_KEY][0]))


def test_missing_required_feature_is_an_error_naming_it(loaded, rows, to_example):
    row = dict(rows[0], fare=[])
    with pytest.raises(tf.errors.InvalidArgumentError, match="fare"):
        loaded.signatures[export.SERVING_SIGNATURE](examples=tf.constant([to_example(row, include_label=False)]))


def test_missing_optional_features_get_the_documented_missing_ids(loaded, rows, to_example):
    required_only = {name: values for name, values in rows[0].items()
                     if name == features.LABEL_KEY or features.FEATURES_BY_NAME[name].required}
    with_label = tf.constant([to_example(required_only)])
    transformed = loaded.signatures[export.TRANSFORM_SIGNATURE](examples=with_label)
    company = features.FEATURES_BY_NAME["company"]
    latitude = features.FEATURES_BY_NAME["pickup_latitude"]
    area = features.FEATURES_BY_NAME["dropoff_community_area"]
    assert int(transformed["company_xf"][0]) == company.missing_id == company.size + 1
    assert int(transformed["pickup_latitude_xf"][0]) == latitude.missing_id == latitude.size
    assert int(transformed["dropoff_community_area_xf"][0]) == area.missing_id == area.size + 1
    assert float(transformed["trip_seconds_xf"][0]) == 0.0
    example = tf.constant([to_example(required_only, include_label=False)])
    probability = loaded.signatures[export.SERVING_SIGNATURE](examples=example)[export.PROBABILITY_KEY]
    assert 0.0 <= float(probability[0]) <= 1.0


@pytest.mark.parametrize("name, value", serving_inputs.invalid_values())
def test_raw_signature_refuses_a_nan_or_empty_value_naming_the_feature(loaded, rows, name, value):
    raw = loaded.signatures[export.RAW_SIGNATURE]
    with pytest.raises(tf.errors.InvalidArgumentError, match=name):
        raw(**serving_inputs.raw_inputs(rows[:3], **{name: (1, value)}))
    assert np.isfinite(raw(**serving_inputs.raw_inputs(rows[:3]))[export.PROBABILITY_KEY].numpy()).all()


def test_a_refusal_names_the_feature_and_every_row_that_holds_the_value_and_nothing_else(loaded, rows):
    """The rows are gathered only once a value is refused (`export.refuse_invalid`): they
    must still be the right ones, and a valid batch must still score."""
    inputs = serving_inputs.raw_inputs(rows[:4])
    inputs["trip_seconds"] = tf.tensor_scatter_nd_update(inputs["trip_seconds"], [[1], [3]], [math.inf, -math.inf])
    with pytest.raises(tf.errors.InvalidArgumentError) as refused:
        loaded.signatures[export.RAW_SIGNATURE](**inputs)
    message = refused.value.message
    assert "trip_seconds must be a finite number" in message
    assert re.search(r"\[in rows\] \[1 3\]", message), message
    assert not any(f"{f.name} " in message for f in features.FEATURES if f.name != "trip_seconds")
    valid = loaded.signatures[export.RAW_SIGNATURE](**serving_inputs.raw_inputs(rows[:4]))
    assert np.isfinite(valid[export.PROBABILITY_KEY].numpy()).all()


def test_a_refusal_of_two_features_names_the_first_in_the_features_order_with_its_rows_only(loaded, rows):
    inputs = serving_inputs.raw_inputs(rows[:4])
    order = [f.name for f in features.FEATURES]
    first, second = sorted(["trip_seconds", "fare"], key=order.index)
    inputs[second] = tf.tensor_scatter_nd_update(inputs[second], [[0]], [math.nan])
    inputs[first] = tf.tensor_scatter_nd_update(inputs[first], [[2], [3]], [math.inf, math.nan])
    with pytest.raises(tf.errors.InvalidArgumentError) as refused:
        loaded.signatures[export.RAW_SIGNATURE](**inputs)
    message = refused.value.message
    assert f"{first} " in message and f"{second} " not in message
    assert re.search(r"\[in rows\] \[2 3\]", message), message


@pytest.mark.parametrize("name, value", [("fare", math.nan), ("trip_seconds", math.inf), ("payment_type", b"")])
def test_serving_default_refuses_the_same_values_in_examples(loaded, rows, to_example, name, value):
    """A tf.Example says "missing" by leaving a feature out, so a NaN, an infinity or an
    empty required string in it is as invalid as in `serving_raw`."""
    examples = tf.constant([to_example(dict(rows[0], **{name: [value]}), include_label=False)])
    with pytest.raises(tf.errors.InvalidArgumentError, match=name):
        loaded.signatures[export.SERVING_SIGNATURE](examples=examples)


def test_the_serving_check_passes_the_exported_model_in_a_fresh_process(exported):
    from components.custom import serving_check

    export_dir, written = exported
    findings = serving_check.run_in_fresh_process(export_dir, budget_ms=serving_check.DEFAULT_BUDGET_MS)
    assert findings["ok"], findings
    assert findings["requests"] == written
    assert 0 < findings["p50_ms"] <= findings["p99_ms"] < serving_check.DEFAULT_BUDGET_MS


def test_the_serving_check_fails_a_model_over_its_latency_budget(exported):
    from components.custom import serving_check

    findings = serving_check.run_in_fresh_process(exported[0], budget_ms=1e-6)
    assert not findings["ok"] and findings["reason"].startswith("too slow: ")
    # Each request timed in every pass; the slowest pass is at least as slow as the fastest.
    assert f"fastest of {serving_probe.PASSES} passes" in findings["reason"]
    assert findings["slowest_pass_p99_ms"] >= findings["p99_ms"] > 0


def test_loading_runs_the_timed_requests_feeds_and_fetches_once_so_the_check_does_not(exported, monkeypatch):
    """The session prepares its graph for each new set of feeds and fetches at its first
    request: loading asks for the timed requests' set once (beside the Evaluator, when
    the model is handed over early), and the last call it makes is that one."""
    calls = []
    original = tf.compat.v1.Session.run
    monkeypatch.setattr(tf.compat.v1.Session, "run", lambda self, fetches, feed_dict=None, **kwargs: (
        calls.append((fetches, sorted(feed_dict or {}))) or original(self, fetches, feed_dict=feed_dict, **kwargs)))
    loaded = serving_probe.load_and_warm(exported[0])
    try:
        assert isinstance(loaded, serving_probe.Loaded) and loaded.replayed > 0
        assert calls[-1] == (loaded.fetch, [loaded.feed])
        assert all(call != calls[-1] for call in calls[:-1])  # the replay asks for another set
    finally:
        loaded.close()


def test_the_serving_check_fails_a_model_without_warmup_requests_or_that_does_not_load(exported, tmp_path):
    from components.custom import serving_check

    bare = tmp_path / "bare"
    shutil.copytree(exported[0], bare)
    os.remove(bare / export.WARMUP_FILE)
    findings = serving_check.run_in_fresh_process(str(bare), budget_ms=serving_check.DEFAULT_BUDGET_MS)
    assert not findings["ok"] and "no warmup requests" in findings["reason"]

    os.remove(bare / "saved_model.pb")
    findings = serving_check.run_in_fresh_process(str(bare), budget_ms=serving_check.DEFAULT_BUDGET_MS)
    assert not findings["ok"] and "did not load or answer in a fresh process" in findings["reason"]


def test_the_serving_check_fails_answers_that_are_not_probabilities(exported, tmp_path):
    """A model whose `probability` output is out of [0, 1] for some request."""
    from components.custom import serving_check

    broken = str(tmp_path / "broken")

    class Doubled(tf.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def serve(self, examples):
            outputs = self.inner.signatures["serving_default"](examples=examples)
            return {"probability": outputs["probability"] + 1.0}

    inner = tf.saved_model.load(exported[0])
    module = Doubled(inner)
    tf.saved_model.save(module, broken, signatures={"serving_default": module.serve})
    shutil.copytree(os.path.join(exported[0], "assets.extra"), os.path.join(broken, "assets.extra"))
    findings = serving_check.run_in_fresh_process(broken, budget_ms=serving_check.DEFAULT_BUDGET_MS)
    assert not findings["ok"], findings
    assert "not one finite probability in [0, 1] per example" in findings["reason"]


def test_a_spare_probe_started_ahead_checks_the_model_it_is_handed_as_a_new_one_does(exported):
    """`start_spare` then the check: the spare process answers (and is used up); a second
    check in the same process starts a new probe. Both find the same model sound."""
    from components.custom import serving_check

    export_dir, written = exported
    serving_check.start_spare()
    spare = serving_check._spare
    try:
        first = serving_check.run_in_fresh_process(export_dir, budget_ms=serving_check.DEFAULT_BUDGET_MS)
    finally:
        serving_check.stop_spare()
    assert spare.returncode == 0 and serving_check._spare is None
    second = serving_check.run_in_fresh_process(export_dir, budget_ms=serving_check.DEFAULT_BUDGET_MS)
    for findings in (first, second):
        assert findings["ok"] and findings["requests"] == written, findings


def test_a_spare_probe_handed_the_model_ahead_times_it_at_the_check_and_ends(exported):
    """`hand_over` then the check: the spare loads the model ahead, the check only sends
    the budget; the findings are a whole check's, and the process is gone after."""
    from components.custom import serving_check

    export_dir, written = exported
    serving_check.start_spare()
    spare = serving_check._spare
    try:
        assert serving_check.hand_over(export_dir)
        assert not serving_check.hand_over(export_dir)  # one model per spare
        findings = serving_check.run_in_fresh_process(export_dir, budget_ms=0.001)
    finally:
        serving_check.stop_spare()
    assert spare.returncode == 0 and serving_check._spare is None
    assert not findings["ok"] and findings["requests"] == written, findings
    assert findings["reason"].startswith("too slow: ") and findings["budget_ms"] == 0.001


def test_a_spare_probe_handed_another_model_gives_way_to_a_new_probe_of_the_checked_one(exported, tmp_path):
    from components.custom import serving_check

    broken = str(tmp_path / "broken")
    shutil.copytree(exported[0], broken)
    os.remove(os.path.join(broken, "saved_model.pb"))
    serving_check.start_spare()
    spare = serving_check._spare
    try:
        assert serving_check.hand_over(broken)
        findings = serving_check.run_in_fresh_process(exported[0], budget_ms=serving_check.DEFAULT_BUDGET_MS)
    finally:
        serving_check.stop_spare()
    assert spare.returncode is not None
    assert findings["ok"] and findings["requests"] == exported[1], findings


def test_a_model_handed_ahead_that_does_not_load_fails_the_check_with_the_reason(exported, tmp_path):
    from components.custom import serving_check

    broken = str(tmp_path / "broken")
    shutil.copytree(exported[0], broken)
    os.remove(os.path.join(broken, "saved_model.pb"))
    serving_check.start_spare()
    try:
        assert serving_check.hand_over(broken)
        findings = serving_check.run_in_fresh_process(broken, budget_ms=serving_check.DEFAULT_BUDGET_MS)
    finally:
        serving_check.stop_spare()
    assert not findings["ok"] and "did not load or answer in a fresh process" in findings["reason"], findings


def test_a_spare_probe_ended_from_outside_gives_way_to_a_new_one_and_an_unused_spare_is_ended(exported):
    from components.custom import serving_check

    serving_check.start_spare()
    killed = serving_check._spare
    killed.kill()
    killed.wait()
    findings = serving_check.run_in_fresh_process(exported[0], budget_ms=serving_check.DEFAULT_BUDGET_MS)
    assert findings["ok"], findings

    serving_check.start_spare()
    unused = serving_check._spare
    serving_check.stop_spare()
    assert unused.returncode is not None and serving_check._spare is None


def test_a_spare_probe_whose_input_closes_ends_without_a_word():
    """The spare of a run that never reached the check (its parent gone) ends by itself."""
    done = subprocess.run(
        [sys.executable, "-m", "components.support.serving_probe", "--wait"],
        input="", capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0 and done.stdout == "", (done.stdout, done.stderr[-500:])
