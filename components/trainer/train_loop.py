"""The custom training loop: datasets, `tf.function` steps and the epoch loop.

Rules the steps follow:
- each step is built by `make_steps` with a fixed `input_signature` whose batch
  dimension is `None`, so the last, partial batch does not retrace;
- all state (model, optimizer, step counter, metrics) is created outside the traced
  functions and lives in `tf.Variable`s;
- nothing inside a traced function has a Python side effect; progress is logged
  in-graph with `tf.print` under an explicit `tf.cond` (AutoGraph is off);
- `TrainConfig.run_eagerly` runs every step eagerly for debugging.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import tensorflow as tf
from absl import logging as absl_logging

from components import features
from components.trainer import model as model_lib
from components.trainer.settings import TrainConfig

Batch = Tuple[Dict[str, tf.Tensor], tf.Tensor]
# Raw examples per call of the Transform graph while building the dataset.
_TRANSFORM_BATCH = 1024


class TrainingDivergedError(RuntimeError):
    """The loss became NaN or Inf; nothing is exported."""


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


def input_signature(transformed_feature_spec: Mapping[str, tf.io.FixedLenFeature]) -> Tuple:
    """`(features, label)` TensorSpecs with a `None` batch dimension."""
    label_key = features.transformed_label_key()
    feature_specs = {
        name: tf.TensorSpec([None], spec.dtype, name=name)
        for name, spec in sorted(transformed_feature_spec.items())
        if name != label_key
    }
    label_spec = tf.TensorSpec([None], transformed_feature_spec[label_key].dtype, name=label_key)
    return (feature_specs, label_spec)


def list_files(file_patterns: Sequence[str]) -> List[str]:
    files = sorted(path for pattern in file_patterns for path in tf.io.gfile.glob(pattern))
    if not files:
        raise FileNotFoundError(f"no examples match {list(file_patterns)}")
    return files


def effective_batch_size(config: TrainConfig, train_examples: int) -> int:
    """`config.batch_size`, or smaller when the data would give too few steps per epoch."""
    if config.min_steps_per_epoch <= 0:
        return config.batch_size
    fitting = max(32, math.ceil(train_examples / config.min_steps_per_epoch))
    return min(config.batch_size, fitting)


def _plain(fn: Callable) -> Callable:
    """`fn` for `Dataset.map`, traced as written: tf.data runs AutoGraph on map functions by
    default, and converting this one and the Transform graph loader it calls costs ~0.7 s
    per Trainer run; none of them has data-dependent Python control flow."""
    return tf.autograph.experimental.do_not_convert(fn)


def transformed_rows(
    file_patterns: Sequence[str], transform: Callable[[Dict[str, object]], Dict[str, tf.Tensor]]
) -> Batch:
    """All `(features, label)` rows of raw GZIP TFRecords of `tf.Example`, as in-memory
    columns: one tensor per feature, the rows along the first dimension.

    Raw examples are parsed by the feature spec and passed through the Transform graph
    once, in batches; every epoch then reads the columns (see `batched`).
    """
    raw_spec = features.raw_feature_spec(include_label=True)
    label_key = features.transformed_label_key()

    def parse_and_transform(serialized: tf.Tensor) -> Batch:
        transformed = transform(tf.io.parse_example(serialized, raw_spec))
        return model_lib.model_inputs(transformed), tf.reshape(transformed[label_key], [-1])

    chunks = list(
        tf.data.TFRecordDataset(list_files(file_patterns), compression_type="GZIP")
        .batch(_TRANSFORM_BATCH)
        .map(_plain(parse_and_transform), num_parallel_calls=tf.data.AUTOTUNE)
    )
    if not chunks:
        raise ValueError(f"no examples in {list(file_patterns)}")
    return tf.nest.map_structure(lambda *parts: tf.concat(parts, axis=0), *chunks)


def count_rows(rows: Batch) -> int:
    return int(tf.shape(rows[1])[0])


def batched(rows: Batch, batch_size: int, shuffle_seed: Optional[int] = None) -> tf.data.Dataset:
    """Batches of `rows`, in order, or, given a seed, in a new permutation each epoch
    (each new iterator), reproducible from the seed.

    Batches are sliced or gathered from the columns: tf.data never handles a row of
    16 tensors on its own, which cost more than the training step itself.
    """
    total = count_rows(rows)
    if shuffle_seed is None:
        starts = tf.data.Dataset.range(0, total, batch_size)
        return starts.map(
            _plain(lambda start: tf.nest.map_structure(lambda column: column[start : start + batch_size], rows))
        )
    # A full shuffle of row numbers (8 bytes a row), then one gather per batch and column.
    indices = tf.data.Dataset.range(total).shuffle(total, seed=shuffle_seed, reshuffle_each_iteration=True)
    return (
        indices.batch(batch_size)
        .map(_plain(lambda batch: tf.nest.map_structure(lambda column: tf.gather(column, batch), rows)))
        .prefetch(tf.data.AUTOTUNE)
    )


def make_dataset(
    file_patterns: Sequence[str],
    transform: Callable[[Dict[str, object]], Dict[str, tf.Tensor]],
    batch_size: int,
    shuffle_seed: Optional[int] = None,
) -> tf.data.Dataset:
    """Batches of `(features, label)`: `transformed_rows`, shuffled if a seed is given."""
    return batched(transformed_rows(file_patterns, transform), batch_size, shuffle_seed)


def choose_strategy() -> tf.distribute.Strategy:
    """`MirroredStrategy` over the GPUs when there are several, else the default strategy."""
    gpus = tf.config.list_logical_devices("GPU")
    if len(gpus) > 1:
        return tf.distribute.MirroredStrategy([gpu.name for gpu in gpus])
    return tf.distribute.get_strategy()


@dataclasses.dataclass
class Steps:
    """The traced train and eval steps and the state they update."""

    train_step: Callable[..., tf.Tensor]
    eval_step: Callable[..., tf.Tensor]
    step_counter: tf.Variable
    train_loss: tf.keras.metrics.Mean
    eval_loss: tf.keras.metrics.Mean
    eval_auc: tf.keras.metrics.AUC
    # The three metrics' values, read in one traced call (see `make_steps`).
    metric_results: Callable[[], Dict[str, tf.Tensor]]
    # Examples through either step, counted in the graph.
    examples_seen: tf.Variable = dataclasses.field(
        default_factory=lambda: tf.Variable(0, dtype=tf.int64, trainable=False, name="examples_seen")
    )
    # Steps run per call of the traced epoch loop (see `run_epoch`).
    steps_per_call: int = 1
    steps_loops: Dict[Tuple[str, str], Callable] = dataclasses.field(default_factory=dict)

    def trace_counts(self) -> Dict[str, int]:
        counts = {
            "train_step": self.train_step.experimental_get_tracing_count(),
            "eval_step": self.eval_step.experimental_get_tracing_count(),
            "metric_results": self.metric_results.experimental_get_tracing_count(),
        }
        for (name, _), function in sorted(self.steps_loops.items()):
            counts[f"loop_{name}"] = counts.get(f"loop_{name}", 0) + function.experimental_get_tracing_count()
        return counts

    def run_epoch(self, dataset, train: bool, strategy: tf.distribute.Strategy) -> int:
        """One pass over `dataset`; returns the number of examples seen.

        On one replica the batches are taken from the iterator inside the graph, up to
        `steps_per_call` steps per call of one traced loop (as Keras' `steps_per_execution`
        does): no tensors cross into Python between those steps. Distributed datasets are
        iterated in Python, one step per call.
        """
        step = self.train_step if train else self.eval_step
        if strategy.num_replicas_in_sync > 1:
            count = 0
            for batch_features, labels in dataset:
                step(batch_features, labels)
                count += sum(int(t.shape[0]) for t in strategy.experimental_local_results(labels))
            return count
        steps_loop = self._steps_loop(step, dataset.element_spec)
        before = int(self.examples_seen)
        iterator = iter(dataset)
        while bool(steps_loop(iterator)):
            pass
        return int(self.examples_seen) - before

    def _steps_loop(self, step: Callable, element_spec) -> Callable:
        """`step` on the next batches of an iterator, at most `steps_per_call` of them,
        in one traced `tf.while_loop`; its signature is the dataset's fixed element spec
        (batch dimension None)."""
        key = (step.__name__, repr(element_spec))
        if key not in self.steps_loops:
            examples_seen, steps_per_call = self.examples_seen, max(1, self.steps_per_call)

            @tf.function(input_signature=[tf.data.IteratorSpec(element_spec)], autograph=False)
            def steps_loop(iterator) -> tf.Tensor:
                """Runs steps until `steps_per_call` ran or the data ended; False at the end."""

                def next_step(done: tf.Tensor, more: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
                    batch = iterator.get_next_as_optional()

                    def run_step() -> tf.Tensor:
                        batch_features, labels = batch.get_value()
                        step(batch_features, labels)
                        examples_seen.assign_add(tf.shape(labels, out_type=tf.int64)[0])
                        return tf.constant(True)

                    return done + 1, tf.cond(batch.has_value(), run_step, lambda: tf.constant(False))

                _, more = tf.while_loop(
                    lambda done, more: tf.logical_and(more, done < steps_per_call),
                    next_step,
                    (tf.constant(0), tf.constant(True)),
                )
                return more

            self.steps_loops[key] = steps_loop
        return self.steps_loops[key]

    def epoch_metrics(self) -> Dict[str, float]:
        """The epoch's train loss, eval loss and eval AUC."""
        return {name: float(value) for name, value in self.metric_results().items()}

    def reset_metrics(self) -> None:
        for metric in (self.train_loss, self.eval_loss, self.eval_auc):
            metric.reset_state()


def make_steps(
    model: tf.keras.Model,
    optimizer: tf.keras.optimizers.Optimizer,
    signature: Tuple,
    log_every_steps: int = 0,
    strategy: Optional[tf.distribute.Strategy] = None,
    jit_compile: bool = False,
    steps_per_call: int = 1,
) -> Steps:
    """Builds the train and eval `tf.function`s over `model` with a fixed signature.

    Each step runs once per replica under `strategy`; a replica's loss is its share of
    the global batch (`tf.nn.compute_average_loss`), and the shares are summed. With a
    `LossScaleOptimizer` (mixed precision) the loss is scaled before the gradients.
    Model, optimizer and metrics must have been created under `strategy.scope()`.
    """
    strategy = strategy or tf.distribute.get_strategy()
    # Updated once per global step with the summed replica losses: plain variables.
    step_counter = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    train_loss = tf.keras.metrics.Mean(name="train_loss")
    eval_loss = tf.keras.metrics.Mean(name="eval_loss")
    with strategy.scope():
        loss_fn = tf.keras.losses.BinaryCrossentropy(from_logits=True, reduction=tf.keras.losses.Reduction.NONE)
        eval_auc = tf.keras.metrics.AUC(name="eval_auc")
    scales_loss = isinstance(optimizer, tf.keras.mixed_precision.LossScaleOptimizer)

    def log_progress() -> None:
        if log_every_steps > 0:  # decided once, while tracing; no branch in the graph otherwise
            tf.cond(
                tf.equal(step_counter % log_every_steps, 0),
                lambda: tf.print("step", step_counter, "loss", train_loss.result(), output_stream=absl_logging.info),
                tf.no_op,
            )

    def batch_loss(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
        per_example = loss_fn(
            tf.expand_dims(tf.cast(labels, tf.float32), -1), tf.expand_dims(tf.cast(logits, tf.float32), -1)
        )
        return tf.nn.compute_average_loss(per_example)

    # AutoGraph is off: the steps have no data-dependent Python control flow, and
    # converting the Keras call stack costs ~10 s on the first trace.
    @tf.function(autograph=False, jit_compile=jit_compile)
    def replica_train_step(batch_features: Dict[str, tf.Tensor], labels: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            logits = model(batch_features, training=True)
            loss = tf.debugging.check_numerics(batch_loss(labels, logits), "training loss")
            scaled_loss = optimizer.get_scaled_loss(loss) if scales_loss else loss
        gradients = tape.gradient(scaled_loss, model.trainable_variables)
        if scales_loss:
            gradients = optimizer.get_unscaled_gradients(gradients)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    @tf.function(autograph=False, jit_compile=jit_compile)
    def replica_eval_step(batch_features: Dict[str, tf.Tensor], labels: tf.Tensor) -> tf.Tensor:
        logits = model(batch_features, training=False)
        loss = batch_loss(labels, logits)
        eval_auc.update_state(labels, tf.sigmoid(tf.cast(logits, tf.float32)))
        return loss

    @tf.function(input_signature=signature, autograph=False)
    def train_step(batch_features: Dict[str, tf.Tensor], labels: tf.Tensor) -> tf.Tensor:
        per_replica = strategy.run(replica_train_step, args=(batch_features, labels))
        loss = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
        step_counter.assign_add(1)
        train_loss.update_state(loss)
        log_progress()
        return loss

    @tf.function(input_signature=signature, autograph=False)
    def eval_step(batch_features: Dict[str, tf.Tensor], labels: tf.Tensor) -> tf.Tensor:
        per_replica = strategy.run(replica_eval_step, args=(batch_features, labels))
        loss = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
        eval_loss.update_state(loss)
        return loss

    # Keras runs AutoGraph on `Metric.result()` when called eagerly (~0.3 s for AUC's, once
    # per run); inside a function traced without AutoGraph it does not.
    @tf.function(autograph=False)
    def metric_results() -> Dict[str, tf.Tensor]:
        return {"train_loss": train_loss.result(), "eval_loss": eval_loss.result(), "eval_auc": eval_auc.result()}

    return Steps(
        train_step, eval_step, step_counter, train_loss, eval_loss, eval_auc, metric_results,
        steps_per_call=steps_per_call,
    )


def make_optimizer(model: tf.keras.Model, config: TrainConfig) -> tf.keras.optimizers.Optimizer:
    """Adam, loss-scaled under mixed precision, with its slot variables already built.

    Slots are created now, not on the first step: a `tf.function` that creates
    variables while tracing is traced a second time.
    """
    optimizer = tf.keras.optimizers.Adam(learning_rate=config.learning_rate, jit_compile=False)
    if config.mixed_precision:
        optimizer = tf.keras.mixed_precision.LossScaleOptimizer(optimizer)
    optimizer.build(model.trainable_variables)
    return optimizer


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
            if "training loss" in str(err):
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
    final = best or {"epoch": int(epoch), "train_loss": float("nan"), "eval_loss": float("nan"), "eval_auc": float("nan")}
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
