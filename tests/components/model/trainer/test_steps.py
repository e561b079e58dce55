"""The traced train and eval steps on synthetic transformed batches."""

import pytest
import tensorflow as tf

from components import compat
from components.compat import keras
from components.model.trainer import data, settings
from components.model.trainer import model as model_lib
from components.model.trainer import steps as steps_lib


@pytest.fixture
def signature(synthetic):
    return data.input_signature(synthetic.feature_spec())


def test_train_step_lowers_the_loss(signature, synthetic):
    model = model_lib.build_model()
    optimizer = compat.adam(0.01)
    optimizer.build(model.trainable_variables)
    steps = steps_lib.make_steps(model, optimizer, signature)
    batch, labels = next(iter(synthetic.dataset()))
    first = float(steps.train_step(batch, labels))
    for _ in range(30):
        last = float(steps.train_step(batch, labels))
    assert last < first * 0.7
    assert int(steps.step_counter) == 31


@pytest.mark.parametrize("steps_per_call", [1, 3, 50])
def test_steps_per_call_runs_every_batch_once_and_traces_once(signature, synthetic, traced_once, steps_per_call):
    model = model_lib.build_model()
    steps = steps_lib.make_steps(
        model, steps_lib.make_optimizer(model, settings.TrainConfig()), signature, steps_per_call=steps_per_call
    )
    strategy = tf.distribute.get_strategy()
    for epoch in range(1, 4):
        assert steps.run_epoch(synthetic.dataset(), True, strategy) == synthetic.examples
        assert int(steps.step_counter) == epoch * synthetic.batches_per_epoch
    assert steps.run_epoch(synthetic.dataset(1), False, strategy) == synthetic.examples
    for _ in range(2):
        metrics = steps.epoch_metrics()
        assert sorted(metrics) == ["eval_auc", "eval_loss", "train_loss"]
        assert 0.0 <= metrics["eval_auc"] <= 1.0 and metrics["train_loss"] > 0.0 and metrics["eval_loss"] > 0.0
    assert steps.trace_counts() == traced_once


def test_datasets_whose_dicts_list_the_same_features_in_another_order_share_one_traced_loop(signature, synthetic):
    """As the transformed cache's datasets do: each load lists the features in another order."""
    model = model_lib.build_model()
    steps = steps_lib.make_steps(model, steps_lib.make_optimizer(model, settings.TrainConfig()), signature,
                                 steps_per_call=3)
    forward = synthetic.dataset()
    backward = forward.map(lambda columns, labels: ({name: columns[name] for name in reversed(list(columns))}, labels))
    assert repr(forward.element_spec) != repr(backward.element_spec)
    strategy = tf.distribute.get_strategy()
    for dataset in (forward, backward, forward):
        assert steps.run_epoch(dataset, True, strategy) == synthetic.examples
    assert steps.trace_counts()["loop_train_step"] == 1


def test_reset_metrics_starts_the_next_epoch_from_zero(signature, synthetic):
    model = model_lib.build_model()
    steps = steps_lib.make_steps(model, steps_lib.make_optimizer(model, settings.TrainConfig()), signature)
    steps.run_epoch(synthetic.dataset(), True, tf.distribute.get_strategy())
    assert float(steps.train_loss.result()) > 0.0
    steps.reset_metrics()
    assert steps.epoch_metrics() == {"train_loss": 0.0, "eval_loss": 0.0, "eval_auc": 0.0}


def test_a_non_finite_loss_fails_the_train_step_with_the_checked_message(signature, synthetic):
    model = model_lib.build_model()
    steps = steps_lib.make_steps(model, steps_lib.make_optimizer(model, settings.TrainConfig()), signature)
    batch, labels = next(iter(synthetic.dataset(poison=True)))
    with pytest.raises(tf.errors.InvalidArgumentError, match=steps_lib.LOSS_CHECK_MESSAGE):
        steps.train_step(batch, labels)


def test_optimizer_slots_exist_before_the_first_step(signature, synthetic):
    model = model_lib.build_model()
    optimizer = steps_lib.make_optimizer(model, settings.TrainConfig(learning_rate=0.02))
    assert float(optimizer.learning_rate) == pytest.approx(0.02)
    # Adam's two slots per trainable variable, plus its counters: nothing is created on
    # the first step, so the traced step is not traced twice.
    before = [compat.variable_key(v) for v in optimizer.variables]
    assert len(before) >= 2 * len(model.trainable_variables) + 1
    steps = steps_lib.make_steps(model, optimizer, signature)
    steps.train_step(*next(iter(synthetic.dataset())))
    assert [compat.variable_key(v) for v in optimizer.variables] == before
    assert steps.trace_counts()["train_step"] == 1
    mixed = steps_lib.make_optimizer(model, settings.TrainConfig(mixed_precision=True))
    assert isinstance(mixed, keras.mixed_precision.LossScaleOptimizer)
