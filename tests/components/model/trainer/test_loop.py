"""The epoch loop on synthetic transformed batches: traces, checkpoints and resuming,
early stopping, divergence, strategies and TensorBoard scalars."""

import dataclasses
import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from components.compat import keras
from components.model.trainer import data, loop, run, settings
from components.model.trainer import model as model_lib
from components.model.trainer import steps as steps_lib
from tests.helpers import REPO_ROOT


@pytest.fixture
def signature(synthetic):
    return data.input_signature(synthetic.feature_spec())


def _config(synthetic, **overrides) -> settings.TrainConfig:
    return settings.TrainConfig(**{"batch_size": synthetic.batch_size, "early_stopping_patience": 0, **overrides})


def test_one_trace_per_function_over_epochs_with_a_partial_last_batch(signature, synthetic, traced_once, tmp_path):
    config = _config(synthetic, epochs=3, log_every_steps=2)
    result = loop.train(
        model_lib.build_model(), synthetic.dataset(), synthetic.dataset(1), signature, config, str(tmp_path)
    )
    assert result.epochs_run == 3
    assert result.steps == 3 * synthetic.batches_per_epoch
    assert result.trace_counts == traced_once


def test_restart_resumes_from_the_last_epoch_checkpoint(signature, synthetic, tmp_path, caplog):
    first = _config(synthetic, epochs=2)
    loop.train(model_lib.build_model(), synthetic.dataset(), synthetic.dataset(1), signature, first, str(tmp_path))
    more = _config(synthetic, epochs=3)
    with caplog.at_level(logging.INFO):
        result = loop.train(
            model_lib.build_model(), synthetic.dataset(), synthetic.dataset(1), signature, more, str(tmp_path)
        )
    assert result.resumed_from_epoch == 2
    assert "resumed from checkpoint at epoch 2 of 3" in caplog.text
    assert result.epochs_run == 3 and [record["epoch"] for record in result.history] == [1, 2, 3]
    assert result.steps == 3 * synthetic.batches_per_epoch


def test_a_run_resumed_after_any_epoch_ends_as_the_uninterrupted_run(
    synthetic, signature, traced_once, tmp_path, caplog
):
    # The rows in a new order each epoch, as the Trainer draws them.
    rows = synthetic.dataset().unbatch().batch(synthetic.examples).get_single_element()
    train_batches = run.epoch_batches(rows, synthetic.batch_size, seed=5)
    # Evaluated with the labels flipped: every epoch that learns makes the eval loss worse,
    # so the first epoch stays the best and training stops early, whatever the row order.
    flipped = synthetic.dataset(1).map(lambda columns, labels: (columns, 1 - labels))
    config = _config(synthetic, epochs=10, learning_rate=0.05, early_stopping_patience=3)

    def train(epochs: int, folder: str):
        keras.utils.set_random_seed(7)
        model = model_lib.build_model()
        result = loop.train(model, train_batches, flipped, signature,
                            dataclasses.replace(config, epochs=epochs), str(tmp_path / folder))
        return model, result

    model, uninterrupted = train(config.epochs, "uninterrupted")
    assert uninterrupted.trace_counts == traced_once
    assert uninterrupted.best_epoch + 1 < uninterrupted.epochs_run < config.epochs, (
        f"early stopping must happen: {uninterrupted.history}")
    # Killed while waiting for an improvement, and killed after deciding to stop.
    for killed_after in (uninterrupted.best_epoch + 1, uninterrupted.epochs_run):
        folder = f"killed_after_{killed_after}"
        train(killed_after, folder)
        caplog.clear()
        with caplog.at_level(logging.INFO):
            resumed_model, resumed = train(config.epochs, folder)
        assert f"resumed from checkpoint at epoch {killed_after} of {config.epochs}" in caplog.text
        assert resumed.resumed_from_epoch == killed_after
        assert (resumed.best_epoch, resumed.epochs_run, resumed.steps) == (
            uninterrupted.best_epoch, uninterrupted.epochs_run, uninterrupted.steps)
        assert [record["epoch"] for record in resumed.history] == [record["epoch"] for record in uninterrupted.history]
        for resumed_record, record in zip(resumed.history, uninterrupted.history):
            assert resumed_record == pytest.approx(record, abs=1e-6)
        assert resumed.eval_loss == pytest.approx(uninterrupted.eval_loss, abs=1e-6)
        for resumed_weight, weight in zip(resumed_model.get_weights(), model.get_weights()):
            np.testing.assert_allclose(resumed_weight, weight, rtol=0, atol=1e-6)


def test_the_checkpoint_holds_the_early_stopping_state(signature, synthetic, tmp_path):
    config = _config(synthetic, epochs=2, early_stopping_patience=3)
    model = model_lib.build_model()
    loop.train(model, synthetic.dataset(), synthetic.dataset(1), signature, config, str(tmp_path),
               checkpoint_dir=str(tmp_path / "elsewhere"))
    assert not tf.io.gfile.exists(str(tmp_path / "checkpoints"))
    names = {name for name, _ in tf.train.list_variables(str(tmp_path / "elsewhere"))}
    for state in ("best_eval_loss", "best_epoch", "epochs_without_improvement"):
        assert f"early_stopping/{state}/.ATTRIBUTES/VARIABLE_VALUE" in names
    best_weights = [name for name in names if name.startswith("early_stopping/best_weights/")]
    assert len(best_weights) == len(model.weights)


def test_deleting_checkpoints_removes_the_index_first(signature, synthetic, tmp_path, monkeypatch):
    config = _config(synthetic, epochs=1)
    loop.train(model_lib.build_model(), synthetic.dataset(), synthetic.dataset(1), signature, config, str(tmp_path))
    checkpoints = str(tmp_path / "checkpoints")
    # Killed right after the index went: what is left is not resumed from.
    monkeypatch.setattr(tf.io.gfile, "rmtree", lambda path: None)
    loop.delete_checkpoints(checkpoints)
    assert tf.io.gfile.glob(os.path.join(checkpoints, "ckpt-1*"))
    assert tf.train.latest_checkpoint(checkpoints) is None
    monkeypatch.undo()
    result = loop.train(model_lib.build_model(), synthetic.dataset(), synthetic.dataset(1), signature,
                        _config(synthetic, epochs=2), str(tmp_path))
    assert result.resumed_from_epoch == 0 and result.epochs_run == 2
    loop.delete_checkpoints(checkpoints)
    assert not tf.io.gfile.exists(checkpoints)
    loop.delete_checkpoints(checkpoints)


def test_nan_loss_stops_training_with_a_clear_error(signature, synthetic, tmp_path):
    config = settings.TrainConfig(epochs=1, batch_size=synthetic.batch_size)
    with pytest.raises(steps_lib.TrainingDivergedError, match="NaN or Inf"):
        loop.train(model_lib.build_model(), synthetic.dataset(poison=True), synthetic.dataset(1), signature, config,
                   str(tmp_path))
    assert not tf.io.gfile.glob(str(tmp_path / "checkpoints" / "ckpt-*"))


def test_early_stopping_keeps_the_weights_of_the_best_epoch(signature, synthetic, tmp_path):
    # A learning rate this high overshoots, so eval loss soon stops improving.
    config = _config(synthetic, epochs=8, learning_rate=0.5, early_stopping_patience=2)
    model = model_lib.build_model()
    result = loop.train(model, synthetic.dataset(), synthetic.dataset(1), signature, config, str(tmp_path))
    best = min(result.history, key=lambda record: record["eval_loss"])
    assert result.best_epoch == best["epoch"] < result.epochs_run
    assert result.eval_loss == best["eval_loss"]
    steps = steps_lib.make_steps(model, steps_lib.make_optimizer(model, config), signature)
    for batch, labels in synthetic.dataset(1):
        steps.eval_step(batch, labels)
    assert float(steps.eval_loss.result()) == pytest.approx(best["eval_loss"], rel=1e-4)


def _train_seeded(synthetic, config, tmp_path, model_config=model_lib.ModelConfig()):
    keras.utils.set_random_seed(7)
    model = model_lib.build_model(model_config)
    signature = data.input_signature(synthetic.feature_spec())
    result = loop.train(model, synthetic.dataset(), synthetic.dataset(1), signature, config, str(tmp_path))
    return model, result


def test_mixed_precision_switch_trains_in_float16_with_float32_logits(synthetic, traced_once, tmp_path):
    config = _config(synthetic, epochs=4, learning_rate=0.01, mixed_precision=True)
    model, result = _train_seeded(synthetic, config, tmp_path, model_lib.ModelConfig(mixed_precision=True))
    assert model.get_layer("hidden_0").compute_dtype == "float16"
    assert model.get_layer("hidden_0").kernel.dtype == tf.float32
    assert model.output.dtype == tf.float32
    losses = [record["train_loss"] for record in result.history]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert result.trace_counts == traced_once


def test_xla_switch_compiles_the_steps_and_still_traces_once(synthetic, traced_once, tmp_path):
    config = _config(synthetic, epochs=3, learning_rate=0.01, jit_compile=True, log_every_steps=1)
    _, result = _train_seeded(synthetic, config, tmp_path)
    losses = [record["train_loss"] for record in result.history]
    assert losses[-1] < losses[0]
    assert result.trace_counts == traced_once


def test_default_strategy_on_cpu():
    assert loop.choose_strategy().num_replicas_in_sync == 1


# Two logical CPUs must be configured before TensorFlow initializes its devices, so
# this runs in a fresh interpreter, on datasets the test saved with `Dataset.save`.
MIRRORED_CHECK = """
import json, sys
import components
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from components.model import features
from components.compat import keras
from components.model.trainer import data, loop, model as model_lib, settings
work_dir, batch_size = sys.argv[1], int(sys.argv[2])
train, evaluate = (tf.data.Dataset.load(f"{work_dir}/{name}") for name in ("train", "eval"))
feature_specs, label_spec = train.element_spec
spec = {name: tf.io.FixedLenFeature([], s.dtype) for name, s in feature_specs.items()}
spec[features.transformed_label_key()] = tf.io.FixedLenFeature([], label_spec.dtype)
config = settings.TrainConfig(epochs=2, batch_size=batch_size, early_stopping_patience=0, log_every_steps=0)
losses = {}
for name, strategy in (("default", tf.distribute.get_strategy()),
                       ("mirrored", tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))):
    keras.utils.set_random_seed(3)
    with strategy.scope():
        model = model_lib.build_model()
    # Each epoch's batches by the epoch's index, as the Trainer gives them.
    result = loop.train(model, lambda epoch: train, evaluate, data.input_signature(spec), config,
                        f"{work_dir}/{name}", strategy)
    losses[name] = [result.history, result.trace_counts, strategy.num_replicas_in_sync]
print(json.dumps(losses))
"""


def test_mirrored_strategy_averages_the_loss_over_the_global_batch(synthetic, tmp_path):
    synthetic.dataset().save(str(tmp_path / "train"))
    synthetic.dataset(1).save(str(tmp_path / "eval"))
    done = subprocess.run([sys.executable, "-c", MIRRORED_CHECK, str(tmp_path), str(synthetic.batch_size)],
                          capture_output=True, text=True, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    losses = json.loads(done.stdout.strip().splitlines()[-1])
    default_history, _, one = losses["default"]
    mirrored_history, mirrored_traces, two = losses["mirrored"]
    assert (one, two) == (1, 2)
    assert mirrored_traces == {"train_step": 1, "eval_step": 1, "metric_results": 1}
    assert len(default_history) == len(mirrored_history) == 2
    for single, mirrored in zip(default_history, mirrored_history):
        assert mirrored["train_loss"] == pytest.approx(single["train_loss"], rel=1e-3)
        assert mirrored["eval_loss"] == pytest.approx(single["eval_loss"], rel=1e-3)


def test_tensorboard_scalars_are_written_once_per_epoch(signature, synthetic, tmp_path):
    config = _config(synthetic, epochs=2)
    loop.train(model_lib.build_model(), synthetic.dataset(), synthetic.dataset(1), signature, config, str(tmp_path))
    tags = {}
    for path in tf.io.gfile.glob(str(tmp_path / "train" / "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                tags.setdefault(value.tag, []).append(float(tf.make_ndarray(value.tensor)))
    assert set(tags) == {"loss/train", "loss/eval", "auc/eval", "learning_rate", "examples_per_second"}
    assert all(len(values) == 2 for values in tags.values())
    assert tags["learning_rate"] == pytest.approx([config.learning_rate] * 2)
    assert all(value > 0 for value in tags["examples_per_second"])


def test_unknown_training_setting_is_rejected():
    with pytest.raises(ValueError, match="epoch"):
        settings.TrainConfig.from_custom_config({"train": {"epoch": 3}})
    assert settings.TrainConfig.from_custom_config({"train": {"epochs": 3}}).epochs == 3
