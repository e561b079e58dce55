"""The epoch loop: checkpoints, early stopping, TensorBoard scalars, the best weights.

The traced work is `components.model.trainer.steps`; this module runs it epoch by epoch from
Python, where the per-epoch decisions (save, stop, restore) are made.

Everything a later epoch depends on is in the checkpoint written after each epoch: the
model, the optimizer, the step and epoch counters, the early-stopping state (best eval
loss, best epoch, epochs without improvement, the best epoch's weights) and the history.
A run that resumes from it therefore ends as the uninterrupted run would have, provided
each epoch's training batches depend on the epoch's index alone (see `EpochBatches`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from typing import Callable, Dict, List, Optional, Tuple, Union

import tensorflow as tf

from components.compat import keras
from components.model.trainer.settings import EPOCH_PROGRESS, TrainConfig
from components.model.trainer.steps import (
    LOSS_CHECK_MESSAGE,
    Steps,
    TrainingDivergedError,
    make_optimizer,
    make_steps,
)

# The training batches of an epoch, by the epoch's index (0 for the first): a resumed
# run must see the same batches in each epoch as an uninterrupted one.
EpochBatches = Callable[[int], tf.data.Dataset]
# The optimizer and the steps, made and traced before the data is ready (`traced_steps`).
TracedSteps = Tuple["keras.optimizers.Optimizer", Steps]
# The file in which `tf.train.CheckpointManager` records the checkpoints of its folder.
CHECKPOINT_INDEX = "checkpoint"


@dataclasses.dataclass
class TrainResult:
    # Epochs trained in all, including those before a resume (the length of `history`).
    epochs_run: int
    steps: int
    train_loss: float
    eval_loss: float
    eval_auc: float
    # Over the epochs trained in this call.
    examples_per_second: float
    trace_counts: Dict[str, int]
    history: List[Dict[str, float]]
    # The epoch whose weights the model holds at the end (the best eval loss seen).
    best_epoch: int = 0
    # The epoch of the checkpoint this call resumed from (0: it started afresh).
    resumed_from_epoch: int = 0


class EarlyStopping(tf.Module):
    """The early-stopping state, in variables so that the checkpoint carries it."""

    def __init__(self, model: keras.Model):
        super().__init__(name="early_stopping")
        self.best_eval_loss = tf.Variable(float("inf"), dtype=tf.float64, trainable=False, name="best_eval_loss")
        # 0: no epoch has improved on the initial infinity yet.
        self.best_epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="best_epoch")
        self.epochs_without_improvement = tf.Variable(
            0, dtype=tf.int64, trainable=False, name="epochs_without_improvement"
        )
        # Every weight of the model (trainable or not), as of `best_epoch`.
        self.best_weights = [
            tf.Variable(tf.convert_to_tensor(weight), trainable=False, name=f"best_{i}")
            for i, weight in enumerate(model.weights)
        ]

    def update(self, epoch: int, eval_loss: float, model: keras.Model) -> None:
        """Records `epoch`'s eval loss; keeps the model's weights if it is the best yet."""
        if eval_loss < float(self.best_eval_loss):
            self.best_eval_loss.assign(eval_loss)
            self.best_epoch.assign(epoch)
            self.epochs_without_improvement.assign(0)
            for best, weight in zip(self.best_weights, model.weights):
                best.assign(tf.convert_to_tensor(weight))
        else:
            self.epochs_without_improvement.assign_add(1)

    def should_stop(self, patience: int) -> bool:
        return patience > 0 and int(self.epochs_without_improvement) >= patience

    def restore_best(self, model: keras.Model) -> None:
        for weight, best in zip(model.weights, self.best_weights):
            weight.assign(best)


def _cluster() -> Optional[tf.distribute.cluster_resolver.TFConfigClusterResolver]:
    """The cluster `TF_CONFIG` names, when it names more than one chief or worker task."""
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    tasks = resolver.cluster_spec().as_dict()
    return resolver if sum(len(tasks.get(kind, ())) for kind in ("chief", "worker")) > 1 else None


def choose_strategy() -> tf.distribute.Strategy:
    """`MultiWorkerMirroredStrategy` when `TF_CONFIG` names several workers (Vertex AI
    Training and Kubeflow's TFJob set it), else `MirroredStrategy` over the GPUs when
    there are several, else the default strategy.

    Call it before any other TensorFlow operation of the process: the collective ops
    that multi-worker training uses are configured when the strategy is created.
    """
    cluster = _cluster()
    if cluster is not None:
        return tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=cluster)
    gpus = tf.config.list_logical_devices("GPU")
    if len(gpus) > 1:
        return tf.distribute.MirroredStrategy([gpu.name for gpu in gpus])
    return tf.distribute.get_strategy()


def worker_name(strategy: tf.distribute.Strategy) -> Optional[str]:
    """None on the task that writes the outputs (the chief, or worker 0 when the cluster
    has no chief, or the only process); `worker-<i>` on the others."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return None
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    if resolver.task_type == "chief" or (resolver.task_type == "worker" and resolver.task_id == 0 and not has_chief):
        return None
    return f"{resolver.task_type}-{resolver.task_id}"


def delete_checkpoints(checkpoint_dir: str) -> None:
    """Deletes a `train` checkpoint folder. Its index goes first: a kill part-way leaves
    files no later `train` resumes from (it starts afresh and overwrites them)."""
    index = os.path.join(checkpoint_dir, CHECKPOINT_INDEX)
    if tf.io.gfile.exists(index):
        tf.io.gfile.remove(index)
    if tf.io.gfile.exists(checkpoint_dir):
        tf.io.gfile.rmtree(checkpoint_dir)


def _each_batch_split() -> tf.data.Options:
    """Datasets distributed over workers: every worker reads the same batches and keeps
    its share of each (DATA sharding), so that a step on N workers sees exactly the global
    batch one process would, and training is the same computation. (Sharding by file
    would let each worker read only its files, but changes which rows meet in a batch.)"""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return options


def train(
    model: keras.Model,
    train_batches: Union[EpochBatches, tf.data.Dataset],
    eval_dataset: tf.data.Dataset,
    signature: Tuple,
    config: TrainConfig,
    model_run_dir: str,
    strategy: Optional[tf.distribute.Strategy] = None,
    checkpoint_dir: Optional[str] = None,
    traced: Optional[TracedSteps] = None,
) -> TrainResult:
    """Runs the epoch loop with checkpoints, early stopping and TensorBoard scalars.

    `train_batches` gives each epoch's training batches by the epoch's index; a dataset
    is iterated anew each epoch, and must then give the same batches each time (no
    reshuffling) for a resume to match an uninterrupted run. TensorBoard scalars go to
    `<model_run_dir>/train`; a checkpoint after each epoch to `checkpoint_dir` (default
    `<model_run_dir>/checkpoints`). When that folder holds a checkpoint, training
    resumes from it: from its epoch, with its early-stopping state.

    On return the model holds the weights of the epoch with the best eval loss. `model` is
    built under `strategy.scope()`; `traced`: `traced_steps`' answer for it, if asked ahead.
    """
    strategy = strategy or tf.distribute.get_strategy()
    epoch_batches: EpochBatches = train_batches if callable(train_batches) else (lambda _: train_batches)
    distributed = strategy.num_replicas_in_sync > 1
    optimizer, steps, eval_dataset = (
        (*traced, eval_dataset) if traced else _steps_for(model, eval_dataset, signature, config, strategy))
    early_stopping = EarlyStopping(model)
    epoch, history_json, manager = _checkpointed(
        model, optimizer, steps, early_stopping, checkpoint_dir or os.path.join(model_run_dir, "checkpoints"),
        config.epochs)
    resumed_from_epoch = int(epoch)
    history: List[Dict[str, float]] = json.loads(history_json.numpy())
    writer = tf.summary.create_file_writer(os.path.join(model_run_dir, "train"))

    examples, train_seconds = 0, 0.0
    while int(epoch) < config.epochs and not early_stopping.should_stop(config.early_stopping_patience):
        dataset = epoch_batches(int(epoch))
        if distributed:
            dataset = strategy.experimental_distribute_dataset(dataset.with_options(_each_batch_split()))
        steps.reset_metrics()
        started = time.perf_counter()
        examples += _train_epoch(steps, dataset, strategy)
        train_seconds += time.perf_counter() - started
        steps.run_epoch(eval_dataset, False, strategy)
        epoch.assign_add(1)
        record = {"epoch": int(epoch), **steps.epoch_metrics()}
        history.append(record)
        _write_scalars(writer, int(steps.step_counter), record, optimizer, examples / max(train_seconds, 1e-9))
        early_stopping.update(int(epoch), record["eval_loss"], model)
        history_json.assign(json.dumps(history))
        manager.save(checkpoint_number=int(epoch))
        logging.info(EPOCH_PROGRESS, int(epoch), config.epochs, record["train_loss"], record["eval_loss"],
                     record["eval_auc"], time.perf_counter() - started)
    writer.flush()
    if early_stopping.should_stop(config.early_stopping_patience) and int(epoch) < config.epochs:
        logging.info("early stopping after epoch %d: eval loss did not improve", int(epoch))
    return _result(model, early_stopping, history, int(epoch), steps, examples / max(train_seconds, 1e-9),
                   resumed_from_epoch)


def traced_steps(model: keras.Model, signature: Tuple, config: TrainConfig,
                 strategy: tf.distribute.Strategy) -> Optional[TracedSteps]:
    """The optimizer and the steps `train` runs, the steps traced now, before any data is
    read: their signature is fixed. None on several replicas, whose steps take the
    per-replica specs of the distributed datasets (`_steps_for`)."""
    if strategy.num_replicas_in_sync > 1:
        return None
    optimizer, steps, _ = _steps_for(model, None, signature, config, strategy)
    steps.train_step.get_concrete_function()
    steps.eval_step.get_concrete_function()
    return optimizer, steps


def _steps_for(model: keras.Model, eval_dataset: Optional[tf.data.Dataset], signature: Tuple, config: TrainConfig,
               strategy: tf.distribute.Strategy):
    """The optimizer and the steps, and the eval batches as the steps take them: split
    over the replicas when there are several."""
    tf.config.run_functions_eagerly(config.run_eagerly)
    with strategy.scope():
        optimizer = make_optimizer(model, config)
    if strategy.num_replicas_in_sync > 1:
        eval_dataset = strategy.experimental_distribute_dataset(eval_dataset.with_options(_each_batch_split()))
        # Per-replica specs (train and eval batches share them); the batch dimension stays None.
        signature = eval_dataset.element_spec
    steps = make_steps(
        model, optimizer, signature, config.log_every_steps, strategy, config.jit_compile, config.steps_per_call
    )
    return optimizer, steps, eval_dataset


def _checkpointed(model: keras.Model, optimizer, steps, early_stopping: EarlyStopping, checkpoint_dir: str,
                  epochs: int) -> Tuple[tf.Variable, tf.Variable, tf.train.CheckpointManager]:
    """The loop's own state in `tf.Variable`s (the epoch, the history as JSON), checkpointed
    with the model, the optimizer, the step counter and the early-stopping state; restored
    from the newest checkpoint in `checkpoint_dir` when there is one."""
    epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
    history_json = tf.Variable("[]", dtype=tf.string, trainable=False, name="history")
    checkpoint = tf.train.Checkpoint(
        model=model, optimizer=optimizer, step=steps.step_counter, epoch=epoch,
        early_stopping=early_stopping, history=history_json,
    )
    manager = tf.train.CheckpointManager(checkpoint, checkpoint_dir, max_to_keep=2)
    if manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
        logging.info("resumed from checkpoint at epoch %d of %d (%s)", int(epoch), epochs, manager.latest_checkpoint)
    return epoch, history_json, manager


def _train_epoch(steps, dataset, strategy: tf.distribute.Strategy) -> int:
    """One epoch of training steps; the examples trained on. A NaN or Inf loss stops
    training with TrainingDivergedError."""
    try:
        return steps.run_epoch(dataset, True, strategy)
    except tf.errors.InvalidArgumentError as err:
        if LOSS_CHECK_MESSAGE in str(err):
            raise TrainingDivergedError(
                f"loss became NaN or Inf at step {int(steps.step_counter)}; nothing was exported"
            ) from err
        raise


def _write_scalars(writer, step: int, record: Dict[str, float], optimizer, examples_per_second: float) -> None:
    """An epoch's TensorBoard scalars, under `<model_run_dir>/train`."""
    with writer.as_default(step=step):
        tf.summary.scalar("loss/train", record["train_loss"])
        tf.summary.scalar("loss/eval", record["eval_loss"])
        tf.summary.scalar("auc/eval", record["eval_auc"])
        tf.summary.scalar("learning_rate", float(tf.convert_to_tensor(optimizer.learning_rate)))
        tf.summary.scalar("examples_per_second", examples_per_second)


def _result(
    model: keras.Model, early_stopping: EarlyStopping, history: List[Dict[str, float]], epoch: int, steps,
    examples_per_second: float, resumed_from_epoch: int,
) -> TrainResult:
    """The model back at its best epoch's weights, and what the loop measured."""
    best_epoch = int(early_stopping.best_epoch)
    if best_epoch:
        early_stopping.restore_best(model)
        if best_epoch != epoch:
            logging.info("restored the weights of epoch %d, the best eval loss (%.4f)",
                         best_epoch, float(early_stopping.best_eval_loss))
    final = (
        history[best_epoch - 1] if best_epoch
        else {"epoch": epoch, **{key: float("nan") for key in ("train_loss", "eval_loss", "eval_auc")}}
    )
    return TrainResult(
        epochs_run=len(history),
        steps=int(steps.step_counter),
        train_loss=final["train_loss"],
        eval_loss=final["eval_loss"],
        eval_auc=final["eval_auc"],
        examples_per_second=examples_per_second,
        trace_counts=steps.trace_counts(),
        best_epoch=int(final["epoch"]),
        history=history,
        resumed_from_epoch=resumed_from_epoch,
    )
