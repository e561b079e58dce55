"""What operators do between runs: edit the schema, copy data around, land a span with a
problem of its own. Each as the command line meets it. (Span folders named their way:
tests/test_scale.py and tests/test_retraining.py.)"""

import math
import re

import pytest

from components.model import features
from tests.helpers import span_like, unknown_payment, write_records

pytestmark = pytest.mark.slow


def _states(record):
    return {node["node_id"]: node["state"] for node in record["nodes"]}


# Each kind of code an operator edits: (file, class or None, function) in the project.
EDITED = {
    "ImportExampleGen": ("components/custom/ingest.py", "FileExecutor", "Do"),  # a class executor
    "Transform": ("components/model/preprocessing.py", None, "preprocessing_fn"),  # Transform's module
    "Trainer": ("components/model/trainer/run.py", None, "run_fn"),  # the Trainer's module
    "ServingCheck": ("components/custom/serving_check.py", None, "ServingCheck"),  # a function component
    "Pusher": ("components/custom/pusher.py", "Executor", "Do"),  # a class component's executor
}


def _mark_when_run(path, owner, function, mark):
    """Inserts, as the first statement of `function` (a method of `owner` when given), a
    line that creates the file `mark`: a change of behaviour the next run shows."""
    import ast

    source = path.read_text()
    tree = ast.parse(source)
    scope = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == owner) if owner else tree
    (found,) = [node for node in scope.body if isinstance(node, ast.FunctionDef) and node.name == function]
    first = found.body[0]
    lines = source.splitlines(keepends=True)
    lines.insert(first.lineno - 1, " " * first.col_offset + f"open({str(mark)!r}, 'w').close()\n")
    path.write_text("".join(lines))


@pytest.mark.timeout(1800)  # five runs, two of them training
def test_edits_to_the_schema_and_to_any_kind_of_component_take_effect_on_the_next_run_with_the_same_data(
    copy_of_finished_run, project_copy, last_run, tmp_path
):
    """An edited schema is used by the next run, and undoing the edit restores the cached
    verdict. TFX's cache key names a custom component's executor or module file, not its
    code: without the package's fingerprint among their parameters, an edited executor,
    module or gate kept its cached outputs until new data landed. Every kind, edited at
    once, runs edited; then the gate, edited to refuse, refuses the same data."""
    ws = copy_of_finished_run
    # The copy of the code sits elsewhere, and TFX's cache keys name the schema's and the
    # data's paths: one run records every node in the copy's terms (nothing changed, so
    # without --force it would run nothing), and each node is cached after.
    first = project_copy("run", *ws.locations(), "--force")
    assert first.returncode == 0, first.stdout + first.stderr
    versions = ws.versions()
    schema = project_copy.path / "components" / "model" / "schema" / "schema.pbtxt"
    original = schema.read_text()
    hour = re.search(r'name: "trip_start_hour"\n(?:.*\n)*?  int_domain \{\n    min: 0\n    max: 23', original)
    assert hour, "the schema's trip_start_hour domain"
    schema.write_text(original.replace(hour.group(0), hour.group(0)[:-2] + "10"))

    narrowed = project_copy("run", *ws.locations())
    assert narrowed.returncode == 4, narrowed.stdout + narrowed.stderr
    record = last_run(ws.out)
    assert any("'trip_start_hour'" in line for line in record["anomalies"])
    assert _states(record)["ImportSchemaGen"] == _states(record)["ExampleValidator"] == "ran"
    assert "trip_start_hour" in narrowed.stdout
    assert ws.versions() == versions

    schema.write_text(original)
    # The revert's inputs are those of the forced run's candidate (served, or not blessed):
    # nothing trains, whatever the warm start would have been.
    restored = project_copy("run", *ws.locations())
    assert restored.returncode in (0, 3), restored.stdout + restored.stderr
    assert "Nothing to train: version " in restored.stdout or "Nothing to train: the candidate of run " in \
        restored.stdout, restored.stdout
    assert ws.versions() == versions

    for node, (file, owner, function) in EDITED.items():
        _mark_when_run(project_copy.path / file, owner, function, tmp_path / f"{node}.ran")
    edited = project_copy("run", *ws.locations())
    # Warm-started on the same data, the candidate may or may not beat the model it was
    # evaluated against: pushed (0) or not (3), the edited code ran either way.
    assert edited.returncode in (0, 3), edited.stdout + edited.stderr
    assert sorted(mark.stem for mark in tmp_path.glob("*.ran")) == sorted(EDITED)
    states = _states(last_run(ws.out))
    assert all(states[node] == "ran" for node in EDITED), states
    versions = ws.versions()

    gate = project_copy.path / "components" / "custom" / "gate.py"
    verdict = "verdict.set_int_custom_property(BLESSED_PROPERTY, 1 if schema_ok and spans_ok and not lines else 0)"
    source = gate.read_text()
    assert verdict in source, "the gate's verdict line"
    gate.write_text(source.replace(verdict, "lines = ['an operator made the gate refuse everything']\n        "
                                            "verdict.set_int_custom_property(BLESSED_PROPERTY, 0)"))
    stricter = project_copy("run", *ws.locations())
    assert stricter.returncode == 4, stricter.stdout + stricter.stderr
    assert "an operator made the gate refuse everything" in stricter.stdout
    assert _states(last_run(ws.out))["DataGate"] == "ran"
    assert ws.versions() == versions


def _nan_fare(example):
    example.features.feature["fare"].float_list.value[:] = [math.nan]


@pytest.mark.parametrize("edit, every, feature", [
    (unknown_payment, 20, "payment_type"),  # 5% of the new span, 0.3% of all spans
    (_nan_fare, 100, "fare"),
])
def test_a_problem_confined_to_the_new_span_is_rejected_naming_the_span(
    copy_of_finished_run, taxi_pipeline, last_run, edit, every, feature
):
    ws = copy_of_finished_run
    versions = ws.versions()
    write_records(ws.data / "span-17" / "trips.tfrecord.gz", span_like(ws.data / "span-16", every, edit))
    result = taxi_pipeline("run", *ws.locations())
    assert result.returncode == 4, result.stdout + result.stderr
    record = last_run(ws.out)
    assert record["outcome"] == "data rejected"
    assert record["span_checks"]["17"] and not any(record["span_checks"][s] for s in ("12", "13", "14", "15", "16"))
    assert any(line.startswith("[span 17]") and repr(feature) in line for line in record["anomalies"])
    assert "rejected 17 (1 finding)" in result.stdout
    assert ws.versions() == versions


def _inverted_label(example) -> None:
    label = example.features.feature[features.LABEL_KEY].int64_list.value
    label[:] = [1 - label[0]]


@pytest.mark.parametrize("command", [("run",), ("retrain", "--window", "3")], ids=["all spans", "window"])
def test_a_new_span_whose_label_was_corrupted_upstream_is_rejected_naming_the_label(
    copy_of_finished_run, taxi_pipeline, last_run, command
):
    """Every feature of span 17 is span 16's; only the label is inverted (a broken join
    upstream). Over every span DataGate computes the spans' statistics with the schema
    (the label categorical); in a window it reads StatisticsGen's (the label numeric)."""
    ws = copy_of_finished_run
    served = ws.good_state()
    served.pop(str(ws.metadata.relative_to(ws.root)))
    served.pop(str((ws.out / "last_run.json").relative_to(ws.root)))
    write_records(ws.data / "span-17" / "trips.tfrecord.gz", span_like(ws.data / "span-16", 1, _inverted_label))
    result = taxi_pipeline(*command, *ws.locations())
    assert result.returncode == 4, result.stdout + result.stderr
    (line,) = [line for line in last_run(ws.out)["anomalies"] if "label" in line]
    assert line.startswith("[label span 16 -> 17] label 'big_tip': share of 1s 0.264 -> 0.736, L_INFTY=0.473")
    assert "label 'big_tip'" in result.stdout and "Data rejected; nothing was trained or pushed." in result.stdout
    assert {k: v for k, v in ws.good_state().items() if k in served} == served
