"""Builds the Keras model over the transformed features of `components.model.features`."""

from __future__ import annotations

import dataclasses
from typing import Dict, Mapping, Optional, Tuple

import tensorflow as tf

from components.compat import keras
from components.model import features

# The two layers that hold the shared id table (see `build_model`): a row per id of
# every id feature (`features.ID_KINDS`). Warm start remaps their rows by token.
EMBEDDINGS_LAYER = "embeddings"
WIDE_WEIGHTS_LAYER = "wide_weights"
ID_TABLE_LAYERS = (EMBEDDINGS_LAYER, WIDE_WEIGHTS_LAYER)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    hidden_units: Tuple[int, ...] = (64, 32)
    # 4 and not 8: the same eval AUC, and a batch served faster (docs/performance.md,
    # "serving's value checks in one condition, embeddings of 4 values").
    embedding_dim: int = 4
    # Compute in float16 with float32 variables; the logit stays float32.
    mixed_precision: bool = False


def model_inputs(transformed: Mapping[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """The model's inputs, `[batch]` each, picked from Transform's outputs."""
    return {f.transformed_name: tf.reshape(transformed[f.transformed_name], [-1]) for f in features.FEATURES}


def table_offsets() -> Dict[str, int]:
    """First row of each id feature in the shared embedding table, in input order."""
    offsets, row = {}, 0
    for feature in features.FEATURES:
        if feature.kind is not features.Kind.NUMERIC:
            offsets[feature.name] = row
            row += feature.cardinality
    return offsets


class _Columns(keras.layers.Layer):
    """Stacks `[batch]` inputs into one `[batch, n]` tensor. With `offsets`, shifts each
    column of ids into its own range of one shared table, so that every feature is
    looked up in a single gather."""

    def __init__(self, offsets: Optional[Tuple[int, ...]] = None, **kwargs):
        super().__init__(**kwargs)
        self._offsets = tuple(offsets) if offsets is not None else None

    def call(self, columns):
        stacked = tf.stack(columns, axis=1)
        if self._offsets is None:
            return stacked
        return stacked + tf.constant(self._offsets, dtype=stacked.dtype)

    def get_config(self):
        return {**super().get_config(), "offsets": self._offsets}


def build_model(config: ModelConfig = ModelConfig()) -> keras.Model:
    """A wide-and-deep binary classifier that returns one logit per example.

    Inputs are the transformed features, each a `[batch]` tensor. The ids of every
    bucketized and categorical feature index one shared table (each feature owns a
    range of it): an embedding per id for the deep part, a scalar weight per id for the
    wide part (the same as a linear layer over one-hot vectors). z-scored numbers feed
    both parts directly.
    """
    dtype = keras.mixed_precision.Policy("mixed_float16" if config.mixed_precision else "float32")
    inputs: Dict[str, keras.Input] = {}
    numeric, ids = [], []
    offsets = table_offsets()
    for feature in features.FEATURES:
        name = feature.transformed_name
        if feature.kind is features.Kind.NUMERIC:
            inputs[name] = keras.Input(shape=(), name=name, dtype=tf.float32)
            numeric.append(inputs[name])
            continue
        inputs[name] = keras.Input(shape=(), name=name, dtype=tf.int64)
        ids.append(inputs[name])
    table_size = sum(f.cardinality for f in features.FEATURES)

    numbers = _Columns(name="numbers")(numeric)
    table_ids = _Columns(tuple(offsets.values()), name="table_ids")(ids)
    embedded = keras.layers.Embedding(
        table_size, config.embedding_dim, name=EMBEDDINGS_LAYER, dtype=dtype)(table_ids)
    wide_weights = keras.layers.Embedding(table_size, 1, name=WIDE_WEIGHTS_LAYER, dtype=dtype)(table_ids)

    x = keras.layers.Concatenate(name="deep_inputs", dtype=dtype)(
        [numbers, keras.layers.Flatten(name="embeddings_flat", dtype=dtype)(embedded)]
    )
    for i, units in enumerate(config.hidden_units):
        x = keras.layers.Dense(units, activation="relu", name=f"hidden_{i}", dtype=dtype)(x)
    wide = keras.layers.Flatten(name="wide_flat", dtype=dtype)(wide_weights)
    combined = keras.layers.Concatenate(name="wide_and_deep", dtype=dtype)([x, wide, numbers])
    logits = keras.layers.Dense(1, name="logit", dtype="float32")(combined)
    logits = keras.layers.Reshape((), name="logits", dtype="float32")(logits)
    return keras.Model(inputs=inputs, outputs=logits, name="big_tip")
