"""What the tests of the SavedModel's `serving_raw` signature and of the TFLite model feed
both: raw inputs from rows, and the values both must refuse."""

import math

import pytest
import tensorflow as tf

from components.model import features
from components.model.trainer import export


def raw_inputs(rows, **changes):
    """`serving_raw` inputs for `rows`; `changes` maps a feature to `(row number, value)`."""
    inputs = {}
    for feature in features.FEATURES:
        missing = export.MISSING_VALUES[feature.dtype]
        values = [row[feature.name][0] if row[feature.name] else missing for row in rows]
        if feature.name in changes:
            row, value = changes[feature.name]
            values[row] = value
        inputs[feature.name] = tf.constant(values, dtype=feature.dtype)
    return inputs


def invalid_values():
    """`(feature, value)` pairs `serving_raw` must refuse, from the feature spec: NaN and
    infinities in a required float, infinities in an optional one (NaN there means
    missing), an empty required string."""
    cases = []
    for feature in features.FEATURES:
        if feature.dtype.is_floating:
            refused = (math.nan, math.inf, -math.inf) if feature.required else (math.inf, -math.inf)
            cases += [pytest.param(feature.name, value, id=f"{feature.name}={value}") for value in refused]
        elif feature.dtype == tf.string and feature.required:
            cases.append(pytest.param(feature.name, b"", id=f"{feature.name}=empty"))
    return cases
