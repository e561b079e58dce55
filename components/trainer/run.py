"""The Trainer's `run_fn`: reads the config, then wires data, model, loop and export."""

from __future__ import annotations

import dataclasses
import json
import logging
import os

import tensorflow as tf
import tensorflow_transform as tft
from tfx import v1 as tfx

from components.trainer import export, model, train_loop

TRAINING_SUMMARY_FILE = "training_summary.json"


def run_fn(fn_args: tfx.components.FnArgs) -> None:
    """TFX Trainer entry point, referred to as `components.trainer.run.run_fn`."""
    config = train_loop.TrainConfig.from_custom_config(fn_args.custom_config)
    tf_transform_output = tft.TFTransformOutput(fn_args.transform_output)
    feature_spec = tf_transform_output.transformed_feature_spec()
    signature = train_loop.input_signature(feature_spec)

    train_dataset = train_loop.make_dataset(
        fn_args.train_files, feature_spec, config.batch_size, shuffle_seed=config.shuffle_seed
    )
    eval_dataset = train_loop.make_dataset(fn_args.eval_files, feature_spec, config.batch_size)
    keras_model = model.build_model()
    result = train_loop.train(keras_model, train_dataset, eval_dataset, signature, config, fn_args.model_run_dir)

    with tf.io.gfile.GFile(os.path.join(fn_args.model_run_dir, TRAINING_SUMMARY_FILE), "w") as handle:
        json.dump({"config": dataclasses.asdict(config), **dataclasses.asdict(result)}, handle, indent=2)
    logging.info(
        "trained %d epochs, %d steps: eval AUC %.4f, %.0f examples/s, traces %s",
        result.epochs_run, result.steps, result.eval_auc, result.examples_per_second, result.trace_counts,
    )
    export.export_serving_model(keras_model, tf_transform_output, fn_args.serving_model_dir)
