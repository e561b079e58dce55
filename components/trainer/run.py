"""The Trainer's `run_fn`: reads the config, then wires data, model, loop and export."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Iterator, Sequence, Tuple

import tensorflow as tf
import tensorflow_transform as tft
from tfx import v1 as tfx

from components.trainer import data, export, loop, model, settings, warm_start

TRAINING_SUMMARY_FILE = "training_summary.json"


def _serialized_examples(file_patterns: Sequence[str]) -> Iterator[bytes]:
    for record in tf.data.TFRecordDataset(data.list_files(file_patterns), compression_type="GZIP"):
        yield record.numpy()


def _datasets(
    fn_args: tfx.components.FnArgs, tf_transform_output: tft.TFTransformOutput, config: settings.TrainConfig
) -> Tuple[tf.data.Dataset, tf.data.Dataset, settings.TrainConfig]:
    """The train and eval datasets, and `config` with the batch size they were cut to."""
    transform = data.transform_fn(tf_transform_output)
    train_rows = data.transformed_rows(fn_args.train_files, transform)
    train_examples = data.count_rows(train_rows)
    batch_size = data.effective_batch_size(config, train_examples)
    if batch_size != config.batch_size:
        logging.info("%d training examples: batches of %d instead of %d, for %d steps an epoch",
                     train_examples, batch_size, config.batch_size, config.min_steps_per_epoch)
        config = dataclasses.replace(config, batch_size=batch_size)
    train_dataset = data.batched(train_rows, config.batch_size, shuffle_seed=config.seed)
    eval_dataset = data.make_dataset(fn_args.eval_files, transform, config.batch_size)
    return train_dataset, eval_dataset, config


def _write_summary(
    model_run_dir: str, config: settings.TrainConfig, started: warm_start.WarmStart, result: loop.TrainResult
) -> None:
    """`training_summary.json`: config, warm start and `TrainResult`. Written as soon as
    training ends, before the export, so that a failed export still leaves its record."""
    with tf.io.gfile.GFile(os.path.join(model_run_dir, TRAINING_SUMMARY_FILE), "w") as handle:
        json.dump(
            {"config": dataclasses.asdict(config), "warm_start": dataclasses.asdict(started),
             **dataclasses.asdict(result)},
            handle, indent=2,
        )


def run_fn(fn_args: tfx.components.FnArgs) -> None:
    """TFX Trainer entry point, referred to as `components.trainer.run.run_fn`.

    `fn_args.train_files` / `eval_files` are raw examples; the Transform layer is
    applied while the datasets are built, and saved inside the exported model.
    """
    config = settings.TrainConfig.from_custom_config(fn_args.custom_config)
    export_config = settings.ExportConfig.from_custom_config(fn_args.custom_config)
    tf_transform_output = tft.TFTransformOutput(fn_args.transform_output)
    train_dataset, eval_dataset, config = _datasets(fn_args, tf_transform_output, config)

    tf.keras.utils.set_random_seed(config.seed)
    strategy = loop.choose_strategy()
    with strategy.scope():
        keras_model = model.build_model(model.ModelConfig(mixed_precision=config.mixed_precision))
        started = (
            warm_start.warm_start(keras_model, fn_args.base_model, tf_transform_output)
            if fn_args.base_model
            else warm_start.WarmStart(False, "no blessed model yet")
        )
    logging.info("warm start: %s: %s", "yes" if started.used else "no, training from scratch", started.reason)

    signature = data.input_signature(tf_transform_output.transformed_feature_spec())
    result = loop.train(keras_model, train_dataset, eval_dataset, signature, config, fn_args.model_run_dir, strategy)
    _write_summary(fn_args.model_run_dir, config, started, result)
    logging.info(
        "trained %d epochs, %d steps on %d replica(s): eval AUC %.4f, %.0f examples/s, traces %s",
        result.epochs_run, result.steps, strategy.num_replicas_in_sync, result.eval_auc,
        result.examples_per_second, result.trace_counts,
    )

    export.export_serving_model(keras_model, tf_transform_output, fn_args.serving_model_dir)
    if export_config.tflite:
        logging.info("TFLite model written to %s",
                     export.write_tflite(keras_model, tf_transform_output, fn_args.serving_model_dir))
    export.write_warmup_requests(
        fn_args.serving_model_dir,
        _serialized_examples(fn_args.eval_files),
        export_config.model_name,
        export_config.warmup_requests,
    )
