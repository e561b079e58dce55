"""The exported SavedModel and TFLite model: signatures, hermeticity, warmup file, bad
input, and the two models agreeing on every input fed to both."""

import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft
from tensorflow_serving.apis import prediction_log_pb2

from components.model import features
from components.model.trainer import data, export
from components.model.trainer import model as model_lib
from components.support import serving_probe


@pytest.fixture(scope="module")
def copied_transform_dir(tmp_path_factory, transform_output_dir):
    """A private copy of the Transform output, deleted by `exported` once it has been used."""
    copy = str(tmp_path_factory.mktemp("transform_copy") / "transform")
    shutil.copytree(transform_output_dir, copy)
    return copy


@pytest.fixture(scope="module")
def copied_transform_output(copied_transform_dir):
    return tft.TFTransformOutput(copied_transform_dir)


@pytest.fixture(scope="module")
def exported(tmp_path_factory, copied_transform_dir, copied_transform_output, examples_file, rows, to_example):
    """An untrained model exported, with its TFLite twin, over the copied Transform output,
    which is then deleted. The input pipeline ran on the same output first, as in the Trainer."""
    data.transformed_rows([examples_file], data.transform_fn(copied_transform_output))
    export_dir = str(tmp_path_factory.mktemp("export") / "1")
    model = model_lib.build_model()
    export.export_serving_model(model, copied_transform_output, export_dir)
    export.write_tflite(model, copied_transform_output, export_dir)
    written = export.write_warmup_requests(export_dir, (to_example(r) for r in rows), "big_tip", limit=25)
    shutil.rmtree(copied_transform_dir)  # the export must not need it any more
    return export_dir, written


@pytest.fixture(scope="module")
def loaded(exported):
    return tf.saved_model.load(exported[0])


@pytest.fixture
def lite(exported):
    """The TFLite model's signature runner, as an app would run it: TensorFlow's
    interpreter, builtin ops only (no Flex delegate)."""
    return tf.lite.Interpreter(model_path=os.path.join(exported[0], export.TFLITE_FILE)).get_signature_runner()


def _raw_inputs(rows, **changes):
    """`serving_raw` inputs for `rows`; `changes` maps a feature to `(row number, value)`."""
    inputs = {}
    for feature in features.FEATURES:
        missing = export.MISSING_VALUES[feature.dtype]
        values = [row[feature.name][0] if row[feature.name] else missing for row in rows]
        if feature.name in changes:
            row, value = changes[feature.name]
            values[row] = value
        inputs[feature.name] = tf.constant(values, dtype=feature.dtype)
    return inputs


def _invalid_values():
    """`(feature, value)` pairs `serving_raw` must refuse, from the feature spec: NaN and
    infinities in a required float, infinities in an optional one (NaN there means
    missing), an empty required string."""
    cases = []
    for feature in features.FEATURES:
        if feature.dtype.is_floating:
            refused = (math.nan, math.inf, -math.inf) if feature.required else (math.inf, -math.inf)
            cases += [pytest.param(feature.name, value, id=f"{feature.name}={value}") for value in refused]
        elif feature.dtype == tf.string and feature.required:
            cases.append(pytest.param(feature.name, b"", id=f"{feature.name}=empty"))
    return cases


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
    by_name = raw(**_raw_inputs(rows))[export.PROBABILITY_KEY].numpy()
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


@pytest.mark.parametrize("name, value", _invalid_values())
def test_raw_signature_refuses_a_nan_or_empty_value_naming_the_feature(loaded, rows, name, value):
    raw = loaded.signatures[export.RAW_SIGNATURE]
    with pytest.raises(tf.errors.InvalidArgumentError, match=name):
        raw(**_raw_inputs(rows[:3], **{name: (1, value)}))
    assert np.isfinite(raw(**_raw_inputs(rows[:3]))[export.PROBABILITY_KEY].numpy()).all()


@pytest.mark.parametrize("name, value", [("fare", math.nan), ("trip_seconds", math.inf), ("payment_type", b"")])
def test_serving_default_refuses_the_same_values_in_examples(loaded, rows, to_example, name, value):
    """A tf.Example says "missing" by leaving a feature out, so a NaN, an infinity or an
    empty required string in it is as invalid as in `serving_raw`."""
    examples = tf.constant([to_example(dict(rows[0], **{name: [value]}), include_label=False)])
    with pytest.raises(tf.errors.InvalidArgumentError, match=name):
        loaded.signatures[export.SERVING_SIGNATURE](examples=examples)


def test_tflite_model_matches_the_saved_model_on_raw_features(exported, loaded, lite, rows):
    assert os.path.isfile(os.path.join(exported[0], "assets.extra", "model.tflite"))
    # Edge values each model must read as the other does: unknown tokens (OOV ids),
    # integers and coordinates out of range, a missing optional value; the rows already
    # leave optional features out (NaN, -1 and "" in `serving_raw`).
    raw = _raw_inputs(
        rows,
        payment_type=(0, b"a payment type never seen"),
        company=(1, b"a company never seen"),
        dropoff_census_tract=(2, 123),
        trip_start_hour=(3, 30),
        trip_start_day=(4, -1),
        pickup_latitude=(5, math.nan),
        dropoff_longitude=(6, 0.0),
    )
    saved = loaded.signatures[export.RAW_SIGNATURE](**raw)[export.PROBABILITY_KEY].numpy()
    outputs = lite(**{name: tensor.numpy() for name, tensor in raw.items()})
    assert outputs[export.ERRORS_KEY].tolist() == []
    # Builtin ops only: no TFLite runtime needs the Flex (select TF ops) delegate for it.
    with open(os.path.join(exported[0], export.TFLITE_FILE), "rb") as handle:
        assert b"Flex" not in handle.read()
    on_lite = outputs[export.PROBABILITY_KEY]
    assert on_lite.shape == (len(rows),)
    assert np.isfinite(saved).all()
    np.testing.assert_allclose(on_lite, saved, atol=1e-5)


@pytest.mark.parametrize("name, value", _invalid_values())
def test_tflite_model_refuses_what_the_saved_model_refuses(lite, rows, name, value):
    """The values of `test_raw_signature_refuses_a_nan_or_empty_value_naming_the_feature`.
    TFLite's builtins cannot fail a call with a message: every probability is NaN and
    `errors` names the feature."""
    raw = _raw_inputs(rows[:3], **{name: (1, value)})
    refused = lite(**{feature: tensor.numpy() for feature, tensor in raw.items()})
    assert np.isnan(refused[export.PROBABILITY_KEY]).all()
    errors = [message.decode() for message in refused[export.ERRORS_KEY]]
    assert len(errors) == 1 and errors[0].startswith(f"{name} "), errors
    valid = lite(**{feature: tensor.numpy() for feature, tensor in _raw_inputs(rows[:3]).items()})
    assert np.isfinite(valid[export.PROBABILITY_KEY]).all() and valid[export.ERRORS_KEY].tolist() == []


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
