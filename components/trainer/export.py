"""Exports the trained model as a hermetic SavedModel with named serving signatures."""

from __future__ import annotations

from typing import Dict

import tensorflow as tf
import tensorflow_transform as tft

from components import features

SERVING_SIGNATURE = "serving_default"
TRANSFORM_SIGNATURE = "transform_features"
PROBABILITY_KEY = "probability"
CLASS_KEY = "class_id"
# Examples with probability above this are classed as big tips.
DECISION_THRESHOLD = 0.5


def _serving_feature_spec(tf_transform_output: tft.TFTransformOutput) -> Dict[str, object]:
    spec = dict(tf_transform_output.raw_feature_spec())
    spec.pop(features.LABEL_KEY, None)
    return spec


def make_serving_signatures(
    model: tf.keras.Model, tf_transform_output: tft.TFTransformOutput
) -> Dict[str, tf.types.experimental.ConcreteFunction]:
    """`serving_default` and `transform_features`, both over serialized tf.Examples."""
    # Tracked by the model, so the Transform graph and its vocabularies are saved
    # inside the SavedModel: the export does not depend on Transform's output.
    model.tft_layer = tf_transform_output.transform_features_layer()
    feature_spec = _serving_feature_spec(tf_transform_output)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")], autograph=False)
    def serve_examples(examples: tf.Tensor) -> Dict[str, tf.Tensor]:
        raw = tf.io.parse_example(examples, feature_spec)
        transformed = model.tft_layer(raw)
        model_inputs = {f.transformed_name: transformed[f.transformed_name] for f in features.FEATURES}
        probability = tf.sigmoid(model(model_inputs, training=False))
        return {
            PROBABILITY_KEY: probability,
            CLASS_KEY: tf.cast(probability > DECISION_THRESHOLD, tf.int64),
        }

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")], autograph=False)
    def transform_features(examples: tf.Tensor) -> Dict[str, tf.Tensor]:
        raw = tf.io.parse_example(examples, dict(tf_transform_output.raw_feature_spec()))
        return model.tft_layer(raw)

    return {
        SERVING_SIGNATURE: serve_examples.get_concrete_function(),
        TRANSFORM_SIGNATURE: transform_features.get_concrete_function(),
    }


def export_serving_model(
    model: tf.keras.Model, tf_transform_output: tft.TFTransformOutput, export_dir: str
) -> None:
    signatures = make_serving_signatures(model, tf_transform_output)
    model.save(export_dir, save_format="tf", signatures=signatures)
