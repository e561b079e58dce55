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

NODES = {
    "SpanWindow", "ImportExampleGen", "StatisticsGen", "InferredSchemaGen", "ImportSchemaGen", "ExampleValidator",
    "DataGate", "Transform", "Trainer", "LatestBlessedModelResolver", "Evaluator", "ServingCheck", "Pusher",
}
COMPLETE = metadata_store_pb2.Execution.COMPLETE

pytestmark = [pytest.mark.slow, pytest.mark.every_stack]


def _gzip_records(path, records):
    with tf.io.TFRecordWriter(str(path), tf.io.TFRecordOptions(compression_type="GZIP")) as writer:
        for record in records:
            writer.write(record)


def _rewritten(source_dir, edit):
    """Every example of the span folder `source_dir`, passed through `edit`, serialized."""
    records = []
    for record in tf.data.TFRecordDataset(sorted(glob.glob(str(source_dir / "*"))), compression_type="GZIP"):
        example = tf.train.Example.FromString(record.numpy())
        edit(example)
        records.append(example.SerializeToString())
    return records


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
    # The serving check ran in the probe process the run started ahead, which was handed
    # the model when the Trainer finished, and it ended.
    log = open(finished_run.result.stdout.splitlines()[-2][len("Full log: "):]).read()
    started_ahead = [line for line in log.splitlines() if "in the probe process started ahead (pid " in line]
    assert len(started_ahead) == 1, started_ahead
    assert started_ahead[0].endswith(", its model loaded ahead)"), started_ahead
    pid = int(started_ahead[0].rsplit("(pid ", 1)[1].split(",")[0])
    assert not os.path.exists(f"/proc/{pid}")


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
    assert probability.shape == (len(examples),)
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


@pytest.mark.timeout(1800)  # a run, two that run nothing, and maybe the session's run first
def test_an_unchanged_rerun_or_identical_bytes_rewritten_execute_nothing_and_push_nothing(
        copy_of_finished_run, taxi_pipeline, executions):
    ws = copy_of_finished_run
    first = taxi_pipeline("run", *ws.locations())  # the copy's paths differ: one real run first
    assert first.returncode == 0, first.stdout + first.stderr
    before, versions = executions(ws.metadata), ws.versions()
    again = taxi_pipeline("run", *ws.locations())
    assert again.returncode == 0
    assert "Nothing changed since the last run" in again.stdout
    assert executions(ws.metadata) == before
    assert ws.versions() == versions
    for path in ws.data.glob("span-*/*.gz"):  # what `cp -r` or a re-run of an export job does
        content = path.read_bytes()
        path.unlink()
        path.write_bytes(content)
    rewritten = taxi_pipeline("run", *ws.locations())
    assert rewritten.returncode == 0, rewritten.stdout + rewritten.stderr
    assert "Nothing changed since the last run" in rewritten.stdout
    assert executions(ws.metadata) == before and ws.versions() == versions


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
