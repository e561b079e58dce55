"""Exports the trained model as a hermetic SavedModel with named serving signatures.

Signatures:
- `serving_default`: `examples`, serialized `tf.Example`s without the label ->
  `probability` and `class_id`.
- `serving_raw`: one named, typed `[batch]` input per raw feature (for JSON clients
  that send `inputs` by name) -> the same outputs. An optional feature's value is
  treated as missing when it is NaN (floats), -1 (integers) or "" (strings).
- `transform_features`: serialized examples -> the transformed features (for TFMA).

The two prediction signatures refuse, with `INVALID_ARGUMENT` naming the feature, a
request that holds a value the model cannot score (`_invalid_values`): NaN or an
infinity in a required float (a required feature has no missing value), an infinity
in an optional one, an empty required string. Transform would turn these into a NaN
probability, or an id nothing was trained on, without a word. A tf.Example says
"missing" by leaving a feature out, so `serving_default` refuses the same values
(a required feature left out fails parsing). `transform_features` does not check: it
shows what Transform makes of an example, as Transform does in the pipeline. A
required integer has no missing marker: -1 there is out of range and gets the OOV
id, as in `serving_default` and in training.

The SavedModel is written from a plain `tf.Module` that tracks only the model's
variables and TFT's Transform layer (`TFTransformOutput.transform_features_layer()`),
which tracks its own resources (vocabularies, tables), so the export does not need the
Transform output once written. Saving the Keras model itself would trace every layer
for Keras' own metadata, far slower to write and to load, and nothing in serving reads
it.
"""

from __future__ import annotations

import os
from typing import Dict, Iterable, List, Mapping, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_transform as tft

from components import compat
from components.compat import keras
from components.model import features
from components.model.trainer import data
from components.model.trainer import model as model_lib
from components.model.trainer.settings import (
    CLASS_KEY,
    EXAMPLES_INPUT,
    MAX_WARMUP_RECORDS,
    PROBABILITY_KEY,
    SERVING_SIGNATURE,
    WARMUP_FILE,
)

RAW_SIGNATURE = "serving_raw"
TRANSFORM_SIGNATURE = "transform_features"
# The TFLite model's messages for the values it refuses (see `TFLiteModule`).
ERRORS_KEY = "errors"
# Examples with probability above this are classed as big tips.
DECISION_THRESHOLD = 0.5
# `serving_raw` reads these values of an optional feature as "missing".
MISSING_VALUES: Dict[tf.dtypes.DType, object] = {tf.float32: float("nan"), tf.int64: -1, tf.string: ""}

TFLITE_FILE = os.path.join("assets.extra", "model.tflite")


def _as_transform_input(feature: features.Feature, values: tf.Tensor) -> object:
    """A `[batch]` raw input as Transform expects it: dense `[batch, 1]` or sparse.

    The one place that reads `MISSING_VALUES`: a required feature's value is never
    missing (`_invalid_values` refuses NaN and "" there)."""
    if feature.required:
        return tf.expand_dims(values, -1)
    missing = MISSING_VALUES[feature.dtype]
    present = (
        tf.logical_not(tf.math.is_nan(values)) if feature.dtype.is_floating else tf.not_equal(values, missing)
    )
    rows = tf.where(present)
    return tf.SparseTensor(
        indices=tf.concat([rows, tf.zeros_like(rows)], axis=1),
        values=tf.gather_nd(values, rows),
        dense_shape=tf.stack([tf.shape(values, out_type=tf.int64)[0], tf.constant(1, tf.int64)]),
    )


def _invalid_values(raw: Mapping[str, object]) -> List[Tuple[str, tf.Tensor]]:
    """For each feature that may hold a value the model cannot score, a message naming it
    and the rows (int64 `[n]`) that hold one, from Transform's inputs (see
    `_as_transform_input`; parsed examples are the same): a present float must be
    finite, a required string must not be empty."""
    checks = []
    for feature in features.FEATURES:
        x = raw[feature.name]
        if isinstance(x, tf.SparseTensor):
            values, rows = x.values, x.indices[:, 0]
        else:
            values = tf.reshape(x, [-1])
            rows = tf.range(tf.shape(values, out_type=tf.int64)[0])
        if feature.dtype.is_floating:
            invalid = tf.logical_not(tf.math.is_finite(values))
            what = "a finite number, got NaN or an infinity"
        elif feature.dtype == tf.string and feature.required:
            invalid = tf.equal(values, "")
            what = "a non-empty string"
        else:
            continue
        message = f"{feature.name} {'is required and ' if feature.required else ''}must be {what}"
        checks.append((message, tf.boolean_mask(rows, invalid)))
    return checks


class ServingModule(tf.Module):
    """What the SavedModel tracks: the model's variables with their names, and the Transform layer.

    Only these. The Keras model would pull in Keras' serialization, and a tracked
    `tf.function` would be saved again beside its signature and cost every load.
    """

    def __init__(self, model: keras.Model, tf_transform_output: tft.TFTransformOutput):
        super().__init__(name="big_tip_serving")
        # The `tf.Variable`s themselves: Keras 3's wrappers, tracked instead, are saved as
        # objects of their own beside the variables the signatures capture, and a loader
        # that restores by the checkpoint's object graph, as TF Serving's does, leaves the
        # captured ones uninitialized ("Could not find variable hidden_0/kernel").
        self.model_variables = compat.tf_variables(model.variables)
        # Their names, the same on both stacks (see `compat.variable_key`): warm start
        # matches variables by these.
        self.model_variable_keys = tf.Variable(
            [compat.variable_key(v) for v in model.variables], trainable=False, name="model_variable_keys"
        )
        self.transform_layer = tf_transform_output.transform_features_layer()


def _raw_specs() -> Dict[str, tf.TensorSpec]:
    """One named, typed `[batch]` input per raw feature."""
    return {f.name: tf.TensorSpec([None], f.dtype, name=f.name) for f in features.FEATURES}


def _probability(model: keras.Model, transformed: Mapping[str, tf.Tensor]) -> tf.Tensor:
    return tf.sigmoid(tf.cast(model(model_lib.model_inputs(transformed), training=False), tf.float32))


def make_signatures(
    model: keras.Model, tf_transform_output: tft.TFTransformOutput
) -> Dict[str, tf.types.experimental.ConcreteFunction]:
    """`serving_default`, `serving_raw` and `transform_features` (see the module doc)."""
    transform = data.transform_fn(tf_transform_output)
    serving_spec = features.raw_feature_spec(include_label=False)
    full_spec = features.raw_feature_spec(include_label=True)

    def predict(raw: Mapping[str, object]) -> Dict[str, tf.Tensor]:
        asserts = [
            tf.debugging.Assert(tf.equal(tf.size(rows), 0), [message, "in rows", rows])
            for message, rows in _invalid_values(raw)
        ]
        with tf.control_dependencies(asserts):
            probability = _probability(model, transform(raw))
        return {
            PROBABILITY_KEY: probability,
            CLASS_KEY: tf.cast(probability > DECISION_THRESHOLD, tf.int64),
        }

    examples_spec = tf.TensorSpec([None], tf.string, name=EXAMPLES_INPUT)

    @tf.function(input_signature=[examples_spec], autograph=False)
    def serve_examples(examples: tf.Tensor) -> Dict[str, tf.Tensor]:
        return predict(tf.io.parse_example(examples, serving_spec))

    @tf.function(input_signature=[_raw_specs()], autograph=False)
    def serve_raw(inputs: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        return predict({f.name: _as_transform_input(f, inputs[f.name]) for f in features.FEATURES})

    @tf.function(input_signature=[examples_spec], autograph=False)
    def transform_features(examples: tf.Tensor) -> Dict[str, tf.Tensor]:
        return transform(tf.io.parse_example(examples, full_spec))

    return {
        SERVING_SIGNATURE: serve_examples.get_concrete_function(),
        # Keyword inputs named after the raw features, not one dict argument.
        RAW_SIGNATURE: _with_keyword_inputs(serve_raw.get_concrete_function()),
        TRANSFORM_SIGNATURE: transform_features.get_concrete_function(),
    }


def _with_keyword_inputs(raw_function: tf.types.experimental.ConcreteFunction):
    @tf.function(autograph=False)
    def by_name(**inputs: tf.Tensor) -> Dict[str, tf.Tensor]:
        return raw_function(inputs)

    return by_name.get_concrete_function(**_raw_specs())


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
    missing, or refused (`_invalid_values`), in both models alike. TFLite's builtins
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

        @tf.function(input_signature=[_raw_specs()], autograph=False)
        def predict(inputs: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
            raw = {f.name: _as_transform_input(f, inputs[f.name]) for f in features.FEATURES}
            transformed = dict(transform({name: x for name, x in raw.items() if name not in own_ids}))
            for name, ids in own_ids.items():
                feature = features.FEATURES_BY_NAME[name]
                transformed[feature.transformed_name] = _ids(feature, ids, raw[name])
            checks = _invalid_values(raw)
            failed = tf.stack([tf.size(rows) > 0 for _, rows in checks])
            probability = _probability(model, transformed)
            refused = tf.fill(tf.shape(probability), float("nan"))
            return {
                PROBABILITY_KEY: tf.where(tf.reduce_any(failed), refused, probability),
                ERRORS_KEY: tf.boolean_mask(tf.constant([message for message, _ in checks]), failed),
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
        raw = {name: _as_transform_input(features.FEATURES_BY_NAME[name], x) for name, x in values.items()}
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
    looked up like any token (Transform gives it the OOV id; `_invalid_values` refuses it)."""
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


def strip_label(serialized: bytes, label_key: str = features.LABEL_KEY) -> bytes:
    example = tf.train.Example.FromString(serialized)
    example.features.feature.pop(label_key, None)
    return example.SerializeToString()


def write_warmup_requests(
    export_dir: str, serialized_examples: Iterable[bytes], model_name: str, limit: int = MAX_WARMUP_RECORDS
) -> int:
    """Writes TF Serving's warmup file: one `serving_default` request per example, label removed.

    Returns the number of requests written; with `limit` 0 no file is written.
    """
    if limit <= 0:
        return 0
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    path = os.path.join(export_dir, WARMUP_FILE)
    tf.io.gfile.makedirs(os.path.dirname(path))
    count = 0
    with tf.io.TFRecordWriter(path) as writer:
        for serialized in serialized_examples:
            if count >= min(limit, MAX_WARMUP_RECORDS):
                break
            request = predict_pb2.PredictRequest(
                model_spec=model_pb2.ModelSpec(name=model_name, signature_name=SERVING_SIGNATURE),
                inputs={EXAMPLES_INPUT: tf.make_tensor_proto([strip_label(serialized)], dtype=tf.string)},
            )
            log = prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(log.SerializeToString())
            count += 1
    return count


def export_serving_model(model: keras.Model, tf_transform_output: tft.TFTransformOutput, export_dir: str) -> None:
    """Writes the hermetic SavedModel: its assets are copies of the Transform output's
    vocabularies, so it serves after that output is gone."""
    module = ServingModule(model, tf_transform_output)
    tf.saved_model.save(module, export_dir, signatures=make_signatures(model, tf_transform_output))
