"""The raw-feature model as TFLite, builtin ops only (`assets.extra/model.tflite`, written
when the Trainer's `export.tflite` is set): the same inputs as the SavedModel's
`serving_raw` signature (`components.model.trainer.export`), the same probability, and the
same values refused.
"""

from __future__ import annotations

import os
from typing import Dict, List

import numpy as np
import tensorflow as tf
import tensorflow_transform as tft

from components import compat
from components.compat import keras
from components.model import features
from components.model.trainer import data, export
from components.model.trainer.settings import PROBABILITY_KEY

# The TFLite model's messages for the values it refuses (see `TFLiteModule`).
ERRORS_KEY = "errors"

TFLITE_FILE = os.path.join("assets.extra", "model.tflite")


class TFLiteModule(tf.Module):
    """The raw-feature model in a form TFLite can hold with its builtin ops only, so that
    any TFLite runtime runs it, without the Flex (select TF ops) delegate.

    Transform's graph runs as is where its ops have TFLite builtins (NUMERIC,
    INTEGER_RANGE). The vocabulary features are looked up in the same vocabularies, with
    the same ids (line order, then `Feature.oov_id` and `Feature.missing_id`), by
    comparing with every token (`_vocabulary_lookup`): TFLite cannot initialize Transform's
    tables from asset files, and its builtin hash tables take no int64 keys to int64. The
    BUCKETIZED features go through TFLite's builtin BUCKETIZE with the boundaries
    Transform computed (`_bucket_boundaries`): Transform's own lookup, `UpperBound`, has
    no builtin. Inputs become Transform's inputs as in `serving_raw`, so a value is
    missing, or refused (`export.invalid_values`), in both models alike. TFLite's builtins
    cannot fail a call with a message, so a refused value makes every `probability` NaN,
    and `errors` holds the message naming each feature that holds one (empty when every
    value is valid).
    """

    def __init__(self, model: keras.Model, tf_transform_output: tft.TFTransformOutput):
        super().__init__(name="big_tip_tflite")
        self.model_variables = compat.tf_variables(model.variables)
        self.transform_layer = tf_transform_output.transform_features_layer()
        transform = data.transform_fn(tf_transform_output)
        bucketized = [f for f in features.FEATURES if f.kind is features.Kind.BUCKETIZED]
        own_ids = {name: _bucketizer(boundaries)
                   for name, boundaries in _bucket_boundaries(transform, bucketized).items()}
        for feature in features.FEATURES:
            if feature.kind is features.Kind.CATEGORICAL:
                tokens = tf_transform_output.vocabulary_by_name(feature.vocabulary_name)
                keys = tokens if feature.dtype == tf.string else [int(token) for token in tokens]
                own_ids[feature.name] = _vocabulary_lookup(keys, feature.dtype, feature.oov_id(len(tokens)))

        @tf.function(input_signature=[export.raw_specs()], autograph=False)
        def predict(inputs: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
            raw = {f.name: export.as_transform_input(f, inputs[f.name]) for f in features.FEATURES}
            transformed = dict(transform({name: x for name, x in raw.items() if name not in own_ids}))
            for name, ids in own_ids.items():
                feature = features.FEATURES_BY_NAME[name]
                transformed[feature.transformed_name] = _ids(feature, ids, raw[name])
            checks = export.invalid_values(raw)
            failed = tf.stack([tf.reduce_any(check.invalid) for check in checks])
            probability = export.model_probability(model, transformed)
            refused = tf.fill(tf.shape(probability), float("nan"))
            return {
                PROBABILITY_KEY: tf.where(tf.reduce_any(failed), refused, probability),
                ERRORS_KEY: tf.boolean_mask(tf.constant([check.message for check in checks]), failed),
            }

        self.predict = predict


def _vocabulary_lookup(keys: List[object], dtype: tf.dtypes.DType, oov_id: int):
    """`values` -> each value's line in `keys`, or `oov_id`, with builtin ops: equality
    with every key (vocabularies hold at most `Feature.size` tokens)."""
    if not keys:
        return lambda values: tf.fill(tf.shape(values, out_type=tf.int64), tf.constant(oov_id, tf.int64))
    keys = tf.constant(keys, dtype)

    def lookup(values: tf.Tensor) -> tf.Tensor:
        matches = tf.equal(tf.expand_dims(values, 1), tf.expand_dims(keys, 0))
        line = tf.argmax(tf.cast(matches, tf.int32), axis=1, output_type=tf.int64)
        return tf.where(tf.reduce_any(matches, axis=1), line, tf.constant(oov_id, tf.int64))

    return lookup


def _bucketizer(boundaries: List[float]):
    """`values` -> the number of `boundaries` at or below each value, as Transform's
    buckets, with TFLite's builtin BUCKETIZE."""
    return lambda values: tf.cast(tf.raw_ops.Bucketize(input=values, boundaries=boundaries), tf.int64)


def _bucket_boundaries(transform, bucketized: List[features.Feature]) -> Dict[str, List[float]]:
    """The quantile boundaries of the BUCKETIZED features, read back from Transform by
    what it does: it gives a value the number of boundaries at or below it
    (`tft.apply_buckets`), so boundary j is the least float32 whose bucket is j or more.
    Found by bisection over the float32s in order, every feature and boundary at once
    (33 calls of the Transform graph)."""

    @tf.function(autograph=False)
    def transformed_ids(values: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        raw = {name: export.as_transform_input(features.FEATURES_BY_NAME[name], x) for name, x in values.items()}
        transformed = transform(raw)
        return {name: transformed[features.FEATURES_BY_NAME[name].transformed_name] for name in values}

    def buckets(orders: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        ids = transformed_ids({name: tf.constant(_float32_of_order(order)) for name, order in orders.items()})
        return {name: x.numpy() for name, x in ids.items()}

    top, bottom = _float32_order(np.array([np.inf, -np.inf]))
    counts = buckets({f.name: np.array([top]) for f in bucketized})
    wanted = {name: np.arange(1, int(count[0]) + 1) for name, count in counts.items()}
    low = {name: np.full(len(w), bottom) for name, w in wanted.items()}  # bucket(low) < wanted
    high = {name: np.full(len(w), top) for name, w in wanted.items()}  # bucket(high) >= wanted
    while any(np.any(high[name] - low[name] > 1) for name in wanted):
        middle = {name: (low[name] + high[name]) // 2 for name in wanted}
        reached = {name: b >= wanted[name] for name, b in buckets(middle).items()}
        high = {name: np.where(reached[name], middle[name], high[name]) for name in wanted}
        low = {name: np.where(reached[name], low[name], middle[name]) for name in wanted}
    return {name: [float(b) for b in _float32_of_order(high[name])] for name in wanted}


def _float32_order(x: np.ndarray) -> np.ndarray:
    """float32 -> int64 in the same order (-0.0 and 0.0 alike)."""
    bits = x.astype(np.float32).view(np.int32).astype(np.int64)
    return np.where(bits >= 0, bits, -(bits & 0x7FFFFFFF))


def _float32_of_order(order: np.ndarray) -> np.ndarray:
    return np.where(order >= 0, order, (-order) | 0x80000000).astype(np.uint32).view(np.float32)


def _ids(feature: features.Feature, lookup, x: object) -> tf.Tensor:
    """The `[batch]` ids of a CATEGORICAL or BUCKETIZED Transform input, as Transform
    gives them: a value absent from a sparse input (a missing optional value) gets
    `missing_id`; a dense input (a required feature) has no missing value, and its "" is
    looked up like any token (Transform gives it the OOV id; `export.invalid_values` refuses it)."""
    if isinstance(x, tf.SparseTensor):
        ids = tf.SparseTensor(x.indices, lookup(x.values), x.dense_shape)
        return tf.reshape(tf.sparse.to_dense(ids, default_value=tf.constant(feature.missing_id, tf.int64)), [-1])
    return tf.reshape(lookup(tf.reshape(x, [-1])), [-1])


def write_tflite(model: keras.Model, tf_transform_output: tft.TFTransformOutput, export_dir: str) -> str:
    """Converts the raw-feature model to `assets.extra/model.tflite`, builtin ops only."""
    module = TFLiteModule(model, tf_transform_output)
    converter = tf.lite.TFLiteConverter.from_concrete_functions([module.predict.get_concrete_function()], module)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    path = os.path.join(export_dir, TFLITE_FILE)
    tf.io.gfile.makedirs(os.path.dirname(path))
    with tf.io.gfile.GFile(path, "wb") as handle:
        handle.write(converter.convert())
    return path
