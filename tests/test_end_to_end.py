"""The whole DAG with LocalDagRunner on a small slice of data/, as a user runs it, then
the inputs a user can get wrong."""

import glob
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from ml_metadata.proto import metadata_store_pb2

from components import compat
from components.custom import serving_check
from pipeline import config
from tests.helpers import Workspace

NODES = {
    "SpanWindow", "ImportExampleGen", "StatisticsGen", "InferredSchemaGen", "ImportSchemaGen", "ExampleValidator",
    "DataGate", "Transform", "ServingBaseline", "Trainer", "Evaluator", "ServingCheck", "ShadowCheck", "Pusher",
}
COMPLETE = metadata_store_pb2.Execution.COMPLETE

pytestmark = [pytest.mark.slow, pytest.mark.every_stack]


def test_first_run_executes_every_node_once_and_pushes_one_version(finished_run, executions, last_run):
    ws = finished_run.workspace
    by_node = executions(ws.metadata)
    assert set(by_node) == NODES
    assert all(states == [COMPLETE] for states in by_node.values()), by_node
    assert len(ws.versions()) == 1
    record = last_run(ws.out)
    assert record["outcome"] == "pushed"
    assert record["spans"] == [12, 13, 14, 15, 16]
    assert record["pushed_version_dir"] == str(ws.model_dir / ws.versions()[0])
    assert {node["node_id"] for node in record["nodes"]} == NODES
    assert record["eval_metrics"]["auc"] > 0.8
    assert record["stack"] == compat.describe()
    assert record["baseline"] == "none"  # nothing served: trained from scratch, judged by the absolute thresholds
    assert "Baseline (warm start and comparison): none, no version served" in finished_run.result.stdout
    # The serving check ran in the probe process the run started ahead, which was handed
    # the model when the Trainer finished, and it ended.
    log = open(finished_run.result.stdout.splitlines()[-2][len("Full log: "):]).read()
    started_ahead = [line for line in log.splitlines() if "in the probe process started ahead (pid " in line]
    assert len(started_ahead) == 1, started_ahead
    assert started_ahead[0].endswith(", its model loaded ahead)"), started_ahead
    pid = int(started_ahead[0].rsplit("(pid ", 1)[1].split(",")[0])
    assert not os.path.exists(f"/proc/{pid}")
    # Started once the data gate let the run through (a refused run starts none:
    # tests/test_bad_input.py), before the Trainer ran.
    (started,) = [number for number, line in enumerate(log.splitlines())
                  if f"{serving_check.STARTED_AHEAD} (pid {pid})" in line]
    (gate_done,) = [number for number, line in enumerate(log.splitlines()) if "Component DataGate is finished" in line]
    trainer_started = min(number for number, line in enumerate(log.splitlines()) if "[Trainer]" in line)
    assert gate_done < started < trainer_started
    # The gate took the spans' statistics computed in the process started with the run
    # (the same as its own: tests/pipeline/run/test_statistics_ahead.py), which ended.
    (ahead,) = [line for line in log.splitlines() if "span statistics: computed ahead in a process" in line]
    assert "span statistics: computed ahead, in the process started with the run" in log
    assert not os.path.exists(f"/proc/{int(ahead.rsplit('(pid ', 1)[1].rstrip(')'))}")
    assert not (ws.out / config.STATISTICS_AHEAD_DIR).exists()


def test_a_run_leaves_nothing_in_the_temporary_folder(finished_run):
    # AutoGraph's generated sources, Beam's pipeline folders (TFX's archive of itself is
    # built only without --setup_file: tests/pipeline/patches/test_tfx.py).
    assert sorted(os.listdir(finished_run.workspace.root / "tmp")) == []


def test_console_shows_progress_per_component_then_the_outcome(finished_run):
    out = finished_run.result.stdout
    for node in ("ImportExampleGen", "Transform", "Trainer", "Evaluator", "Pusher"):
        assert f"] {node} " in out
    lines = out.splitlines()
    assert lines[-4] == f"Stack {compat.describe()}"
    assert "Pushed a new model version:" in lines[-3]
    assert lines[-2].startswith("Full log: ")
    assert lines[-1].startswith("Report: ")  # the run's page (tests/test_operations.py)
    assert "WARNING" not in out and "Traceback" not in finished_run.result.stderr
    # Native start-up lines (TF 2.21 prints them before its log level applies) are in the log file.
    assert "I0000" not in finished_run.result.stderr and "absl::InitializeLog" not in finished_run.result.stderr


def test_pushed_model_scores_examples_without_label(finished_run, examples_without_label):
    ws = finished_run.workspace
    loaded = tf.saved_model.load(str(ws.model_dir / ws.versions()[0]))
    examples = examples_without_label(ws.data, 50)
    outputs = loaded.signatures["serving_default"](examples=tf.constant(examples))
    probability = outputs["probability"].numpy()
    assert probability.shape == (50,)  # a score for each example, and the checks below not over nothing
    assert np.all((probability >= 0.0) & (probability <= 1.0))
    assert set(np.unique(outputs["class_id"].numpy())) <= {0, 1}
    assert set(loaded.signatures) == {"serving_default", "serving_raw", "transform_features"}


def test_pushed_model_carries_the_warmup_requests_and_the_training_summary(finished_run):
    ws = finished_run.workspace
    warmup = ws.model_dir / ws.versions()[0] / "assets.extra" / "tf_serving_warmup_requests"
    records = list(tf.data.TFRecordDataset(str(warmup)))
    assert 0 < len(records) <= 1000
    (summary_path,) = glob.glob(str(ws.out / "pipeline_root" / "Trainer" / "model_run" / "*" / "training_summary.json"))
    with open(summary_path) as handle:
        summary = json.load(handle)
    assert summary["trace_counts"] == {
        "train_step": 1, "eval_step": 1, "loop_train_step": 1, "loop_eval_step": 1, "metric_results": 1,
    }
    assert summary["eval_auc"] > 0.8


def _artifact_uris(metadata_path):
    from ml_metadata import metadata_store

    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = str(metadata_path)
    config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
    return [artifact.uri for artifact in metadata_store.MetadataStore(config).get_artifacts()]


def _assert_unchanged_and_here(ws, result, before, versions, executions, last_run):
    """Nothing ran, nothing was pushed, and every record names this workspace's files."""
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Nothing changed since the last run" in result.stdout
    assert executions(ws.metadata) == before and ws.versions() == versions
    uris = _artifact_uris(ws.metadata)
    assert len(uris) > 10 and all(uri.startswith(f"{ws.root}/") for uri in uris), uris
    assert f'base_path: "{ws.model_dir}"' in (ws.serving / "models.config").read_text()
    assert last_run(ws.out)["pushed_version_dir"] == str(ws.model_dir / versions[-1])


@pytest.mark.timeout(600)
def test_a_copied_or_moved_root_and_identical_bytes_rewritten_execute_nothing_and_push_nothing(
        finished_run, copied_finished_run, taxi_pipeline, executions, last_run, tmp_path):
    """A copy of the output root, data and serving folder beside the original (what the
    suite's copies are), then the copy moved (a restore from a backup): no retraining, no
    failure, and every record points at the folder it sits in now, never the original's."""
    original = finished_run.workspace
    untouched = original.good_state()
    ws = copied_finished_run
    before, versions = executions(ws.metadata), ws.versions()
    copied = taxi_pipeline("run", *ws.locations())
    _assert_unchanged_and_here(ws, copied, before, versions, executions, last_run)
    assert f"Moved or copied output root: {len(_artifact_uris(ws.metadata))} artifact location(s)" in copied.stdout
    assert f"models.config named {original.model_dir} for big_tip" in copied.stdout
    assert original.good_state() == untouched
    again = taxi_pipeline("run", *ws.locations())
    _assert_unchanged_and_here(ws, again, before, versions, executions, last_run)
    assert "Moved or copied" not in again.stdout and "models.config named" not in again.stdout
    for path in ws.data.glob("span-*/*.gz"):  # what `cp -r` or a re-run of an export job does
        content = path.read_bytes()
        path.unlink()
        path.write_bytes(content)
    rewritten = taxi_pipeline("run", *ws.locations())
    _assert_unchanged_and_here(ws, rewritten, before, versions, executions, last_run)
    moved = Workspace(tmp_path / "restored")
    shutil.move(ws.root, moved.root)
    restored = taxi_pipeline("run", *moved.locations())
    _assert_unchanged_and_here(moved, restored, before, versions, executions, last_run)
    assert f"({ws.out} -> {moved.out}; {ws.serving} -> {moved.serving})" in restored.stdout
    assert original.good_state() == untouched


def test_export_is_hermetic(finished_run, examples_without_label, tmp_path):
    """The pushed model names no file outside itself (the vocabularies are its own assets),
    and a copy of it serves from anywhere."""
    ws = finished_run.workspace
    version_dir = ws.model_dir / ws.versions()[0]
    graph = (version_dir / "saved_model.pb").read_bytes()
    assert str(ws.out).encode() not in graph and b"pipeline_root" not in graph
    assert any(name.startswith("vocab_") for name in os.listdir(version_dir / "assets"))
    shutil.copytree(version_dir, tmp_path / "model")
    loaded = tf.saved_model.load(str(tmp_path / "model"))
    outputs = loaded.signatures["serving_default"](examples=tf.constant(examples_without_label(ws.data, 5)))
    assert outputs["probability"].shape == (5,)
