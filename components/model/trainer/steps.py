"""The traced train and eval steps, and the state they update.

Rules the steps follow:
- each step is built by `make_steps` with a fixed `input_signature` whose batch
  dimension is `None`, so the last, partial batch does not retrace;
- all state (model, optimizer, step counter, metrics) is created outside the traced
  functions and lives in `tf.Variable`s;
- nothing inside a traced function has a Python side effect; progress is logged
  in-graph with `tf.print` under an explicit `tf.cond` (AutoGraph is off);
- `TrainConfig.run_eagerly` runs every step eagerly for debugging (set by the loop).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Optional, Tuple

import tensorflow as tf
from absl import logging as absl_logging

from components import compat
from components.compat import keras
from components.model.trainer.settings import TrainConfig


class TrainingDivergedError(RuntimeError):
    """The loss became NaN or Inf; nothing is exported."""


# The message of the train step's `check_numerics` on the loss: the epoch loop tells a
# diverged loss from other invalid-argument errors by it.
LOSS_CHECK_MESSAGE = "training loss"


@dataclasses.dataclass
class Steps:
    """The traced train and eval steps and the state they update."""

    train_step: Callable[..., tf.Tensor]
    eval_step: Callable[..., tf.Tensor]
    step_counter: tf.Variable
    train_loss: keras.metrics.Mean
    eval_loss: keras.metrics.Mean
    eval_auc: keras.metrics.AUC
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
        # By the specs with every dict's keys sorted: a dataset loaded from disk (the
        # transformed cache) lists its features in another order at each load, which must
        # not trace the loop again.
        key = (step.__name__, _in_sorted_order(element_spec))
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


def _in_sorted_order(structure) -> str:
    """`structure`'s repr with every dict's items in the sorted order of their keys."""
    if isinstance(structure, dict):
        return "{" + ", ".join(f"{key!r}: {_in_sorted_order(value)}" for key, value in sorted(structure.items())) + "}"
    if isinstance(structure, (tuple, list)):
        return f"{type(structure).__name__}({', '.join(_in_sorted_order(value) for value in structure)})"
    return repr(structure)


def make_steps(
    model: keras.Model,
    optimizer: keras.optimizers.Optimizer,
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
    train_loss = keras.metrics.Mean(name="train_loss")
    eval_loss = keras.metrics.Mean(name="eval_loss")
    with strategy.scope():
        eval_auc = keras.metrics.AUC(name="eval_auc")
        replica_train_step, replica_eval_step = _replica_steps(model, optimizer, eval_auc, jit_compile)

    def log_progress() -> None:
        if log_every_steps > 0:  # decided once, while tracing; no branch in the graph otherwise
            tf.cond(
                tf.equal(step_counter % log_every_steps, 0),
                lambda: tf.print("step", step_counter, "loss", train_loss.result(), output_stream=absl_logging.info),
                tf.no_op,
            )

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

    # Keras runs AutoGraph on `Metric.result()` when called eagerly (AUC's is slow to
    # convert); inside a function traced without AutoGraph it does not.
    @tf.function(autograph=False)
    def metric_results() -> Dict[str, tf.Tensor]:
        return {"train_loss": train_loss.result(), "eval_loss": eval_loss.result(), "eval_auc": eval_auc.result()}

    return Steps(
        train_step, eval_step, step_counter, train_loss, eval_loss, eval_auc, metric_results,
        steps_per_call=steps_per_call,
    )


def _replica_steps(model: keras.Model, optimizer: keras.optimizers.Optimizer, eval_auc: keras.metrics.AUC,
                   jit_compile: bool) -> Tuple[Callable, Callable]:
    """The train and eval steps of one replica on its share of the batch: each returns that
    share's loss; the train step applies its (loss-scaled) gradients, the eval step updates
    `eval_auc`."""
    loss_fn = keras.losses.BinaryCrossentropy(from_logits=True, reduction="none")

    def batch_loss(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
        per_example = loss_fn(
            tf.expand_dims(tf.cast(labels, tf.float32), -1), tf.expand_dims(tf.cast(logits, tf.float32), -1)
        )
        return tf.nn.compute_average_loss(per_example)

    # AutoGraph is off: the steps have no data-dependent Python control flow, and
    # converting the whole Keras call stack would dominate the first trace.
    @tf.function(autograph=False, jit_compile=jit_compile)
    def replica_train_step(batch_features: Dict[str, tf.Tensor], labels: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            logits = model(batch_features, training=True)
            loss = tf.debugging.check_numerics(batch_loss(labels, logits), LOSS_CHECK_MESSAGE)
            scaled_loss = compat.scale_loss(optimizer, loss)
        gradients = tape.gradient(scaled_loss, model.trainable_variables)
        compat.apply_scaled_gradients(optimizer, gradients, model.trainable_variables)
        return loss

    @tf.function(autograph=False, jit_compile=jit_compile)
    def replica_eval_step(batch_features: Dict[str, tf.Tensor], labels: tf.Tensor) -> tf.Tensor:
        logits = model(batch_features, training=False)
        loss = batch_loss(labels, logits)
        eval_auc.update_state(labels, tf.sigmoid(tf.cast(logits, tf.float32)))
        return loss

    return replica_train_step, replica_eval_step


def make_optimizer(model: keras.Model, config: TrainConfig) -> keras.optimizers.Optimizer:
    """Adam, loss-scaled under mixed precision, with its slot variables already built.

    Slots are created now, not on the first step: a `tf.function` that creates
    variables while tracing is traced a second time.
    """
    optimizer = compat.adam(config.learning_rate)
    if config.mixed_precision:
        optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)
    optimizer.build(model.trainable_variables)
    return optimizer
