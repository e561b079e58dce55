"""The rolling window of spans: which spans, which split names, and the input_config."""

import pytest

from components.custom import window
from components.support import spans


def test_the_newest_span_is_eval_and_the_older_ones_train_newest_first_numbered():
    assert spans.window([3, 1, 4, 2, 5], 3) == [("train_2", 3), ("train_1", 4), ("eval", 5)]
    assert spans.window([7, 9], 2) == [("train_1", 7), ("eval", 9)]


def test_split_names_depend_only_on_the_window_size():
    assert [name for name, _ in spans.window([10, 11, 12, 13], 4)] == [
        name for name, _ in spans.window([1, 5, 9, 20], 4)
    ] == spans.window_train_splits(4) + [spans.WINDOW_EVAL_SPLIT]


def test_too_few_spans_or_too_small_a_window_is_refused():
    with pytest.raises(spans.WindowError, match="a window of 4 spans needs 4 span folders; found 2"):
        spans.window([1, 2], 4)
    with pytest.raises(ValueError, match="at least 2 spans"):
        spans.window([1, 2, 3], 1)


def test_input_config_has_one_split_per_span_of_the_window_named_as_its_folder(tmp_path):
    for name in ("span-1", "span-2", "span-010", "span-03", "notes", "span-x"):
        (tmp_path / name).mkdir()
    (tmp_path / "span-11").write_text("a file, not a span folder")
    chosen = window.current_window(str(tmp_path), 3)
    assert chosen == [("train_2", 2, "span-2"), ("train_1", 3, "span-03"), ("eval", 10, "span-010")]
    config = window.window_input_config(chosen)
    assert [(split.name, split.pattern) for split in config.splits] == [
        ("train_2", f"span-2/{spans.FILES_IN_SPAN}"), ("train_1", f"span-03/{spans.FILES_IN_SPAN}"),
        ("eval", f"span-010/{spans.FILES_IN_SPAN}"),
    ]


def test_a_missing_data_root_is_named(tmp_path):
    with pytest.raises(spans.DataRootError, match="does not exist"):
        window.current_window(str(tmp_path / "missing"), 2)


def test_a_run_stops_naming_both_listings_when_span_folders_changed_since_planning(tmp_path):
    """The component itself, as the pipeline runs it: its choice must be what was planned."""
    from tfx.types import standard_artifacts

    for name in ("span-1", "span-2", "span-3"):
        (tmp_path / name).mkdir()

    def run(listing, job=""):
        input_config, spans_used = standard_artifacts.String(), standard_artifacts.String()
        input_config.uri, spans_used.uri = str(tmp_path / "input_config"), str(tmp_path / "spans_used")
        fresh, inputs, serving = standard_artifacts.Integer(), standard_artifacts.String(), standard_artifacts.String()
        fresh.uri, inputs.uri, serving.uri = str(tmp_path / "fresh"), str(tmp_path / "inputs"), str(tmp_path / "s")
        window.SpanWindow.EXECUTOR_SPEC.executor_class._FUNCTION(
            data_root=str(tmp_path), window_size=2, listing=listing, input_config=input_config,
            spans_used=spans_used, fresh=fresh, inputs_used=inputs, serving_version=serving, job=job,
        )
        return spans_used.value

    assert run("span-2,span-3") == "2,3"
    (tmp_path / "span-3").rename(tmp_path / "span-003")
    with pytest.raises(ValueError, match=r"planned span-2,span-3, now span-2,span-003\); run again"):
        run("span-2,span-3")
    with pytest.raises(ValueError, match="does not resolve KFP placeholders"):
        run("", job="{{$.pipeline_job_uuid}}")
    assert run("", job="2f1c0a4e") == "2,3"


def test_a_job_whose_image_holds_other_code_or_whose_data_root_holds_a_stray_folder_stops_first(tmp_path):
    from components.support import source

    data = tmp_path / "data"
    for name in ("span-1", "span-2"):
        (data / name).mkdir(parents=True)
        (data / name / "part-0.gz").write_bytes(name.encode())
    with pytest.raises(ValueError, match=rf"compiled for the pipeline's code 0123456789abcdef, and its image holds "
                                         rf"other code \({source.of_components()}\): the image was rebuilt"):
        _run_window(tmp_path, data, tmp_path / "serving" / "big_tip", 2, code_version="0123456789abcdef")
    assert not (tmp_path / "out" / "input_config").exists()  # stopped before it wrote anything
    flag, _ = _run_window(tmp_path, data, tmp_path / "serving" / "big_tip", 2, code_version=source.of_components())
    assert flag.value == 1
    # A folder ExampleGen's pattern would ingest unchecked stops the job, as it stops a local run.
    with pytest.raises(spans.DataRootError, match="data root .*/gone does not exist or is not a folder"):
        _run_window(tmp_path, tmp_path / "gone", tmp_path / "serving" / "big_tip", 0)
    (data / "span-old").mkdir()
    for window_size in (0, 2):
        with pytest.raises(ValueError, match=r"span-old: named like a span folder but not span-<N> with N a number"):
            _run_window(tmp_path, data, tmp_path / "serving" / "big_tip", window_size)


def _run_window(tmp_path, data, model_dir, window_size, code_version=""):
    """SpanWindow's function as a compiled job runs it: its `fresh` flag and outputs."""
    from tfx.types import standard_artifacts

    outputs = {name: standard_artifacts.String()
               for name in ("input_config", "spans_used", "inputs_used", "serving_version")}
    flag = standard_artifacts.Integer()
    (tmp_path / "out").mkdir(exist_ok=True)
    for name, artifact in [*outputs.items(), ("fresh", flag)]:
        artifact.uri = str(tmp_path / "out" / name)
    window.SpanWindow.EXECUTOR_SPEC.executor_class._FUNCTION(
        data_root=str(data), window_size=window_size, listing="", fresh=flag, model_dir=str(model_dir),
        static_inputs="code-and-settings", code_version=code_version, **outputs)
    return flag, outputs


def test_a_window_whose_inputs_the_record_knows_is_not_fresh(tmp_path):
    """What the compiled pipeline's gate reads: 0 when the model's record says a candidate
    of the window's inputs serves or was the newest, else 1; a late file in a span, a new
    span or another window are new inputs."""
    from components.support import registry

    data, model_dir = tmp_path / "data", tmp_path / "serving" / "big_tip"
    for name in ("span-1", "span-2", "span-3"):
        (data / name).mkdir(parents=True)
        (data / name / "part-0.gz").write_bytes(name.encode())
    model_dir.mkdir(parents=True)

    def run(window_size):
        flag, outputs = _run_window(tmp_path, data, model_dir, window_size)
        served[0] = outputs["serving_version"].value
        return flag.value, outputs["inputs_used"].value

    served = [None]
    fresh, inputs = run(2)
    assert fresh == 1  # nothing recorded yet
    assert served == ["none"]  # and nothing serves: the baseline's cache key
    record = registry.Record()
    record.add(registry.Candidate(inputs=inputs, spans=[2, 3], fate=registry.Fate.SERVED, version=100))
    record.serving = 100
    registry.write(str(model_dir), record)
    assert run(2)[0] == 1  # the version the record names is not there: a run makes one that is
    for version in (100, 90):
        (model_dir / str(version)).mkdir()
    assert run(2) == (0, inputs)
    assert run(3)[0] == 1
    # Rolled back from: a pin serves an older version, the newest candidate had these inputs.
    record.add(registry.Candidate(inputs="older", spans=[1, 2], fate=registry.Fate.SERVED, version=90))
    record.candidates.reverse()
    record.serving, record.pinned = 90, True
    registry.write(str(model_dir), record)
    assert run(2)[0] == 0
    (data / "span-3" / "late.gz").write_bytes(b"late")
    assert run(2)[0] == 1
    (data / "span-4").mkdir()
    assert run(2)[0] == 1


def test_a_job_pinned_to_a_version_that_is_gone_stops_at_its_first_node_naming_the_ways_out(tmp_path):
    """As a local run stops before it reads the data (pipeline.run.run_state.plan)."""
    from components.support import serving_config

    data, serving_dir = tmp_path / "data", tmp_path / "serving"
    for name in ("span-1", "span-2"):
        (data / name).mkdir(parents=True)
        (data / name / "part-0.gz").write_bytes(name.encode())
    for version in ("100", "200"):
        (serving_dir / "big_tip" / version).mkdir(parents=True)
    serving_config.pin(str(serving_dir), "big_tip", 200)
    assert _run_window(tmp_path, data, serving_dir / "big_tip", 2)[0].value == 1
    (serving_dir / "big_tip" / "200").rmdir()
    with pytest.raises(serving_config.ServingConfigError, match="pinned to version 200, which is not there"):
        _run_window(tmp_path, data, serving_dir / "big_tip", 2)
