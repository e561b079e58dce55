"""Transform's `preprocessing_fn`, driven entirely by `components.model.features`.

Required features arrive dense (`[batch, 1]`), optional ones sparse. Every
transformed feature leaves as a dense `[batch]` tensor named `<name>_xf`:
- NUMERIC: z-score over the values present (float32; its mean and variance summed in
  float64); missing -> 0.0 (the mean).
- BUCKETIZED: quantile bucket id; missing -> `Feature.missing_id`.
- CATEGORICAL: vocabulary id of the `size` most frequent values, one OOV bucket
  (TFT puts it right after the last token: `Feature.oov_id`); missing ->
  `Feature.missing_id`.
- INTEGER_RANGE: `value - low`, no analyzer; out of range -> `Feature.oov_id()`,
  missing -> `Feature.missing_id`.
"""

from __future__ import annotations

from typing import Dict, Union

import tensorflow as tf
import tensorflow_transform as tft

from components.model import features

Tensor = Union[tf.Tensor, tf.SparseTensor]


def _densify(x: Tensor, default) -> tf.Tensor:
    """A `[batch]` tensor from a dense `[batch, 1]` or a sparse `[batch, <=1]` input."""
    if isinstance(x, tf.SparseTensor):
        x = tf.sparse.to_dense(
            tf.SparseTensor(x.indices, x.values, [x.dense_shape[0], 1]),
            default_value=tf.cast(default, x.dtype),
        )
    return tf.reshape(x, [-1])


def _map_values(x: Tensor, fn) -> Tensor:
    if isinstance(x, tf.SparseTensor):
        return tf.SparseTensor(x.indices, fn(x.values), x.dense_shape)
    return fn(x)


def _range_id(feature: features.Feature, values: tf.Tensor) -> tf.Tensor:
    offset = values - feature.low
    in_range = tf.logical_and(offset >= 0, offset < feature.size)
    return tf.where(in_range, offset, tf.cast(feature.oov_id(), offset.dtype))


def _z_score(x: Tensor) -> Tensor:
    """`tft.scale_to_z_score` in float32, its mean and variance summed in float64: in
    float32 their last bit follows how the rows were batched, and a model trained on a
    million rows turns that bit into other weights (docs/vertex.md); float64 also keeps the
    sums exact far beyond float32's 24 bits. The scaling stays in float32, which TFLite's
    builtin ops take."""
    x64 = tf.cast(x, tf.float64)
    mean = tf.cast(tft.mean(x64), tf.float32)
    std = tf.cast(tf.sqrt(tft.var(x64)), tf.float32)

    def scale(values: tf.Tensor) -> tf.Tensor:
        centred = values - mean
        # As TFT does: a feature with a single value is only centred.
        return tf.where(tf.not_equal(std, 0.0), centred / std, centred)

    return _map_values(tf.cast(x, tf.float32), scale)


def _transform_feature(feature: features.Feature, x: Tensor) -> tf.Tensor:
    if feature.kind is features.Kind.NUMERIC:
        return _densify(_z_score(x), 0.0)
    if feature.kind is features.Kind.INTEGER_RANGE:
        return _densify(_map_values(x, lambda v: _range_id(feature, v)), feature.missing_id)
    if feature.kind is features.Kind.BUCKETIZED:
        return _densify(tft.bucketize(x, num_buckets=feature.size), feature.missing_id)
    ids = tft.compute_and_apply_vocabulary(
        x,
        top_k=feature.size,
        num_oov_buckets=1,
        vocab_filename=feature.vocabulary_name,
    )
    return _densify(ids, feature.missing_id)


def preprocessing_fn(inputs: Dict[str, Tensor]) -> Dict[str, tf.Tensor]:
    """tf.Transform entry point: raw features in, model features (and label) out."""
    outputs = {
        feature.transformed_name: _transform_feature(feature, inputs[feature.name])
        for feature in features.FEATURES
    }
    if features.LABEL_KEY in inputs:
        outputs[features.transformed_label_key()] = _densify(inputs[features.LABEL_KEY], 0)
    return outputs
