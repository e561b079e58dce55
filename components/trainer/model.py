"""Builds the Keras model over the transformed features of `components.features`."""

from __future__ import annotations

import dataclasses
from typing import Dict, Tuple

import tensorflow as tf

from components import features


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    hidden_units: Tuple[int, ...] = (64, 32)
    embedding_dim: int = 8


def build_model(config: ModelConfig = ModelConfig()) -> tf.keras.Model:
    """A wide-and-deep binary classifier that returns one logit per example.

    Inputs are the transformed features, each a `[batch]` tensor. Categorical and
    bucket ids feed small embeddings (deep part) and one-hot vectors (wide part);
    z-scored numbers feed both parts directly.
    """
    inputs: Dict[str, tf.keras.Input] = {}
    deep, wide = [], []
    for feature in features.FEATURES:
        name = feature.transformed_name
        if feature.kind is features.Kind.NUMERIC:
            inputs[name] = tf.keras.Input(shape=(), name=name, dtype=tf.float32)
            value = tf.keras.layers.Reshape((1,), name=f"{feature.name}_column")(inputs[name])
            deep.append(value)
            wide.append(value)
            continue
        inputs[name] = tf.keras.Input(shape=(), name=name, dtype=tf.int64)
        ids = tf.keras.layers.Reshape((1,), name=f"{feature.name}_ids")(inputs[name])
        embedded = tf.keras.layers.Embedding(
            feature.cardinality, config.embedding_dim, name=f"{feature.name}_embedding"
        )(ids)
        deep.append(tf.keras.layers.Flatten(name=f"{feature.name}_flat")(embedded))
        wide.append(
            tf.keras.layers.CategoryEncoding(
                num_tokens=feature.cardinality, output_mode="one_hot", name=f"{feature.name}_one_hot"
            )(ids)
        )

    x = tf.keras.layers.Concatenate(name="deep_inputs")(deep)
    for i, units in enumerate(config.hidden_units):
        x = tf.keras.layers.Dense(units, activation="relu", name=f"hidden_{i}")(x)
    wide_x = tf.keras.layers.Concatenate(name="wide_inputs")(wide)
    combined = tf.keras.layers.Concatenate(name="wide_and_deep")([x, wide_x])
    logits = tf.keras.layers.Dense(1, name="logit")(combined)
    logits = tf.keras.layers.Reshape((), name="logits")(logits)
    return tf.keras.Model(inputs=inputs, outputs=logits, name="big_tip")
