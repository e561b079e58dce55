"""The serving baseline: the version that serves, pinned or following, read from the
serving folder alone (no metadata store), copied where TFX's Trainer and Evaluator read a
model; nothing when no version serves."""

import pytest
from tfx.types import standard_artifacts

from components.custom import baseline, evaluator
from components.support import registry, serving_config

MODEL = "big_tip"


@pytest.fixture
def serving_dir(tmp_path):
    for version in (100, 200, 300):
        folder = tmp_path / "serving" / MODEL / str(version)
        (folder / "variables").mkdir(parents=True)
        (folder / "saved_model.pb").write_bytes(f"model {version}".encode())
        (folder / "variables" / "variables.index").write_bytes(b"index")
    return tmp_path / "serving"


def _baseline(tmp_path, model_dir, serving):
    model = standard_artifacts.Model()
    model.uri = str(tmp_path / "out" / "model")
    baseline.ServingBaseline.EXECUTOR_SPEC.executor_class._FUNCTION(model_dir=model_dir, serving=serving, model=model)
    return model


def test_the_baseline_is_the_pinned_version_not_the_newest_and_follows_when_unpinned(tmp_path, serving_dir):
    model_dir = str(serving_dir / MODEL)
    serving_config.follow(str(serving_dir), MODEL)
    assert baseline.serving_now(model_dir) == "300"
    serving_config.pin(str(serving_dir), MODEL, 100)  # a rollback, as `serving rollback` makes it
    assert baseline.serving_now(model_dir) == "100"
    model = _baseline(tmp_path, model_dir, baseline.serving_now(model_dir))
    copied = tmp_path / "out" / "model" / "Format-Serving"
    assert (copied / "saved_model.pb").read_bytes() == b"model 100"
    assert (copied / "variables" / "variables.index").exists()
    assert model.get_string_custom_property(baseline.SERVING_PROPERTY) == "100"
    assert baseline.holds_a_model(model)


def test_a_version_awaiting_approval_is_never_the_baseline(tmp_path, serving_dir):
    model_dir = str(serving_dir / MODEL)
    record = registry.Record()
    record.add(registry.Candidate(inputs="a", spans=[1], fate=registry.Fate.SERVED, version=200))
    record.add(registry.Candidate(inputs="b", spans=[2], fate=registry.Fate.AWAITING_APPROVAL, version=300))
    registry.write(model_dir, record)
    serving_config.follow(str(serving_dir), MODEL)
    assert baseline.serving_now(model_dir) == "200"


def test_nothing_serving_gives_an_empty_baseline_that_the_evaluator_leaves_out(tmp_path, monkeypatch):
    model_dir = str(tmp_path / "serving" / MODEL)
    assert baseline.serving_now(model_dir) == registry.NOTHING_SERVES
    empty = _baseline(tmp_path, model_dir, baseline.serving_now(model_dir))
    assert not baseline.holds_a_model(empty)
    assert not (tmp_path / "out" / "model" / "Format-Serving").exists()

    given = []
    monkeypatch.setattr(evaluator.tfx_evaluator.Executor, "Do",
                        lambda self, input_dict, output_dict, exec_properties: given.append(sorted(input_dict)))
    candidate = standard_artifacts.Model()
    evaluator.Executor().Do({"model": [candidate], evaluator.BASELINE_KEY: [empty]}, {}, {})
    served = _baseline(tmp_path / "served", str(_one_version(tmp_path)), "7")
    evaluator.Executor().Do({"model": [candidate], evaluator.BASELINE_KEY: [served]}, {}, {})
    assert given == [["model"], [evaluator.BASELINE_KEY, "model"]]


def _one_version(tmp_path):
    model_dir = tmp_path / "other" / MODEL
    (model_dir / "7").mkdir(parents=True)
    (model_dir / "7" / "saved_model.pb").write_bytes(b"model 7")
    return model_dir


def test_a_serving_version_gone_since_the_run_started_is_named(tmp_path, serving_dir):
    with pytest.raises(FileNotFoundError, match=r"version 999 of .*, which served when this run started, is no "
                                                r"longer whole there; run again"):
        _baseline(tmp_path, str(serving_dir / MODEL), "999")
    with pytest.raises(ValueError, match="reached the baseline as '1.0', not a version number"):
        _baseline(tmp_path, str(serving_dir / MODEL), "1.0")
