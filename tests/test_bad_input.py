"""Bad input, as an operator meets it: a clear error naming the problem, exit 4 (or 3 for a
model not worth pushing), and nothing already good lost: MLMD and serving_model/ unchanged."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from components.custom import serving_check
from components.model import features
from tests.helpers import REPO_ROOT, assert_one_clear_line, full_log, span_like, write_records

pytestmark = pytest.mark.slow


# A span of data/ to make bad spans from: its one file, its examples.
SOURCE_SPAN = REPO_ROOT / "data" / "span-16"


def _unchanged(example) -> None:
    pass


@pytest.fixture
def real_file():
    (path,) = SOURCE_SPAN.glob("*.gz")
    return str(path)


def _truncated(span, real_file):
    data = open(real_file, "rb").read()
    (span / "trips.tfrecord.gz").write_bytes(data[: len(data) // 2])


def _corrupted(span, real_file):
    data = bytearray(open(real_file, "rb").read())
    for i in range(len(data) // 3, len(data) // 3 + 64):
        data[i] ^= 0xFF
    (span / "trips.tfrecord.gz").write_bytes(bytes(data))


def _not_a_tfrecord(span, real_file):
    (span / "notes.txt").write_text("trip_id,fare\n1,12.5\n")


def _uncompressed(span, real_file):
    write_records(span / "trips.tfrecord", span_like(SOURCE_SPAN, 1, _unchanged)[:10], compression="")


def _not_examples(span, real_file):
    write_records(span / "trips.tfrecord.gz", [b"\xff\xfe garbage", b"\x08\x96\x01 more"])


def _wrong_type(span, real_file):
    def fare_as_text(example):
        fare = example.features.feature["fare"]
        value = fare.float_list.value[0]
        fare.ClearField("float_list")
        fare.bytes_list.value.append(str(value).encode())

    write_records(span / "trips.tfrecord.gz", span_like(SOURCE_SPAN, 1, fare_as_text))


def _empty_file(span, real_file):
    (span / "trips.tfrecord.gz").write_bytes(b"")


def _empty_span(span, real_file):
    pass


BAD_FILES = {
    "truncated": (_truncated, "trips.tfrecord.gz"),
    "corrupted": (_corrupted, "trips.tfrecord.gz"),
    "not_a_tfrecord": (_not_a_tfrecord, "notes.txt"),
    "uncompressed": (_uncompressed, "trips.tfrecord"),
    "not_examples": (_not_examples, "trips.tfrecord.gz"),
    "wrong_type": (_wrong_type, "trips.tfrecord.gz"),
    "empty_file": (_empty_file, "trips.tfrecord.gz"),
    "empty_span": (_empty_span, "span-17"),
}


def _state(ws, executions):
    return executions(ws.metadata), ws.versions()


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_unreadable_input_is_rejected_naming_the_file_and_nothing_changes(
    copy_of_finished_run, taxi_pipeline, executions, real_file, case
):
    ws = copy_of_finished_run
    spoil, named = BAD_FILES[case]
    (ws.data / "span-17").mkdir()
    spoil(ws.data / "span-17", real_file)
    before = _state(ws, executions)
    result = taxi_pipeline("run", *ws.locations())
    line = assert_one_clear_line(result, 4, "data rejected: ")
    assert named in line
    if case == "wrong_type":  # the feature and its types, not TensorFlow's internal names
        assert "has feature 'fare' as string, where the contract has float" in line and "{{" not in line
    assert "Data rejected; nothing was trained or pushed." in result.stdout
    assert _state(ws, executions) == before
    # The run's page says so too, though nothing reached MLMD.
    page = result.stdout.splitlines()[-1]
    assert page.startswith("Report: ") and page.endswith("-rejected.html")
    text = open(page[len("Report: "):]).read()
    assert "Data rejected: nothing was trained or pushed (exit 4)." in text and named in text


def test_data_breaking_the_schema_is_rejected_with_exit_4(workspace, taxi_pipeline, last_run):
    def out_of_range_hour(example):
        example.features.feature["trip_start_hour"].int64_list.value[:] = [99]

    write_records(workspace.data / "span-16" / "bad.tfrecord.gz", span_like(SOURCE_SPAN, 1, out_of_range_hour))
    result = taxi_pipeline("run", *workspace.locations())
    assert result.returncode == 4, result.stdout + result.stderr
    record = last_run(workspace.out)
    assert record["outcome"] == "data rejected"
    assert any("'trip_start_hour'" in line for line in record["anomalies"]), record["anomalies"]
    assert "trip_start_hour" in result.stdout
    assert not workspace.serving.exists()
    # The serving check's probe waits for the gate: a refused run starts no process for it.
    assert serving_check.STARTED_AHEAD not in full_log(result)


def test_examples_missing_a_required_feature_are_rejected_naming_it(copy_of_finished_run, taxi_pipeline, last_run):
    ws = copy_of_finished_run
    versions = ws.versions()
    write_records(ws.data / "span-17" / "trips.tfrecord.gz",
                       span_like(SOURCE_SPAN, 1, lambda example: example.features.feature.pop("fare")))
    result = taxi_pipeline("run", *ws.locations())
    assert result.returncode == 4, result.stdout + result.stderr
    assert any("'fare'" in line for line in last_run(ws.out)["anomalies"])
    assert ws.versions() == versions


def test_a_model_trained_on_corrupted_labels_is_not_pushed_and_the_old_one_keeps_serving(
    copy_of_finished_run, taxi_pipeline, last_run
):
    ws = copy_of_finished_run
    versions = ws.versions()
    rng = np.random.default_rng(0)

    def random_label(example):
        example.features.feature[features.LABEL_KEY].int64_list.value[:] = [int(rng.integers(0, 2))]

    for span_dir in sorted(ws.data.iterdir()):
        (source,) = list(span_dir.iterdir())
        records = span_like(span_dir, 1, random_label)
        source.unlink()
        write_records(span_dir / "trips.tfrecord.gz", records)
    result = taxi_pipeline("run", *ws.locations())
    assert result.returncode == 3, result.stdout + result.stderr
    assert "NOT blessed" in result.stdout
    assert last_run(ws.out)["outcome"] == "not blessed"
    assert ws.versions() == versions


def test_a_candidate_worse_than_the_blessed_baseline_is_not_pushed(copy_of_finished_run, last_run):
    """Only the change threshold applies here (min_auc 0): an all but untrained candidate
    is far below the serving model on the same eval data."""
    ws = copy_of_finished_run
    versions = ws.versions()
    script = textwrap.dedent(f"""
        import dataclasses, sys
        from components.model.trainer.settings import TrainConfig
        from pipeline import config
        from pipeline.beam import options as beam_options
        from pipeline.run import local_runner, run_state
        base = config.RunConfig(data_root={str(ws.data)!r}, output_root={str(ws.out)!r},
                                serving_dir={str(ws.serving)!r}).resolved()
        run_config = dataclasses.replace(base, settings=dataclasses.replace(
            base.settings, beam_args=beam_options.local_beam_args(), warm_start=False,
            train=TrainConfig(epochs=1, learning_rate=1e-7), evaluation=config.EvaluationConfig(min_auc=0.0)))
        report = local_runner.run(run_config, run_state.plan(run_config))
        sys.exit(int(report.outcome.exit_code))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert result.returncode == 3, result.stderr[-3000:]
    record = last_run(ws.out)
    assert record["outcome"] == "not blessed"
    assert record["eval_metrics"]["auc"] < 0.9
    assert ws.versions() == versions
