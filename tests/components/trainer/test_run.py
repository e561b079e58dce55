"""`run_fn` end to end on the tiny rows: summary, export, warmup file, warm start."""

import json
import os

import pytest
import tensorflow as tf
from tfx import v1 as tfx

from components.trainer import export, run

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
    with open(os.path.join(fn_args.model_run_dir, run.TRAINING_SUMMARY_FILE)) as handle:
        return json.load(handle)


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, examples_file, transform_output_dir):
    fn_args = _fn_args(tmp_path_factory.mktemp("first"), examples_file, transform_output_dir)
    run.run_fn(fn_args)
    return fn_args


def test_summary_records_one_trace_per_function_and_the_cut_batch_size(first_run, rows, traced_once):
    summary = _summary(first_run)
    assert summary["trace_counts"] == traced_once
    assert summary["epochs_run"] == 2
    # 40 rows, at least 10 steps an epoch: batches of the 32-example floor.
    assert summary["config"]["batch_size"] == 32
    assert summary["steps"] == 2 * 2
    assert summary["warm_start"] == {"used": False, "reason": "no blessed model yet", "remapped_tokens": 0}
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
