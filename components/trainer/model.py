"""Builds the Keras model over the transformed features of `components.features`."""

from __future__ import annotations

import dataclasses
from typing import Dict, Mapping, Tuple

import tensorflow as tf

from components import features


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    hidden_units: Tuple[int, ...] = (64, 32)
    embedding_dim: int = 8
    # Compute in float16 with float32 variables; the logit stays float32.
    mixed_precision: bool = False


def model_inputs(transformed: Mapping[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """The model's inputs, `[batch]` each, picked from Transform's outputs."""
    return {f.transformed_name: tf.reshape(transformed[f.transformed_name], [-1]) for f in features.FEATURES}


def build_model(config: ModelConfig = ModelConfig()) -> tf.keras.Model:
    """A wide-and-deep binary classifier that returns one logit per example.

    Inputs are the transformed features, each a `[batch]` tensor. Categorical and
    bucket ids feed small embeddings (deep part) and one-hot vectors (wide part);
    z-scored numbers feed both parts directly.
    """
    dtype = tf.keras.mixed_precision.Policy("mixed_float16" if config.mixed_precision else "float32")
    inputs: Dict[str, tf.keras.Input] = {}
    deep, wide = [], []
    for feature in features.FEATURES:
        name = feature.transformed_name
        if feature.kind is features.Kind.NUMERIC:
            inputs[name] = tf.keras.Input(shape=(), name=name, dtype=tf.float32)
            value = tf.keras.layers.Reshape((1,), name=f"{feature.name}_column", dtype=dtype)(inputs[name])
            deep.append(value)
            wide.append(value)
            continue
        inputs[name] = tf.keras.Input(shape=(), name=name, dtype=tf.int64)
        ids = tf.keras.layers.Reshape((1,), name=f"{feature.name}_ids", dtype=dtype)(inputs[name])
        embedded = tf.keras.layers.Embedding(
            feature.cardinality, config.embedding_dim, name=f"{feature.name}_embedding", dtype=dtype
        )(ids)
        deep.append(tf.keras.layers.Flatten(name=f"{feature.name}_flat", dtype=dtype)(embedded))
        wide.append(
            tf.keras.layers.CategoryEncoding(
                num_tokens=feature.cardinality, output_mode="one_hot", name=f"{feature.name}_one_hot",
                # No float16 kernel for its op; the mixed-precision Concatenate casts after.
                dtype="float32",
            )(ids)
        )

    x = tf.keras.layers.Concatenate(name="deep_inputs", dtype=dtype)(deep)
    for i, units in enumerate(config.hidden_units):
        x = tf.keras.layers.Dense(units, activation="relu", name=f"hidden_{i}", dtype=dtype)(x)
    wide_x = tf.keras.layers.Concatenate(name="wide_inputs", dtype=dtype)(wide)
    combined = tf.keras.layers.Concatenate(name="wide_and_deep", dtype=dtype)([x, wide_x])
    logits = tf.keras.layers.Dense(1, name="logit", dtype="float32")(combined)
    logits = tf.keras.layers.Reshape((), name="logits", dtype="float32")(logits)
    return tf.keras.Model(inputs=inputs, outputs=logits, name="big_tip")
