"""`components.compat`: the one place where the two stacks differ, on the stack the suite runs on."""

import importlib.metadata
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from components import compat
from components.compat import keras
from components.model.trainer import model as model_lib


def test_the_stack_is_the_installed_tfx():
    major, minor = importlib.metadata.version("tfx").split(".")[:2]
    assert compat.STACK == f"tfx-{major}.{minor}"
    assert compat.STACK in ("tfx-1.16", "tfx-1.21")
    line = compat.describe()
    assert line.startswith(f"{compat.STACK}: TFX {importlib.metadata.version('tfx')}, TensorFlow ")
    assert f"Python {sys.version.split()[0]}" in line


def test_keras_is_keras_2_on_tfx_1_16_and_keras_3_on_tfx_1_21():
    assert keras.__version__.split(".")[0] == ("2" if compat.STACK == "tfx-1.16" else "3")
    assert isinstance(model_lib.build_model(), keras.Model)


def test_the_legacy_keras_switch_is_set_only_on_the_stack_that_needs_it():
    """In a fresh interpreter: importing the package sets TF_USE_LEGACY_KERAS on tfx-1.16
    and leaves it unset on tfx-1.21 (TFT sets it there for its own Keras 2 code, later)."""
    probe = "import os, json, components; print(json.dumps(os.environ.get('TF_USE_LEGACY_KERAS')))"
    env = {key: value for key, value in os.environ.items() if key != "TF_USE_LEGACY_KERAS"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ("1" if compat.STACK == "tfx-1.16" else None)


def test_variable_keys_are_layer_and_variable_names_on_both_stacks():
    keys = [compat.variable_key(v) for v in model_lib.build_model().variables]
    assert len(set(keys)) == len(keys)
    assert {"hidden_0/kernel", "hidden_0/bias", "logit/kernel", "embeddings/embeddings",
            "wide_weights/embeddings"} <= set(keys)
    assert not any(key.endswith(":0") for key in keys)


def _one_step(optimizer, model, loss_of):
    with tf.GradientTape() as tape:
        loss = loss_of(model)
        scaled = compat.scale_loss(optimizer, loss)
    compat.apply_scaled_gradients(optimizer, tape.gradient(scaled, model.trainable_variables),
                                  model.trainable_variables)
    return float(loss)


def _dense_model():
    keras.utils.set_random_seed(5)
    return keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(1)])


X = tf.constant(np.random.default_rng(0).normal(size=(16, 3)), tf.float32)


@pytest.mark.parametrize("mixed", [False, True])
def test_loss_scaling_steps_like_an_unscaled_optimizer(mixed):
    """With the loss scaled (mixed precision), the weights move as without: the scale is
    taken out of the gradients before they are applied, on both stacks. Plain SGD, whose
    step is proportional to the gradient, so a scale left in would show."""

    def loss_of(model):
        return tf.reduce_mean(tf.square(model(X) - 1.0))

    plain_model, scaled_model = _dense_model(), _dense_model()
    plain = keras.optimizers.SGD(0.05)
    scaled = keras.optimizers.SGD(0.05)
    if mixed:
        scaled = keras.mixed_precision.LossScaleOptimizer(scaled)
        assert float(compat.scale_loss(scaled, tf.constant(1.0))) > 1.0
    assert compat.is_loss_scaled(scaled) == mixed
    for _ in range(3):
        _one_step(plain, plain_model, loss_of)
        _one_step(scaled, scaled_model, loss_of)
    for a, b in zip(plain_model.trainable_variables, scaled_model.trainable_variables):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    moved = _dense_model()
    assert not np.allclose(np.asarray(moved.trainable_variables[0]), np.asarray(plain_model.trainable_variables[0]))


def test_a_loss_scaled_step_with_non_finite_gradients_is_skipped():
    model = _dense_model()
    before = [np.asarray(v).copy() for v in model.trainable_variables]
    optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.05))
    _one_step(optimizer, model, lambda m: tf.reduce_mean(m(X)) * float("inf"))
    for variable, value in zip(model.trainable_variables, before):
        np.testing.assert_array_equal(np.asarray(variable), value)
