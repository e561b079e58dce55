"""The whole DAG with LocalDagRunner on a small slice of data/, then an unchanged re-run."""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2

from components import features
from pipeline import cli

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SLICE_SPANS = (12, 13, 14, 15, 16)
NODES = {
    "ImportExampleGen", "StatisticsGen", "InferredSchemaGen", "ImportSchemaGen", "ExampleValidator",
    "DataGate", "Transform", "Trainer", "LatestBlessedModelResolver", "Evaluator", "Pusher",
}

pytestmark = pytest.mark.slow


def _copy_spans(target):
    for span in SLICE_SPANS:
        shutil.copytree(os.path.join(REPO, "data", f"span-{span}"), target / f"span-{span}")


def _executions(metadata_path):
    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = str(metadata_path)
    store = metadata_store.MetadataStore(config)
    by_node = {}
    for context in store.get_contexts_by_type("node"):
        node = context.name.split(".", 1)[1]
        by_node[node] = [e.last_known_state for e in store.get_executions_by_context(context.id)]
    return by_node


def _examples_without_label(data_root, count=50):
    files = tf.io.gfile.glob(os.path.join(str(data_root), "span-*", "*"))
    serialized = []
    for record in tf.data.TFRecordDataset(files, compression_type="GZIP").take(count):
        example = tf.train.Example.FromString(record.numpy())
        del example.features.feature[features.LABEL_KEY]
        serialized.append(example.SerializeToString())
    return serialized


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e")
    _copy_spans(root / "data")
    return root


def _run(root):
    return cli.main(["run", "--data-root", str(root / "data"), "--output-root", str(root / "out"),
                     "--serving-dir", str(root / "serving")])


@pytest.fixture(scope="module")
def first_run(workspace):
    return _run(workspace)


def test_first_run_executes_every_node_and_pushes_one_version(workspace, first_run):
    assert first_run == 0
    executions = _executions(workspace / "out" / "metadata.sqlite")
    assert set(executions) == NODES
    assert all(states == [metadata_store_pb2.Execution.COMPLETE] for states in executions.values()), executions
    assert len(os.listdir(workspace / "serving" / "big_tip")) == 1


def test_pushed_model_scores_examples_without_label(workspace, first_run):
    (version,) = os.listdir(workspace / "serving" / "big_tip")
    loaded = tf.saved_model.load(str(workspace / "serving" / "big_tip" / version))
    examples = _examples_without_label(workspace / "data")
    outputs = loaded.signatures["serving_default"](examples=tf.constant(examples))
    probability = outputs["probability"].numpy()
    assert probability.shape == (len(examples),)
    assert np.all((probability >= 0.0) & (probability <= 1.0))
    assert set(np.unique(outputs["class_id"].numpy())) <= {0, 1}
    assert set(loaded.signatures) == {"serving_default", "serving_raw", "transform_features"}


def test_pushed_model_carries_the_warmup_requests_and_the_training_summary(workspace, first_run):
    (version,) = os.listdir(workspace / "serving" / "big_tip")
    warmup = workspace / "serving" / "big_tip" / version / "assets.extra" / "tf_serving_warmup_requests"
    records = list(tf.data.TFRecordDataset(str(warmup)))
    assert 0 < len(records) <= 1000
    (summary_path,) = tf.io.gfile.glob(str(workspace / "out" / "pipeline_root" / "Trainer" / "model_run" / "*"
                                           / "training_summary.json"))
    with open(summary_path) as handle:
        summary = json.load(handle)
    assert summary["trace_counts"] == {"train_step": 1, "eval_step": 1, "loop_train_step": 1, "loop_eval_step": 1, "metric_results": 1}
    assert summary["eval_auc"] > 0.8


def test_unchanged_rerun_executes_nothing_and_pushes_nothing(workspace, first_run, capsys):
    before = _executions(workspace / "out" / "metadata.sqlite")
    assert _run(workspace) == 0
    assert "Nothing changed since the last run" in capsys.readouterr().out
    assert _executions(workspace / "out" / "metadata.sqlite") == before
    assert len(os.listdir(workspace / "serving" / "big_tip")) == 1


def test_export_is_hermetic(workspace, first_run):
    shutil.rmtree(workspace / "out" / "pipeline_root" / "Transform")
    (version,) = os.listdir(workspace / "serving" / "big_tip")
    loaded = tf.saved_model.load(str(workspace / "serving" / "big_tip" / version))
    outputs = loaded.signatures["serving_default"](examples=tf.constant(_examples_without_label(workspace / "data", 5)))
    assert outputs["probability"].shape == (5,)


def test_data_breaking_the_schema_is_rejected_with_exit_4(tmp_path, capsys):
    data = tmp_path / "data" / "span-16"
    data.mkdir(parents=True)
    source = tf.io.gfile.glob(os.path.join(REPO, "data", "span-16", "*"))
    options = tf.io.TFRecordOptions(compression_type="GZIP")
    with tf.io.TFRecordWriter(str(data / "bad.tfrecord.gz"), options) as writer:
        for record in tf.data.TFRecordDataset(source, compression_type="GZIP"):
            example = tf.train.Example.FromString(record.numpy())
            example.features.feature["trip_start_hour"].int64_list.value[:] = [99]
            writer.write(example.SerializeToString())
    status = cli.main(["run", "--data-root", str(tmp_path / "data"), "--output-root", str(tmp_path / "out"),
                       "--serving-dir", str(tmp_path / "serving")])
    out = capsys.readouterr().out
    assert status == 4
    assert "trip_start_hour" in out
    assert not (tmp_path / "serving").exists()


def _bad_data_root(workspace, name):
    """A copy of the workspace's data with one more span, span-17, to be spoiled."""
    root = workspace / f"bad-{name}"
    shutil.copytree(workspace / "data", root)
    (root / "span-17").mkdir()
    return root


def _gzip_records(path, records):
    with tf.io.TFRecordWriter(str(path), tf.io.TFRecordOptions(compression_type="GZIP")) as writer:
        for record in records:
            writer.write(record)


def _real_file():
    return sorted(tf.io.gfile.glob(os.path.join(REPO, "data", "span-16", "*")))[0]


def _truncated(span):
    data = open(_real_file(), "rb").read()
    (span / "trips.tfrecord.gz").write_bytes(data[: len(data) // 2])


def _corrupted(span):
    data = bytearray(open(_real_file(), "rb").read())
    for i in range(len(data) // 3, len(data) // 3 + 64):
        data[i] ^= 0xFF
    (span / "trips.tfrecord.gz").write_bytes(bytes(data))


def _not_a_tfrecord(span):
    (span / "notes.txt").write_text("trip_id,fare\n1,12.5\n")


def _uncompressed(span):
    records = [r.numpy() for r in tf.data.TFRecordDataset(_real_file(), compression_type="GZIP").take(10)]
    with tf.io.TFRecordWriter(str(span / "trips.tfrecord")) as writer:
        for record in records:
            writer.write(record)


def _not_examples(span):
    _gzip_records(span / "trips.tfrecord.gz", [b"\xff\xfe garbage", b"\x08\x96\x01 more"])


def _empty_span(span):
    pass


BAD_FILES = {
    "truncated": (_truncated, "trips.tfrecord.gz"),
    "corrupted": (_corrupted, "trips.tfrecord.gz"),
    "not_a_tfrecord": (_not_a_tfrecord, "notes.txt"),
    "uncompressed": (_uncompressed, "trips.tfrecord"),
    "not_examples": (_not_examples, "trips.tfrecord.gz"),
    "empty_span": (_empty_span, "span-17"),
}


def _state(workspace):
    return _executions(workspace / "out" / "metadata.sqlite"), sorted(os.listdir(workspace / "serving" / "big_tip"))


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_unreadable_input_is_rejected_naming_the_file_and_nothing_changes(workspace, first_run, case, capsys):
    spoil, named = BAD_FILES[case]
    root = _bad_data_root(workspace, case)
    spoil(root / "span-17")
    before = _state(workspace)
    status = cli.main(["run", "--data-root", str(root), "--output-root", str(workspace / "out"),
                       "--serving-dir", str(workspace / "serving")])
    captured = capsys.readouterr()
    assert status == 4, captured
    assert named in captured.err
    assert _state(workspace) == before


def test_examples_missing_a_required_feature_are_rejected_naming_it(workspace, first_run, capsys):
    root = _bad_data_root(workspace, "missing_fare")
    records = []
    for record in tf.data.TFRecordDataset(_real_file(), compression_type="GZIP"):
        example = tf.train.Example.FromString(record.numpy())
        del example.features.feature["fare"]
        records.append(example.SerializeToString())
    _gzip_records(root / "span-17" / "trips.tfrecord.gz", records)
    serving_before = _state(workspace)[1]
    status = cli.main(["run", "--data-root", str(root), "--output-root", str(workspace / "out"),
                       "--serving-dir", str(workspace / "serving")])
    out = capsys.readouterr().out
    assert status == 4
    assert "'fare'" in out
    assert _state(workspace)[1] == serving_before


def test_a_model_trained_on_corrupted_labels_is_not_pushed_and_the_old_one_keeps_serving(workspace, first_run, capsys):
    root = workspace / "random-labels"
    rng = np.random.default_rng(0)
    for span_dir in sorted((workspace / "data").iterdir()):
        records = []
        for record in tf.data.TFRecordDataset(str(next(span_dir.iterdir())), compression_type="GZIP"):
            example = tf.train.Example.FromString(record.numpy())
            example.features.feature[features.LABEL_KEY].int64_list.value[:] = [int(rng.integers(0, 2))]
            records.append(example.SerializeToString())
        (root / span_dir.name).mkdir(parents=True)
        _gzip_records(root / span_dir.name / "trips.tfrecord.gz", records)
    serving_before = _state(workspace)[1]
    status = cli.main(["run", "--data-root", str(root), "--output-root", str(workspace / "out"),
                       "--serving-dir", str(workspace / "serving")])
    out = capsys.readouterr().out
    assert status == 3, out
    assert "NOT blessed" in out
    assert _state(workspace)[1] == serving_before


def test_a_candidate_worse_than_the_blessed_baseline_is_not_pushed(workspace, first_run):
    """Only the change threshold applies here (min_auc 0): an all but untrained candidate
    is far below the serving model on the same eval data."""
    from components.trainer.settings import TrainConfig
    from pipeline import config as config_lib, local_runner
    from pipeline.run_record import Outcome

    serving_before = _state(workspace)[1]
    run_config = config_lib.RunConfig(
        data_root=str(workspace / "data"), output_root=str(workspace / "out"), serving_dir=str(workspace / "serving"),
        beam_args=config_lib.local_beam_args(), warm_start=False,
        train=TrainConfig(epochs=1, learning_rate=1e-7),
        evaluation=config_lib.EvaluationConfig(min_auc=0.0),
    ).resolved()
    report = local_runner.run(run_config, force=True)
    assert report.outcome is Outcome.NOT_BLESSED, report
    assert report.eval_metrics["auc"] < 0.9
    assert _state(workspace)[1] == serving_before
