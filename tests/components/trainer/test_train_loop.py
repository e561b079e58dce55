"""The custom loop on small synthetic transformed data."""

import os

import numpy as np
import pytest
import tensorflow as tf

from components import features
from components.trainer import model as model_lib
from components.trainer import settings, train_loop

N_EXAMPLES, BATCH = 50, 16  # the last batch of each epoch holds 2 examples
TRACED_ONCE = {"train_step": 1, "eval_step": 1, "loop_train_step": 1, "loop_eval_step": 1, "metric_results": 1}


def _feature_spec():
    spec = {
        f.transformed_name: tf.io.FixedLenFeature([], tf.float32 if f.kind is features.Kind.NUMERIC else tf.int64)
        for f in features.FEATURES
    }
    spec[features.transformed_label_key()] = tf.io.FixedLenFeature([], tf.int64)
    return spec


def _dataset(seed=0, poison=False):
    rng = np.random.default_rng(seed)
    columns = {}
    for f in features.FEATURES:
        if f.kind is features.Kind.NUMERIC:
            columns[f.transformed_name] = rng.normal(size=N_EXAMPLES).astype(np.float32)
        else:
            columns[f.transformed_name] = rng.integers(0, f.cardinality, size=N_EXAMPLES).astype(np.int64)
    if poison:
        columns["fare_xf"][0] = np.nan
    labels = (columns["fare_xf"] > 0).astype(np.int64)
    return tf.data.Dataset.from_tensor_slices((columns, labels)).batch(BATCH)


@pytest.fixture
def signature():
    return train_loop.input_signature(_feature_spec())


def test_signature_has_unknown_batch_dimension_and_no_label_among_features(signature):
    feature_specs, label_spec = signature
    assert features.transformed_label_key() not in feature_specs
    assert all(spec.shape.as_list() == [None] for spec in feature_specs.values())
    assert label_spec.shape.as_list() == [None]


def test_model_returns_one_logit_per_example():
    model = model_lib.build_model()
    batch, _ = next(iter(_dataset()))
    assert model(batch).shape == (BATCH,)


def test_train_step_lowers_the_loss(signature):
    model = model_lib.build_model()
    optimizer = tf.keras.optimizers.Adam(0.01, jit_compile=False)
    optimizer.build(model.trainable_variables)
    steps = train_loop.make_steps(model, optimizer, signature)
    batch, labels = next(iter(_dataset()))
    first = float(steps.train_step(batch, labels))
    for _ in range(30):
        last = float(steps.train_step(batch, labels))
    assert last < first * 0.7
    assert int(steps.step_counter) == 31


def test_one_trace_per_function_over_epochs_with_a_partial_last_batch(signature, tmp_path):
    config = settings.TrainConfig(epochs=3, batch_size=BATCH, early_stopping_patience=0, log_every_steps=2)
    result = train_loop.train(model_lib.build_model(), _dataset(), _dataset(1), signature, config, str(tmp_path))
    assert result.epochs_run == 3
    assert result.steps == 3 * 4
    assert result.trace_counts == TRACED_ONCE


@pytest.mark.parametrize("steps_per_call", [1, 3, 50])
def test_steps_per_call_runs_every_batch_once_and_traces_once(signature, steps_per_call):
    model = model_lib.build_model()
    steps = train_loop.make_steps(
        model, train_loop.make_optimizer(model, settings.TrainConfig()), signature, steps_per_call=steps_per_call
    )
    strategy = tf.distribute.get_strategy()
    for epoch in range(1, 4):
        assert steps.run_epoch(_dataset(), True, strategy) == N_EXAMPLES
        assert int(steps.step_counter) == epoch * 4
    assert steps.run_epoch(_dataset(1), False, strategy) == N_EXAMPLES
    for _ in range(2):
        metrics = steps.epoch_metrics()
        assert sorted(metrics) == ["eval_auc", "eval_loss", "train_loss"]
        assert 0.0 <= metrics["eval_auc"] <= 1.0 and metrics["train_loss"] > 0.0 and metrics["eval_loss"] > 0.0
    assert steps.trace_counts() == TRACED_ONCE


def _rows(count):
    columns = {"x": tf.range(count, dtype=tf.float32), "y": tf.range(count, dtype=tf.int64) * 10}
    return columns, tf.range(count, dtype=tf.int64)


def test_batched_rows_keep_features_and_labels_together_in_order_without_a_seed():
    batches = list(train_loop.batched(_rows(10), 4))
    assert [int(labels.shape[0]) for _, labels in batches] == [4, 4, 2]
    assert np.concatenate([labels for _, labels in batches]).tolist() == list(range(10))
    for batch_features, labels in batches:
        assert (batch_features["x"].numpy() == labels.numpy()).all()
        assert (batch_features["y"].numpy() == labels.numpy() * 10).all()


def test_shuffled_batches_are_a_new_permutation_each_epoch_and_reproducible():
    def epochs(dataset, count):
        return [np.concatenate([labels for _, labels in dataset]).tolist() for _ in range(count)]

    first, second = epochs(train_loop.batched(_rows(100), 16, shuffle_seed=3), 2)
    assert sorted(first) == sorted(second) == list(range(100))
    assert first != second and first != list(range(100))
    for batch_features, labels in train_loop.batched(_rows(100), 16, shuffle_seed=3):
        assert (batch_features["y"].numpy() == labels.numpy() * 10).all()
    assert epochs(train_loop.batched(_rows(100), 16, shuffle_seed=3), 2) == [first, second]


def test_restart_resumes_from_the_last_epoch_checkpoint(signature, tmp_path):
    first = settings.TrainConfig(epochs=2, batch_size=BATCH, early_stopping_patience=0)
    train_loop.train(model_lib.build_model(), _dataset(), _dataset(1), signature, first, str(tmp_path))
    more = settings.TrainConfig(epochs=3, batch_size=BATCH, early_stopping_patience=0)
    result = train_loop.train(model_lib.build_model(), _dataset(), _dataset(1), signature, more, str(tmp_path))
    assert result.epochs_run == 1
    assert result.steps == 3 * 4


def test_nan_loss_stops_training_with_a_clear_error(signature, tmp_path):
    config = settings.TrainConfig(epochs=1, batch_size=BATCH)
    with pytest.raises(train_loop.TrainingDivergedError, match="NaN or Inf"):
        train_loop.train(model_lib.build_model(), _dataset(poison=True), _dataset(1), signature, config, str(tmp_path))


def test_unknown_training_setting_is_rejected():
    with pytest.raises(ValueError, match="epoch"):
        settings.TrainConfig.from_custom_config({"train": {"epoch": 3}})
    assert settings.TrainConfig.from_custom_config({"train": {"epochs": 3}}).epochs == 3


def test_early_stopping_keeps_the_weights_of_the_best_epoch(signature, tmp_path):
    # A learning rate this high overshoots, so eval loss soon stops improving.
    config = settings.TrainConfig(epochs=8, batch_size=BATCH, learning_rate=0.5, early_stopping_patience=2)
    model = model_lib.build_model()
    result = train_loop.train(model, _dataset(), _dataset(1), signature, config, str(tmp_path))
    best = min(result.history, key=lambda record: record["eval_loss"])
    assert result.best_epoch == best["epoch"] < result.epochs_run
    assert result.eval_loss == best["eval_loss"]
    steps = train_loop.make_steps(model, train_loop.make_optimizer(model, config), signature)
    for batch, labels in _dataset(1):
        steps.eval_step(batch, labels)
    assert float(steps.eval_loss.result()) == pytest.approx(best["eval_loss"], rel=1e-4)


def _first_losses(config, model_config=model_lib.ModelConfig(), strategy=None, tmp_path=None):
    tf.keras.utils.set_random_seed(7)
    strategy = strategy or tf.distribute.get_strategy()
    with strategy.scope():
        model = model_lib.build_model(model_config)
    result = train_loop.train(model, _dataset(), _dataset(1), train_loop.input_signature(_feature_spec()),
                              config, str(tmp_path), strategy)
    return model, result


def test_mixed_precision_switch_trains_in_float16_with_float32_logits(tmp_path):
    config = settings.TrainConfig(epochs=4, batch_size=BATCH, learning_rate=0.01, early_stopping_patience=0,
                                  mixed_precision=True)
    model, result = _first_losses(config, model_lib.ModelConfig(mixed_precision=True), tmp_path=tmp_path)
    assert model.get_layer("hidden_0").compute_dtype == "float16"
    assert model.get_layer("hidden_0").kernel.dtype == tf.float32
    assert model.output.dtype == tf.float32
    losses = [record["train_loss"] for record in result.history]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert result.trace_counts == TRACED_ONCE


def test_xla_switch_compiles_the_steps_and_still_traces_once(tmp_path):
    config = settings.TrainConfig(epochs=3, batch_size=BATCH, learning_rate=0.01, early_stopping_patience=0,
                                  jit_compile=True, log_every_steps=1)
    _, result = _first_losses(config, tmp_path=tmp_path)
    losses = [record["train_loss"] for record in result.history]
    assert losses[-1] < losses[0]
    assert result.trace_counts == TRACED_ONCE


def test_default_strategy_on_cpu():
    assert train_loop.choose_strategy().num_replicas_in_sync == 1


MIRRORED_CHECK = """
import json, sys
import components
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from tests.components.trainer import test_train_loop as t
from components.trainer import model as model_lib, settings, train_loop
config = settings.TrainConfig(epochs=2, batch_size=t.BATCH, early_stopping_patience=0, log_every_steps=0)
losses = {}
for name, strategy in (("default", tf.distribute.get_strategy()),
                       ("mirrored", tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))):
    tf.keras.utils.set_random_seed(3)
    with strategy.scope():
        model = model_lib.build_model()
    result = train_loop.train(model, t._dataset(), t._dataset(1), train_loop.input_signature(t._feature_spec()),
                              config, sys.argv[1] + "/" + name, strategy)
    losses[name] = [result.history, result.trace_counts, strategy.num_replicas_in_sync]
print(json.dumps(losses))
"""


def test_mirrored_strategy_averages_the_loss_over_the_global_batch(tmp_path):
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", MIRRORED_CHECK, str(tmp_path)], capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))))
    assert done.returncode == 0, done.stderr[-3000:]
    losses = json.loads(done.stdout.strip().splitlines()[-1])
    default_history, _, one = losses["default"]
    mirrored_history, mirrored_traces, two = losses["mirrored"]
    assert (one, two) == (1, 2)
    assert mirrored_traces == {"train_step": 1, "eval_step": 1, "metric_results": 1}
    for single, mirrored in zip(default_history, mirrored_history):
        assert mirrored["train_loss"] == pytest.approx(single["train_loss"], rel=1e-3)
        assert mirrored["eval_loss"] == pytest.approx(single["eval_loss"], rel=1e-3)


def test_tensorboard_scalars_are_written_once_per_epoch(signature, tmp_path):
    config = settings.TrainConfig(epochs=2, batch_size=BATCH, early_stopping_patience=0)
    train_loop.train(model_lib.build_model(), _dataset(), _dataset(1), signature, config, str(tmp_path))
    tags = {}
    for path in tf.io.gfile.glob(str(tmp_path / "train" / "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                tags.setdefault(value.tag, []).append(float(tf.make_ndarray(value.tensor)))
    assert set(tags) == {"loss/train", "loss/eval", "auc/eval", "learning_rate", "examples_per_second"}
    assert all(len(values) == 2 for values in tags.values())
    assert tags["learning_rate"] == pytest.approx([config.learning_rate] * 2)
    assert all(value > 0 for value in tags["examples_per_second"])


def test_small_training_sets_get_smaller_batches_not_fewer_steps():
    config = settings.TrainConfig(batch_size=1024, min_steps_per_epoch=10)
    assert train_loop.effective_batch_size(config, 12_000) == 1024
    assert train_loop.effective_batch_size(config, 430) == 43
    assert train_loop.effective_batch_size(config, 100) == 32
    assert train_loop.effective_batch_size(settings.TrainConfig(batch_size=1024, min_steps_per_epoch=0), 100) == 1024
