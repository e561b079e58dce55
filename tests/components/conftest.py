"""Tiny data shared by the component tests, as fixtures: raw rows, their tf.Examples (in
memory and as a GZIP TFRecord file), a Transform output analyzed on them, and synthetic
transformed batches for the training steps and loop."""

import dataclasses
from typing import Callable, Dict, List

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam
from tensorflow_transform.tf_metadata import dataset_metadata, schema_utils

from components.model import features, preprocessing

Row = Dict[str, list]


def _raw_rows(count: int = 40, seed: int = 0) -> List[Row]:
    """Rows as Transform's instance dicts: every required feature, optional ones mostly set."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(count):
        fare = float(rng.uniform(3, 40))
        row = {
            "fare": [fare], "trip_miles": [float(rng.uniform(0.1, 12))],
            "trip_seconds": [float(rng.integers(60, 3600))] if i % 5 else [],
            "pickup_latitude": [float(rng.uniform(41.7, 42.0))], "pickup_longitude": [float(rng.uniform(-87.9, -87.6))],
            "dropoff_latitude": [float(rng.uniform(41.7, 42.0))] if i % 7 else [],
            "dropoff_longitude": [float(rng.uniform(-87.9, -87.6))] if i % 7 else [],
            "trip_start_hour": [int(rng.integers(0, 24))], "trip_start_day": [int(rng.integers(1, 8))],
            "trip_start_month": [int(rng.integers(1, 13))],
            "pickup_community_area": [int(rng.integers(1, 78))],
            "dropoff_community_area": [int(rng.integers(1, 78))] if i % 3 else [],
            "dropoff_census_tract": [int(rng.choice([17031081500, 17031320100, 17031839100]))] if i % 4 else [],
            "payment_type": [b"Credit Card" if i % 2 else b"Cash"],
            "company": [rng.choice([b"Flash Cab", b"Taxi Affiliation Services"])] if i % 6 else [],
            features.LABEL_KEY: [int(i % 2 == 1 and fare > 10)],
        }
        rows.append(row)
    return rows


def _to_example(row: Row, include_label: bool = True) -> bytes:
    """`row` as a serialized tf.Example; empty values are left out, as in the data."""
    feature = {}
    for name, values in row.items():
        if name == features.LABEL_KEY and not include_label:
            continue
        if not values:
            continue
        value = values[0]
        if isinstance(value, bytes):
            feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
        elif isinstance(value, float):
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=[value]))
        else:
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(value)]))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


@pytest.fixture(scope="session")
def rows() -> List[Row]:
    return _raw_rows()


@pytest.fixture(scope="session")
def to_example() -> Callable[..., bytes]:
    """Serializes a row (see `rows`) as a tf.Example, with or without its label."""
    return _to_example


@pytest.fixture(scope="session")
def examples_file(tmp_path_factory, rows) -> str:
    """`rows` as one GZIP TFRecord file of tf.Examples with the label, as ExampleGen writes them."""
    path = str(tmp_path_factory.mktemp("examples") / "rows.tfrecord.gz")
    with tf.io.TFRecordWriter(path, options="GZIP") as writer:
        for row in rows:
            writer.write(_to_example(row))
    return path


@pytest.fixture(scope="session")
def transform_output_dir(tmp_path_factory, rows) -> str:
    """Transform's output (transform_fn, metadata) analyzed on `rows`, as the pipeline does it."""
    output_dir = str(tmp_path_factory.mktemp("transform_output"))
    metadata = dataset_metadata.DatasetMetadata(schema_utils.schema_from_feature_spec(features.raw_feature_spec()))
    with tft_beam.Context(temp_dir=str(tmp_path_factory.mktemp("tft_tmp")), force_tf_compat_v1=True):
        transform_fn = (rows, metadata) | tft_beam.AnalyzeDataset(preprocessing.preprocessing_fn)
        _ = transform_fn | tft_beam.WriteTransformFn(output_dir)
    return output_dir


@pytest.fixture(scope="session")
def transform_output(transform_output_dir) -> tft.TFTransformOutput:
    return tft.TFTransformOutput(transform_output_dir)


@dataclasses.dataclass(frozen=True)
class SyntheticTransformed:
    """Random transformed features (each id within its feature's cardinality) with a label
    the model can learn (`fare_xf > 0`), batched so that each epoch ends on a partial batch."""

    examples: int = 50
    batch_size: int = 16  # the last batch of each epoch holds 2 examples

    @property
    def batches_per_epoch(self) -> int:
        return -(-self.examples // self.batch_size)

    def feature_spec(self) -> Dict[str, tf.io.FixedLenFeature]:
        """The transformed feature spec, as `TFTransformOutput.transformed_feature_spec()` gives it."""
        spec = {
            f.transformed_name: tf.io.FixedLenFeature([], tf.float32 if f.kind is features.Kind.NUMERIC else tf.int64)
            for f in features.FEATURES
        }
        spec[features.transformed_label_key()] = tf.io.FixedLenFeature([], tf.int64)
        return spec

    def dataset(self, seed: int = 0, poison: bool = False) -> tf.data.Dataset:
        """Batches of `(features, label)`; `poison` puts a NaN into the first fare."""
        rng = np.random.default_rng(seed)
        columns = {}
        for f in features.FEATURES:
            if f.kind is features.Kind.NUMERIC:
                columns[f.transformed_name] = rng.normal(size=self.examples).astype(np.float32)
            else:
                columns[f.transformed_name] = rng.integers(0, f.cardinality, size=self.examples).astype(np.int64)
        if poison:
            columns["fare_xf"][0] = np.nan
        labels = (columns["fare_xf"] > 0).astype(np.int64)
        return tf.data.Dataset.from_tensor_slices((columns, labels)).batch(self.batch_size)


@pytest.fixture(scope="session")
def synthetic() -> SyntheticTransformed:
    return SyntheticTransformed()


@pytest.fixture(scope="session")
def traced_once() -> Dict[str, int]:
    """The trace counts of one training run whose every function traced exactly once."""
    return {"train_step": 1, "eval_step": 1, "loop_train_step": 1, "loop_eval_step": 1, "metric_results": 1}
