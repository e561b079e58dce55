"""Tiny in-memory data shared by the component tests: raw rows, their tf.Examples and
a Transform output analyzed on them."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam
from tensorflow_transform.tf_metadata import dataset_metadata, schema_utils

from components import features, preprocessing


def raw_rows(count=40, seed=0):
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
            "pickup_community_area": [int(rng.integers(1, 78))], "dropoff_community_area": [int(rng.integers(1, 78))] if i % 3 else [],
            "dropoff_census_tract": [int(rng.choice([17031081500, 17031320100, 17031839100]))] if i % 4 else [],
            "payment_type": [b"Credit Card" if i % 2 else b"Cash"],
            "company": [rng.choice([b"Flash Cab", b"Taxi Affiliation Services"])] if i % 6 else [],
            features.LABEL_KEY: [int(i % 2 == 1 and fare > 10)],
        }
        rows.append(row)
    return rows


def to_example(row, include_label=True):
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
def rows():
    return raw_rows()


@pytest.fixture(scope="session")
def transform_output_dir(tmp_path_factory, rows):
    """Transform's output (transform_fn, metadata) analyzed on `rows`, as the pipeline does it."""
    output_dir = str(tmp_path_factory.mktemp("transform_output"))
    metadata = dataset_metadata.DatasetMetadata(schema_utils.schema_from_feature_spec(features.raw_feature_spec()))
    with tft_beam.Context(temp_dir=str(tmp_path_factory.mktemp("tft_tmp")), force_tf_compat_v1=True):
        transform_fn = (rows, metadata) | tft_beam.AnalyzeDataset(preprocessing.preprocessing_fn)
        _ = transform_fn | tft_beam.WriteTransformFn(output_dir)
    return output_dir


@pytest.fixture(scope="session")
def transform_output(transform_output_dir):
    return tft.TFTransformOutput(transform_output_dir)
