"""The TFLite model: builtin ops only, agreeing with the SavedModel's `serving_raw` on
every input fed to both, and refusing what it refuses."""

import math
import os

import numpy as np
import pytest
import tensorflow as tf

from components.model.trainer import export, tflite
from tests.components.model.trainer import serving_inputs


@pytest.fixture
def lite(exported):
    """The TFLite model's signature runner, as an app would run it: TensorFlow's
    interpreter, builtin ops only (no Flex delegate)."""
    return tf.lite.Interpreter(model_path=os.path.join(exported[0], tflite.TFLITE_FILE)).get_signature_runner()


def test_tflite_model_matches_the_saved_model_on_raw_features(exported, loaded, lite, rows):
    assert os.path.isfile(os.path.join(exported[0], "assets.extra", "model.tflite"))
    # Edge values each model must read as the other does: unknown tokens (OOV ids),
    # integers and coordinates out of range, a missing optional value; the rows already
    # leave optional features out (NaN, -1 and "" in `serving_raw`).
    raw = serving_inputs.raw_inputs(
        rows,
        payment_type=(0, b"a payment type never seen"),
        company=(1, b"a company never seen"),
        dropoff_census_tract=(2, 123),
        trip_start_hour=(3, 30),
        trip_start_day=(4, -1),
        pickup_latitude=(5, math.nan),
        dropoff_longitude=(6, 0.0),
    )
    saved = loaded.signatures[export.RAW_SIGNATURE](**raw)[export.PROBABILITY_KEY].numpy()
    outputs = lite(**{name: tensor.numpy() for name, tensor in raw.items()})
    assert outputs[tflite.ERRORS_KEY].tolist() == []
    # Builtin ops only: no TFLite runtime needs the Flex (select TF ops) delegate for it.
    with open(os.path.join(exported[0], tflite.TFLITE_FILE), "rb") as handle:
        assert b"Flex" not in handle.read()
    on_lite = outputs[export.PROBABILITY_KEY]
    assert on_lite.shape == (len(rows),)
    assert np.isfinite(saved).all()
    np.testing.assert_allclose(on_lite, saved, atol=1e-5)


@pytest.mark.parametrize("name, value", serving_inputs.invalid_values())
def test_tflite_model_refuses_what_the_saved_model_refuses(lite, rows, name, value):
    """The values of `test_raw_signature_refuses_a_nan_or_empty_value_naming_the_feature`.
    TFLite's builtins cannot fail a call with a message: every probability is NaN and
    `errors` names the feature."""
    raw = serving_inputs.raw_inputs(rows[:3], **{name: (1, value)})
    refused = lite(**{feature: tensor.numpy() for feature, tensor in raw.items()})
    assert np.isnan(refused[export.PROBABILITY_KEY]).all()
    errors = [message.decode() for message in refused[tflite.ERRORS_KEY]]
    assert len(errors) == 1 and errors[0].startswith(f"{name} "), errors
    valid = lite(**{feature: tensor.numpy() for feature, tensor in serving_inputs.raw_inputs(rows[:3]).items()})
    assert np.isfinite(valid[export.PROBABILITY_KEY]).all() and valid[tflite.ERRORS_KEY].tolist() == []
