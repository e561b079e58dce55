"""Exports the trained model as a hermetic SavedModel with named serving signatures.

Signatures:
- `serving_default`: `examples`, serialized `tf.Example`s without the label ->
  `probability` and `class_id`.
- `serving_raw`: one named, typed `[batch]` input per raw feature (for JSON clients
  that send `inputs` by name) -> the same outputs. An optional feature's value is
  treated as missing when it is NaN (floats), -1 (integers) or "" (strings).
- `transform_features`: serialized examples -> the transformed features (for TFMA).

The two prediction signatures refuse, with `INVALID_ARGUMENT` naming the feature, a
request that holds a value the model cannot score (`refuse_invalid`): NaN or an
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

The TFLite model (`components.model.trainer.tflite`) takes `serving_raw`'s inputs through
the same functions (`raw_specs`, `as_transform_input`, `invalid_values`,
`model_probability`), so both models read, refuse and score a value alike.
"""

from __future__ import annotations

import os
from typing import Dict, Iterable, List, Mapping, NamedTuple, Optional

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
    REFUSED_ROWS,
    SERVING_SIGNATURE,
    WARMUP_FILE,
)

RAW_SIGNATURE = "serving_raw"
TRANSFORM_SIGNATURE = "transform_features"
# Examples with probability above this are classed as big tips.
DECISION_THRESHOLD = 0.5
# `serving_raw` reads these values of an optional feature as "missing".
MISSING_VALUES: Dict[tf.dtypes.DType, object] = {tf.float32: float("nan"), tf.int64: -1, tf.string: ""}


def as_transform_input(feature: features.Feature, values: tf.Tensor) -> object:
    """A `[batch]` raw input as Transform expects it: dense `[batch, 1]` or sparse.

    The one place that reads `MISSING_VALUES`: a required feature's value is never
    missing (`refuse_invalid` refuses NaN and "" there)."""
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


class InvalidValues(NamedTuple):
    """One feature's values the model cannot score."""

    message: str  # names the feature and what it must hold
    transform_input: object  # its input to Transform, dense `[batch, 1]` or sparse
    invalid: tf.Tensor  # bool `[n]`: which of its `n` values the model cannot score


def _values(x: object) -> tf.Tensor:
    """The values of a feature's input to Transform, `[n]`."""
    return x.values if isinstance(x, tf.SparseTensor) else tf.reshape(x, [-1])


def _value_rows(x: object) -> tf.Tensor:
    """int64 `[n]`: the request row of each value of a feature's input to Transform."""
    if isinstance(x, tf.SparseTensor):
        return x.indices[:, 0]
    return tf.range(tf.size(x, out_type=tf.int64))


def invalid_values(raw: Mapping[str, object]) -> List[InvalidValues]:
    """For each feature that may hold a value the model cannot score, which of its values
    are invalid, from Transform's inputs (see `as_transform_input`; parsed examples are
    the same): a present float must be finite, a required string must not be empty."""
    checks = []
    for feature in features.FEATURES:
        x = raw[feature.name]
        values = _values(x)
        if feature.dtype.is_floating:
            invalid = tf.logical_not(tf.math.is_finite(values))
            what = "a finite number, got NaN or an infinity"
        elif feature.dtype == tf.string and feature.required:
            invalid = tf.equal(values, "")
            what = "a non-empty string"
        else:
            continue
        message = f"{feature.name} {'is required and ' if feature.required else ''}must be {what}"
        checks.append(InvalidValues(message, x, invalid))
    return checks


def refuse_invalid(raw: Mapping[str, object]) -> tf.Tensor:
    """True once no value of `raw` is invalid (`invalid_values`); otherwise the call fails
    with `INVALID_ARGUMENT`, naming the first feature (in `features.FEATURES`' order) that
    holds one, and its rows.

    One condition over every feature, and the rows of the message found only when it
    fails: an assertion per feature, each with its rows, cost every batch its share of
    the serving time (docs/performance.md, "serving's value checks in one condition").
    One assertion, not one per feature: each is a condition of two functions in the
    SavedModel, and every load of the model (the Evaluator's, the serving check's, TF
    Serving's) reads them all."""
    checks = invalid_values(raw)

    def refuse() -> tf.Tensor:
        holds_invalid = tf.stack([tf.reduce_any(check.invalid) for check in checks])
        first = tf.argmax(tf.cast(holds_invalid, tf.int32), output_type=tf.int32)
        message = tf.gather(tf.constant([check.message for check in checks]), first)
        rows = tf.concat([
            tf.boolean_mask(_value_rows(check.transform_input), tf.logical_and(check.invalid, tf.equal(first, index)))
            for index, check in enumerate(checks)
        ], axis=0)
        with tf.control_dependencies([tf.debugging.Assert(False, [message, REFUSED_ROWS, rows])]):
            return tf.constant(False)

    any_invalid = tf.reduce_any(tf.concat([check.invalid for check in checks], axis=0))
    return tf.cond(any_invalid, refuse, lambda: tf.constant(True))


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


def raw_specs() -> Dict[str, tf.TensorSpec]:
    """One named, typed `[batch]` input per raw feature."""
    return {f.name: tf.TensorSpec([None], f.dtype, name=f.name) for f in features.FEATURES}


def transform_input_specs() -> Dict[str, tf.TypeSpec]:
    """Transform's raw inputs without the label, as parsing an example by
    `features.raw_feature_spec` gives them (and `as_transform_input` makes them): a
    batch of each fixed-length feature, dense; a sparse batch of each other."""
    return {
        name: tf.TensorSpec([None, *spec.shape], spec.dtype) if isinstance(spec, tf.io.FixedLenFeature)
        else tf.SparseTensorSpec([None, None], spec.dtype)
        for name, spec in features.raw_feature_spec(include_label=False).items()
    }


def model_probability(model: keras.Model, transformed: Mapping[str, tf.Tensor]) -> tf.Tensor:
    return tf.sigmoid(tf.cast(model(model_lib.model_inputs(transformed), training=False), tf.float32))


def make_signatures(
    model: keras.Model, tf_transform_output: tft.TFTransformOutput
) -> Dict[str, tf.types.experimental.ConcreteFunction]:
    """`serving_default`, `serving_raw` and `transform_features` (see the module doc)."""
    transform = data.transform_fn(tf_transform_output)
    serving_spec = features.raw_feature_spec(include_label=False)
    full_spec = features.raw_feature_spec(include_label=True)

    # Traced once, called by both prediction signatures: the model, the Transform layer
    # and the refusal, each traced once (inlined again where the SavedModel is loaded).
    @tf.function(input_signature=[transform_input_specs()], autograph=False)
    def predict(raw: Mapping[str, object]) -> Dict[str, tf.Tensor]:
        probability = model_probability(model, transform(raw))
        # The check beside the model, not before it: both run at once.
        with tf.control_dependencies([refuse_invalid(raw)]):
            probability = tf.identity(probability)
        return {
            PROBABILITY_KEY: probability,
            CLASS_KEY: tf.cast(probability > DECISION_THRESHOLD, tf.int64),
        }

    examples_spec = tf.TensorSpec([None], tf.string, name=EXAMPLES_INPUT)

    @tf.function(input_signature=[examples_spec], autograph=False)
    def serve_examples(examples: tf.Tensor) -> Dict[str, tf.Tensor]:
        return predict(tf.io.parse_example(examples, serving_spec))

    @tf.function(input_signature=[raw_specs()], autograph=False)
    def serve_raw(inputs: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        return predict({f.name: as_transform_input(f, inputs[f.name]) for f in features.FEATURES})

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

    return by_name.get_concrete_function(**raw_specs())


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


def export_serving_model(
    model: keras.Model, tf_transform_output: tft.TFTransformOutput, export_dir: str,
    signatures: Optional[Dict[str, tf.types.experimental.ConcreteFunction]] = None,
) -> None:
    """Writes the hermetic SavedModel: its assets are copies of the Transform output's
    vocabularies, so it serves after that output is gone. `signatures`: those of
    `make_signatures` for the same model and output, if traced earlier (before training:
    they capture the model's variables, and what is saved is their values now)."""
    module = ServingModule(model, tf_transform_output)
    if signatures is None:
        signatures = make_signatures(model, tf_transform_output)
    tf.saved_model.save(module, export_dir, signatures=signatures)
