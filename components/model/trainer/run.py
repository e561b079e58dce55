"""The Trainer's `run_fn`: reads the config, then wires data, model, loop and export."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import os
import tempfile
import time
from typing import Iterator, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_transform as tft
from tfx.components.trainer.fn_args_utils import FnArgs
from tfx.types import standard_component_specs

from components import background
from components.compat import keras
from components.model import split_rows
from components.model.trainer import data, export, loop, model, settings, tflite, warm_start

# Under the Trainer's folder: `<key>/` per training in progress (see `checkpoint_dir`).
CHECKPOINTS_FOLDER = "checkpoints"
# Under a training's checkpoint folder: the transformed caches of the path beyond memory.
TRANSFORMED_CACHE_FOLDER = "transformed"


def _serialized_examples(file_patterns: Sequence[str]) -> Iterator[bytes]:
    for record in tf.data.TFRecordDataset(data.list_files(file_patterns), compression_type="GZIP"):
        yield record.numpy()


def trainer_folder(model_run_dir: str) -> Optional[str]:
    """`<pipeline root>/<Trainer id>`, from the `<pipeline root>/<Trainer id>/model_run/<execution id>`
    TFX's local and Beam runners give each Trainer execution; None for any other layout."""
    parent, execution_id = os.path.split(model_run_dir.rstrip("/"))
    folder, name = os.path.split(parent)
    if name != standard_component_specs.MODEL_RUN_KEY or not execution_id.isdigit():
        return None
    return folder


def checkpoint_dir(fn_args: FnArgs, config: settings.TrainConfig) -> str:
    """Where this training keeps the checkpoints it resumes from:
    `<Trainer folder>/checkpoints/<key>/`, found by every execution of the Trainer (each
    has a new `model_run` folder) that trains on the same inputs.

    The key digests everything that determines the training: the input URIs (train and
    eval files, Transform output, base model), the `custom_config` (with the code
    version) and the training settings with their defaults (with the seed). Other
    inputs give another key, and never resume this training. Outside TFX's folder layout
    (see `trainer_folder`) the checkpoints stay in the execution's `model_run` folder.
    """
    determinants = {
        "train_files": list(fn_args.train_files),
        "eval_files": list(fn_args.eval_files),
        "transform_output": fn_args.transform_output,
        "base_model": fn_args.base_model,
        "custom_config": fn_args.custom_config,
        "train": dataclasses.asdict(config),
    }
    key = hashlib.sha256(json.dumps(determinants, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return os.path.join(trainer_folder(fn_args.model_run_dir) or fn_args.model_run_dir, CHECKPOINTS_FOLDER, key)


def _delete_caches(resume_dir: str) -> None:
    """Deletes a training's caches, each its marker first (see `data.delete_cache`)."""
    folder = os.path.join(resume_dir, TRANSFORMED_CACHE_FOLDER)
    if not tf.io.gfile.isdir(folder):
        return
    for split in tf.io.gfile.listdir(folder):
        data.delete_cache(os.path.join(folder, split.rstrip("/")))
    tf.io.gfile.rmtree(folder)


def delete_other_caches(resume_dir: str) -> None:
    """Deletes the transformed caches that trainings on other inputs left beside this
    one's (`<checkpoints>/<other key>/transformed`, a GB or more at 10M rows): a training
    that failed, or whose inputs changed, is never resumed by this key. Their
    checkpoints stay (small); this training's workers (`<key>-<worker>`) are kept. No
    other training runs beside this one: a local run holds its output root's lock, and
    on Vertex each execution has a folder of its own (see `trainer_folder`)."""
    parent, name = os.path.split(resume_dir.rstrip("/"))
    key = name.split("-")[0]
    if not tf.io.gfile.isdir(parent):
        return
    for other in tf.io.gfile.listdir(parent):
        other = other.rstrip("/")
        if other.split("-")[0] != key:
            _delete_caches(os.path.join(parent, other))


def epoch_batches(rows: data.Batch, batch_size: int, seed: int) -> loop.EpochBatches:
    """Each epoch's training batches: a permutation of `rows` drawn from `seed` and the
    epoch's index alone, so that a resumed Trainer trains on the batches an uninterrupted
    one would have."""
    shuffled = data.shuffled(rows, batch_size)

    def batches(epoch: int) -> tf.data.Dataset:
        return shuffled(_epoch_seed(seed, epoch))

    return batches


def cached_epoch_batches(cache_dir: str, batch_size: int, seed: int) -> loop.EpochBatches:
    """`epoch_batches` for data beyond `data.IN_MEMORY_ROWS`: each epoch reads the
    transformed cache in an order drawn from `seed` and the epoch's index alone."""

    def batches(epoch: int) -> tf.data.Dataset:
        return data.from_cache(cache_dir, batch_size, shuffle_seed=_epoch_seed(seed, epoch))

    return batches


def _epoch_seed(seed: int, epoch: int) -> int:
    return int(np.random.SeedSequence([seed, epoch]).generate_state(1)[0])


def _datasets(
    fn_args: FnArgs, transform: data.Transform, config: settings.TrainConfig, cache_dir: str,
) -> Tuple[loop.EpochBatches, tf.data.Dataset, settings.TrainConfig]:
    """Each epoch's training batches, the eval dataset, and `config` with the batch size
    they were cut to; in memory, or beyond `data.IN_MEMORY_ROWS` training rows through
    transformed caches under `cache_dir` (kept until the model is exported, with the
    checkpoints: a resumed Trainer does not transform again)."""
    train_examples = split_rows.rows_in(fn_args.train_files)
    if train_examples is None:
        train_examples = data.count_records(fn_args.train_files)
    batch_size = data.effective_batch_size(config, train_examples)
    if batch_size != config.batch_size:
        logging.info("%d training examples: batches of %d instead of %d, for %d steps an epoch",
                     train_examples, batch_size, config.batch_size, config.min_steps_per_epoch)
        config = dataclasses.replace(config, batch_size=batch_size)
    if train_examples > data.IN_MEMORY_ROWS:
        train_cache, eval_cache = os.path.join(cache_dir, "train"), os.path.join(cache_dir, "eval")
        started = time.perf_counter()
        written = [data.write_cache(fn_args.train_files, transform, train_cache),
                   data.write_cache(fn_args.eval_files, transform, eval_cache)]
        logging.info("%d training examples > %d: transformed once into a cache on disk, %s (%.1f s), read each epoch",
                     train_examples, data.IN_MEMORY_ROWS, "written" if any(written) else "kept from before",
                     time.perf_counter() - started)
        train_batches = cached_epoch_batches(train_cache, config.batch_size, config.seed)
        return train_batches, data.from_cache(eval_cache, config.batch_size), config
    logging.info("%d training examples: transformed once, held in memory", train_examples)
    train_rows = data.transformed_rows(fn_args.train_files, transform)
    train_batches = epoch_batches(train_rows, config.batch_size, config.seed)
    eval_dataset = data.make_dataset(fn_args.eval_files, transform, config.batch_size)
    return train_batches, eval_dataset, config


def _write_summary(
    model_run_dir: str, config: settings.TrainConfig, started: warm_start.WarmStart, result: loop.TrainResult
) -> None:
    """`training_summary.json`: config, warm start and `TrainResult`. Written as soon as
    training ends, before the export, so that a failed export still leaves its record."""
    with tf.io.gfile.GFile(os.path.join(model_run_dir, settings.TRAINING_SUMMARY_FILE), "w") as handle:
        json.dump(
            {"config": dataclasses.asdict(config), "warm_start": dataclasses.asdict(started),
             **dataclasses.asdict(result)},
            handle, indent=2,
        )


def run_fn(fn_args: FnArgs) -> None:
    """TFX Trainer entry point, referred to as `components.model.trainer.run.run_fn`.

    `fn_args.train_files` / `eval_files` are raw examples; the Transform layer is
    applied while the datasets are built, and saved inside the exported model. An
    execution killed while training is resumed by the next one on the same inputs, from
    its last epoch checkpoint (see `checkpoint_dir`); the checkpoints are deleted once
    the model is exported.

    With `TF_CONFIG` naming several workers, every worker runs this same function under
    `MultiWorkerMirroredStrategy` (see `loop.choose_strategy`); only the chief writes the
    model, the summary and TensorBoard's logs. The other workers write theirs to a
    scratch folder that is deleted, and keep their checkpoints beside the chief's
    (`<key>-<worker>`), so that a restarted cluster resumes together.
    """
    strategy = loop.choose_strategy()  # first: it configures the collective ops
    config = settings.TrainConfig.from_custom_config(fn_args.custom_config)
    export_config = settings.ExportConfig.from_custom_config(fn_args.custom_config)
    worker = loop.worker_name(strategy)
    with contextlib.ExitStack() as cleanup:
        if worker is None:
            model_run_dir, serving_model_dir = fn_args.model_run_dir, fn_args.serving_model_dir
            resume_dir = checkpoint_dir(fn_args, config)
        else:
            scratch = cleanup.enter_context(tempfile.TemporaryDirectory(prefix=f"trainer-{worker}-"))
            model_run_dir, serving_model_dir = os.path.join(scratch, "model_run"), os.path.join(scratch, "serving")
            resume_dir = f"{checkpoint_dir(fn_args, config)}-{worker}"
        _train_and_export(fn_args, config, export_config, strategy, model_run_dir, serving_model_dir, resume_dir,
                          write_extras=worker is None)


def _train_and_export(
    fn_args: FnArgs, config: settings.TrainConfig, export_config: settings.ExportConfig,
    strategy: tf.distribute.Strategy, model_run_dir: str, serving_model_dir: str, resume_dir: str,
    write_extras: bool,
) -> None:
    tf_transform_output = tft.TFTransformOutput(fn_args.transform_output)
    if write_extras:  # the chief alone: workers deleting at once would race on the same files
        delete_other_caches(resume_dir)
    # The rows are read and transformed on a thread of their own (TensorFlow's reader and
    # ops leave the GIL) while this one builds the model and traces its steps and serving
    # signatures, none of which reads the data. The Transform layer is made here first:
    # both threads use it.
    transform = data.transform_fn(tf_transform_output)
    datasets = background.started(
        functools.partial(_datasets, fn_args, transform, config, os.path.join(resume_dir, TRANSFORMED_CACHE_FOLDER)),
        "trainer-data",
    )

    keras.utils.set_random_seed(config.seed)
    with strategy.scope():
        keras_model = model.build_model(model.ModelConfig(mixed_precision=config.mixed_precision))
        # The serving baseline holds no model before any version serves.
        started = (
            warm_start.warm_start(keras_model, fn_args.base_model, tf_transform_output)
            if fn_args.base_model and tf.saved_model.contains_saved_model(fn_args.base_model)
            else warm_start.WarmStart(False, "no model serves yet")
        )
    logging.info("warm start: %s: %s", "yes" if started.used else "no, training from scratch", started.reason)

    signature = data.input_signature(tf_transform_output.transformed_feature_spec())
    traced = loop.traced_steps(keras_model, signature, config, strategy)
    signatures = export.make_signatures(keras_model, tf_transform_output)
    train_batches, eval_dataset, config = datasets.result()
    result = loop.train(
        keras_model, train_batches, eval_dataset, signature, config, model_run_dir, strategy, resume_dir, traced
    )
    _write_summary(model_run_dir, config, started, result)
    logging.info(
        "trained %d epochs, %d steps on %d replica(s): eval AUC %.4f, %.0f examples/s, traces %s",
        result.epochs_run, result.steps, strategy.num_replicas_in_sync, result.eval_auc,
        result.examples_per_second, result.trace_counts,
    )

    # Every worker saves (saving distributed variables may take part in collectives).
    export.export_serving_model(keras_model, tf_transform_output, serving_model_dir, signatures)
    if write_extras:
        if export_config.tflite:
            logging.info("TFLite model written to %s",
                         tflite.write_tflite(keras_model, tf_transform_output, serving_model_dir))
        export.write_warmup_requests(
            serving_model_dir,
            _serialized_examples(fn_args.eval_files),
            export_config.model_name,
            export_config.warmup_requests,
        )
    # The checkpoints and caches only serve to resume an unfinished execution.
    _delete_caches(resume_dir)
    loop.delete_checkpoints(resume_dir)
