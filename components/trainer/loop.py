"""The epoch loop: checkpoints, early stopping, TensorBoard scalars, the best weights.

The traced work is `components.trainer.steps`; this module runs it epoch by epoch from
Python, where the per-epoch decisions (save, stop, restore) are made.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Dict, List, Optional, Tuple

import tensorflow as tf

from components.trainer.settings import TrainConfig
from components.trainer.steps import LOSS_CHECK_MESSAGE, TrainingDivergedError, make_optimizer, make_steps


@dataclasses.dataclass
class TrainResult:
    epochs_run: int
    steps: int
    train_loss: float
    eval_loss: float
    eval_auc: float
    examples_per_second: float
    trace_counts: Dict[str, int]
    history: List[Dict[str, float]]
    # The epoch whose weights the model holds at the end (the best eval loss seen).
    best_epoch: int = 0


def choose_strategy() -> tf.distribute.Strategy:
    """`MirroredStrategy` over the GPUs when there are several, else the default strategy."""
    gpus = tf.config.list_logical_devices("GPU")
    if len(gpus) > 1:
        return tf.distribute.MirroredStrategy([gpu.name for gpu in gpus])
    return tf.distribute.get_strategy()


def train(
    model: tf.keras.Model,
    train_dataset: tf.data.Dataset,
    eval_dataset: tf.data.Dataset,
    signature: Tuple,
    config: TrainConfig,
    model_run_dir: str,
    strategy: Optional[tf.distribute.Strategy] = None,
) -> TrainResult:
    """Runs the epoch loop with checkpoints, early stopping and TensorBoard scalars.

    On return the model holds the weights of the epoch with the best eval loss seen in
    this call. `model` must have been built under `strategy.scope()` (default: the default
    strategy). Restarting with the same `model_run_dir` resumes from the last epoch
    checkpoint.
    """
    strategy = strategy or tf.distribute.get_strategy()
    tf.config.run_functions_eagerly(config.run_eagerly)
    with strategy.scope():
        optimizer = make_optimizer(model, config)
    if strategy.num_replicas_in_sync > 1:
        train_dataset = strategy.experimental_distribute_dataset(train_dataset)
        eval_dataset = strategy.experimental_distribute_dataset(eval_dataset)
        # Per-replica specs; the batch dimension stays None.
        signature = train_dataset.element_spec
    steps = make_steps(
        model, optimizer, signature, config.log_every_steps, strategy, config.jit_compile, config.steps_per_call
    )
    epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=steps.step_counter, epoch=epoch)
    manager = tf.train.CheckpointManager(checkpoint, os.path.join(model_run_dir, "checkpoints"), max_to_keep=2)
    if manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
        logging.info("resumed from %s at step %d", manager.latest_checkpoint, int(steps.step_counter))
    writer = tf.summary.create_file_writer(os.path.join(model_run_dir, "train"))

    history: List[Dict[str, float]] = []
    best_eval_loss, epochs_without_improvement = float("inf"), 0
    best: Optional[Dict[str, float]] = None
    best_weights: Optional[List] = None
    examples, train_seconds = 0, 0.0
    while int(epoch) < config.epochs:
        steps.reset_metrics()
        started = time.perf_counter()
        try:
            examples += steps.run_epoch(train_dataset, True, strategy)
        except tf.errors.InvalidArgumentError as err:
            if LOSS_CHECK_MESSAGE in str(err):
                raise TrainingDivergedError(
                    f"loss became NaN or Inf at step {int(steps.step_counter)}; nothing was exported"
                ) from err
            raise
        train_seconds += time.perf_counter() - started
        steps.run_epoch(eval_dataset, False, strategy)
        epoch.assign_add(1)
        record = {"epoch": int(epoch), **steps.epoch_metrics()}
        history.append(record)
        with writer.as_default(step=int(steps.step_counter)):
            tf.summary.scalar("loss/train", record["train_loss"])
            tf.summary.scalar("loss/eval", record["eval_loss"])
            tf.summary.scalar("auc/eval", record["eval_auc"])
            tf.summary.scalar("learning_rate", float(tf.convert_to_tensor(optimizer.learning_rate)))
            tf.summary.scalar("examples_per_second", examples / max(train_seconds, 1e-9))
        manager.save(checkpoint_number=int(epoch))
        logging.info("epoch %d: %s", int(epoch), record)
        if record["eval_loss"] < best_eval_loss:
            best_eval_loss, epochs_without_improvement = record["eval_loss"], 0
            best, best_weights = record, model.get_weights()
        else:
            epochs_without_improvement += 1
            if config.early_stopping_patience and epochs_without_improvement >= config.early_stopping_patience:
                logging.info("early stopping after epoch %d: eval loss did not improve", int(epoch))
                break
    writer.flush()
    if best is not None and best is not history[-1]:
        model.set_weights(best_weights)
        logging.info("restored the weights of epoch %d, the best eval loss (%.4f)", best["epoch"], best_eval_loss)
    final = best or {"epoch": int(epoch), **{key: float("nan") for key in ("train_loss", "eval_loss", "eval_auc")}}
    return TrainResult(
        epochs_run=len(history),
        steps=int(steps.step_counter),
        train_loss=final["train_loss"],
        eval_loss=final["eval_loss"],
        eval_auc=final["eval_auc"],
        examples_per_second=examples / max(train_seconds, 1e-9),
        trace_counts=steps.trace_counts(),
        best_epoch=int(final["epoch"]),
        history=history,
    )
