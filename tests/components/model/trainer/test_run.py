"""`run_fn` end to end on the tiny rows: summary, export, warmup file, warm start, and a
killed Trainer resumed by the next execution; where the checkpoints live; the batches."""

import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from tfx import v1 as tfx

from components.model import features
from components.model.trainer import export, run, settings

CUSTOM_CONFIG = {"train": {"epochs": 2, "early_stopping_patience": 0}, "export": {"warmup_requests": 5}}


def _fn_args(root, examples_file, transform_output_dir, base_model=None) -> tfx.components.FnArgs:
    return tfx.components.FnArgs(
        train_files=[examples_file],
        eval_files=[examples_file],
        transform_output=transform_output_dir,
        serving_model_dir=str(root / "serving"),
        model_run_dir=str(root / "model_run"),
        base_model=base_model,
        custom_config=CUSTOM_CONFIG,
    )


def _summary(fn_args) -> dict:
    with open(os.path.join(fn_args.model_run_dir, settings.TRAINING_SUMMARY_FILE)) as handle:
        return json.load(handle)


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, examples_file, transform_output_dir):
    root = tmp_path_factory.mktemp("first")
    # As the pipeline gives it before any version serves: the serving baseline, holding no model.
    fn_args = _fn_args(root, examples_file, transform_output_dir, base_model=str(root / "baseline" / "Format-Serving"))
    run.run_fn(fn_args)
    return fn_args


def test_summary_records_one_trace_per_function_and_the_cut_batch_size(first_run, rows, traced_once):
    summary = _summary(first_run)
    assert summary["trace_counts"] == traced_once
    assert summary["epochs_run"] == 2
    # 40 rows, at least 10 steps an epoch: batches of the 32-example floor.
    assert summary["config"]["batch_size"] == 32
    assert summary["steps"] == 2 * 2
    assert summary["warm_start"] == {"used": False, "reason": "no model serves yet", "remapped_tokens": 0}
    assert 0.0 <= summary["eval_auc"] <= 1.0


def test_the_exported_model_serves_and_carries_its_warmup_requests(first_run, rows, to_example):
    serve = tf.saved_model.load(first_run.serving_model_dir).signatures[export.SERVING_SIGNATURE]
    probability = serve(examples=tf.constant([to_example(r, include_label=False) for r in rows]))
    assert probability[export.PROBABILITY_KEY].shape == (len(rows),)
    warmup = os.path.join(first_run.serving_model_dir, export.WARMUP_FILE)
    assert sum(1 for _ in tf.data.TFRecordDataset(warmup)) == 5


def test_the_next_run_warm_starts_from_the_previous_model(first_run, tmp_path, examples_file, transform_output_dir):
    fn_args = _fn_args(tmp_path, examples_file, transform_output_dir, base_model=first_run.serving_model_dir)
    run.run_fn(fn_args)
    started = _summary(fn_args)["warm_start"]
    assert started["used"] and started["reason"] == f"started from {first_run.serving_model_dir}"


@pytest.mark.parametrize("model_run_dir, expected", [
    ("/out/pipeline_root/Trainer/model_run/17", "/out/pipeline_root/Trainer"),
    ("gs://bucket/root/Trainer/model_run/17/", "gs://bucket/root/Trainer"),
    ("/out/model_run", None),
    ("/out/Trainer/model_run/latest", None),
    ("/out/Trainer/model/17", None),
])
def test_trainer_folder_is_two_levels_above_the_execution_folder_in_tfx_layout(model_run_dir, expected):
    assert run.trainer_folder(model_run_dir) == expected


def _execution(execution_id: int, model_run_dir: str = "", **changes) -> tfx.components.FnArgs:
    """The FnArgs TFX gives execution `execution_id` of the Trainer, with `changes`."""
    values = {
        "model_run_dir": model_run_dir or f"/root/Trainer/model_run/{execution_id}",
        "train_files": ["/root/ExampleGen/examples/3/Split-train/*"],
        "eval_files": ["/root/ExampleGen/examples/3/Split-eval/*"],
        "transform_output": "/root/Transform/transform_graph/5",
        "base_model": None,
        "custom_config": {"train": {"epochs": 3}, "code_version": "abc"},
        **changes,
    }
    return tfx.components.FnArgs(**values)


def test_checkpoints_are_shared_by_executions_on_the_same_inputs_only():
    def folder(fn_args, config=settings.TrainConfig(epochs=3)):
        return run.checkpoint_dir(fn_args, config)

    first = folder(_execution(6))
    assert os.path.dirname(first) == "/root/Trainer/checkpoints"
    assert folder(_execution(7)) == first
    others = [
        folder(_execution(7, train_files=["/root/ExampleGen/examples/4/Split-train/*"])),
        folder(_execution(7, eval_files=["/root/ExampleGen/examples/4/Split-eval/*"])),
        folder(_execution(7, transform_output="/root/Transform/transform_graph/8")),
        folder(_execution(7, base_model="/root/Trainer/model/2/Format-Serving")),
        folder(_execution(7, custom_config={"train": {"epochs": 3}, "code_version": "abd"})),
        folder(_execution(7), settings.TrainConfig(epochs=3, seed=1)),
    ]
    assert len({first, *others}) == 1 + len(others)
    # Outside TFX's layout the checkpoints stay with the execution.
    assert folder(_execution(7, model_run_dir="/tmp/model_run")).startswith("/tmp/model_run/checkpoints/")


def test_each_epoch_batches_depend_on_the_seed_and_the_epoch_alone():
    rows = ({"x": tf.range(40)}, tf.range(40) % 2)

    def order(seed, epoch):
        return [int(x) for batch, _ in run.epoch_batches(rows, 16, seed)(epoch) for x in batch["x"]]

    assert sorted(order(1, 0)) == list(range(40))
    assert order(1, 3) == order(1, 3)
    assert len({tuple(order(1, 0)), tuple(order(1, 1)), tuple(order(2, 0))}) == 3


# The Trainer killed right after its checkpoint of epoch KILL_AFTER, as a SIGKILL does it.
KILLED_TRAINER = """
import json, os, signal, sys
import tensorflow as tf
from tfx import v1 as tfx
from components.model.trainer import run
fn_args, kill_after = json.loads(sys.argv[1]), int(sys.argv[2])
save = tf.train.CheckpointManager.save
def save_then_die(self, checkpoint_number=None, **kwargs):
    path = save(self, checkpoint_number=checkpoint_number, **kwargs)
    if checkpoint_number == kill_after:
        os.kill(os.getpid(), signal.SIGKILL)
    return path
tf.train.CheckpointManager.save = save_then_die
run.run_fn(tfx.components.FnArgs(**fn_args))
"""

# Evaluated on the training rows with their labels flipped (`flipped_examples_file`): the
# more an epoch learns, the worse its eval loss, so that the first epoch stays the best
# and training stops early, whatever the data order and the stack's numerics.
RESUME_CONFIG = {"train": {"epochs": 8, "early_stopping_patience": 2, "learning_rate": 0.3},
                 "export": {"warmup_requests": 0}}


@pytest.fixture(scope="module")
def flipped_examples_file(tmp_path_factory, rows, to_example) -> str:
    """`rows` with every label flipped, as one GZIP TFRecord file."""
    path = str(tmp_path_factory.mktemp("flipped") / "rows.tfrecord.gz")
    with tf.io.TFRecordWriter(path, options="GZIP") as writer:
        for row in rows:
            writer.write(to_example({**row, features.LABEL_KEY: [1 - row[features.LABEL_KEY][0]]}))
    return path


def _tfx_execution(pipeline_root, execution_id, examples_file, transform_output_dir, eval_file=None) -> dict:
    """The FnArgs, as keywords, that LocalDagRunner gives Trainer execution `execution_id`."""
    trainer = pipeline_root / "Trainer"
    return dict(
        train_files=[examples_file], eval_files=[eval_file or examples_file], transform_output=transform_output_dir,
        serving_model_dir=str(trainer / "model" / str(execution_id) / "Format-Serving"),
        model_run_dir=str(trainer / "model_run" / str(execution_id)), base_model=None, custom_config=RESUME_CONFIG,
    )


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, examples_file, flipped_examples_file, transform_output_dir):
    fn_args = tfx.components.FnArgs(**_tfx_execution(
        tmp_path_factory.mktemp("uninterrupted"), 1, examples_file, transform_output_dir, flipped_examples_file))
    run.run_fn(fn_args)
    return fn_args


def test_a_killed_trainer_is_resumed_by_the_next_execution_and_exports_the_same_model(
    uninterrupted, tmp_path, examples_file, flipped_examples_file, transform_output_dir, rows, to_example, repo, caplog
):
    summary = _summary(uninterrupted)
    assert summary["best_epoch"] + 1 < summary["epochs_run"], (
        f"the kill must fall between the best epoch and the stop: {summary['history']}")
    killed_after = summary["best_epoch"] + 1
    killed = _tfx_execution(tmp_path, 1, examples_file, transform_output_dir, flipped_examples_file)
    done = subprocess.run(
        [sys.executable, "-c", KILLED_TRAINER, json.dumps(killed), str(killed_after)],
        capture_output=True, text=True, cwd=str(repo),
    )
    assert done.returncode == -9, done.stderr[-3000:]
    checkpoints = tmp_path / "Trainer" / "checkpoints"
    assert len(os.listdir(checkpoints)) == 1

    rerun = tfx.components.FnArgs(
        **_tfx_execution(tmp_path, 2, examples_file, transform_output_dir, flipped_examples_file))
    with caplog.at_level(logging.INFO):
        run.run_fn(rerun)
    assert f"resumed from checkpoint at epoch {killed_after} of 8" in caplog.text
    resumed = _summary(rerun)
    assert resumed["resumed_from_epoch"] == killed_after
    for key in ("best_epoch", "epochs_run", "steps"):
        assert resumed[key] == summary[key], key
    # The epochs after the kill trained on the batches the uninterrupted run saw.
    for key in ("train_loss", "eval_loss"):
        np.testing.assert_allclose([epoch[key] for epoch in resumed["history"]],
                                   [epoch[key] for epoch in summary["history"]], rtol=1e-6, err_msg=key)
    examples = tf.constant([to_example(r, include_label=False) for r in rows])
    scores = [
        tf.saved_model.load(fn_args.serving_model_dir).signatures[export.SERVING_SIGNATURE](examples=examples)
        for fn_args in (uninterrupted, rerun)
    ]
    np.testing.assert_allclose(scores[1][export.PROBABILITY_KEY], scores[0][export.PROBABILITY_KEY], rtol=0, atol=1e-6)
    # Exported: the checkpoints go, and a later execution starts afresh.
    assert os.listdir(checkpoints) == []


def test_beyond_the_in_memory_limit_the_trainer_trains_from_a_transformed_cache_it_deletes_after_export(
    tmp_path, examples_file, transform_output_dir, monkeypatch, caplog
):
    monkeypatch.setattr(run.data, "IN_MEMORY_ROWS", 10)
    fn_args = _fn_args(tmp_path, examples_file, transform_output_dir)
    # What a training on other inputs left: its checkpoint, and its caches.
    stale = tmp_path / "model_run" / run.CHECKPOINTS_FOLDER / "0123456789abcdef"
    (stale / run.TRANSFORMED_CACHE_FOLDER / "train").mkdir(parents=True)
    (stale / run.TRANSFORMED_CACHE_FOLDER / "train" / run.data._CACHE_COMPLETE).write_text("")
    (stale / "ckpt-1.index").write_text("")
    key = os.path.basename(run.checkpoint_dir(fn_args, settings.TrainConfig.from_custom_config(CUSTOM_CONFIG)))
    worker = tmp_path / "model_run" / run.CHECKPOINTS_FOLDER / f"{key}-worker-1" / run.TRANSFORMED_CACHE_FOLDER
    worker.mkdir(parents=True)  # this training's other worker: kept
    with caplog.at_level(logging.INFO):
        run.run_fn(fn_args)
    assert "40 training examples > 10: transformed once into a cache on disk, written" in caplog.text
    summary = _summary(fn_args)
    assert summary["epochs_run"] == 2 and summary["steps"] == 2 * 2
    assert np.isfinite(summary["train_loss"]) and np.isfinite(summary["eval_loss"])
    assert os.path.exists(os.path.join(fn_args.serving_model_dir, "saved_model.pb"))
    # The caches lived with the checkpoints, and went with them once the model was exported;
    # the other training's caches went too, its checkpoint stayed.
    assert sorted(os.listdir(os.path.join(fn_args.model_run_dir, run.CHECKPOINTS_FOLDER))) == sorted(
        [stale.name, f"{key}-worker-1"])
    assert worker.is_dir()
    assert os.listdir(stale) == ["ckpt-1.index"]


def test_the_trainer_takes_its_training_rows_from_example_gen_s_record_and_counts_without_one(
    tmp_path, examples_file, transform_output_dir, monkeypatch, caplog
):
    """An Examples artifact whose split rows ImportExampleGen recorded is not read through
    to count them: the record decides the path (its 25 rows are within the in-memory
    limit of 30, the file's 40 rows, counted once the record is gone, are not)."""
    import shutil

    from components.model import split_rows

    artifact = tmp_path / "examples"
    for split in ("train", "eval"):
        (artifact / f"Split-{split}").mkdir(parents=True)
        shutil.copy(examples_file, artifact / f"Split-{split}" / "data.gz")
    split_rows.write(str(artifact), {"train": 25, "eval": 40})
    monkeypatch.setattr(run.data, "IN_MEMORY_ROWS", 30)
    counted = []
    monkeypatch.setattr(run.data, "count_records", lambda patterns: counted.append(patterns) or 40)
    fn_args = _fn_args(tmp_path / "recorded", examples_file, transform_output_dir)
    fn_args.train_files = [str(artifact / "Split-train" / "*")]
    fn_args.custom_config = {"train": {"epochs": 1, "early_stopping_patience": 0}, "export": {"warmup_requests": 0}}
    with caplog.at_level(logging.INFO):
        run.run_fn(fn_args)
    assert counted == []
    assert "25 training examples: transformed once, held in memory" in caplog.text
    # Without the record, the files are counted.
    (artifact / split_rows.FILE).unlink()
    caplog.clear()
    with caplog.at_level(logging.INFO):
        run.run_fn(_moved(fn_args, tmp_path / "counted"))
    assert counted == [[str(artifact / "Split-train" / "*")]]
    assert "40 training examples > 30: transformed once into a cache on disk" in caplog.text


def _moved(fn_args, root):
    """`fn_args` writing under `root` (a new execution's folders)."""
    fn_args.serving_model_dir, fn_args.model_run_dir = str(root / "serving"), str(root / "model_run")
    return fn_args
