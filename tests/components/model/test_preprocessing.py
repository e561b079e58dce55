"""preprocessing_fn run through tf.Transform on a few in-memory rows."""

import numpy as np
import pytest
import tensorflow_transform.beam as tft_beam
from tensorflow_transform.tf_metadata import dataset_metadata, schema_utils

from components.model import features, preprocessing


def _row(fare, company=None, latitude=None, trip_seconds=None, label=0, hour=10, community_area=None):
    row = {f.name: [] for f in features.FEATURES}
    row.update({
        "fare": [fare], "trip_miles": [1.0], "trip_start_hour": [hour], "trip_start_day": [3],
        "trip_start_month": [4], "payment_type": [b"Cash"], features.LABEL_KEY: [label],
    })
    if company is not None:
        row["company"] = [company]
    if latitude is not None:
        row["pickup_latitude"] = [latitude]
    if trip_seconds is not None:
        row["trip_seconds"] = [trip_seconds]
    if community_area is not None:
        row["pickup_community_area"] = [community_area]
    return row


@pytest.fixture(scope="module")
def transformed(tmp_path_factory):
    rows = [
        _row(1.0, company=b"A", latitude=41.8, trip_seconds=100.0, label=1, hour=0, community_area=1),
        _row(2.0, company=b"A", latitude=41.9, trip_seconds=300.0, hour=23, community_area=99),
        _row(3.0, company=b"B", latitude=42.0, hour=7),
    ]
    metadata = dataset_metadata.DatasetMetadata(schema_utils.schema_from_feature_spec(features.raw_feature_spec()))
    with tft_beam.Context(temp_dir=str(tmp_path_factory.mktemp("tft")), force_tf_compat_v1=True):
        (outputs, _), _ = (rows, metadata) | tft_beam.AnalyzeAndTransformDataset(preprocessing.preprocessing_fn)
    return outputs


def test_every_feature_and_the_label_come_out(transformed):
    expected = {f.transformed_name for f in features.FEATURES} | {features.transformed_label_key()}
    assert set(transformed[0]) == expected


def test_numeric_is_z_scored_and_missing_becomes_the_mean(transformed):
    fares = [row["fare_xf"] for row in transformed]
    np.testing.assert_allclose(fares, [-1.2247449, 0.0, 1.2247449], rtol=1e-5)
    seconds = [row["trip_seconds_xf"] for row in transformed]
    np.testing.assert_allclose(seconds, [-1.0, 1.0, 0.0], rtol=1e-5)


def test_categorical_gets_vocabulary_ids_and_missing_gets_its_own_id(transformed):
    company = features.FEATURES_BY_NAME["company"]
    ids = [row["company_xf"] for row in transformed]
    assert ids[0] == ids[1] == 0  # the most frequent value
    assert ids[2] == 1
    assert all(0 <= i < company.cardinality for i in ids)
    # No row lacks a company here; see test_missing_bucketized_value_gets_the_extra_bucket.
    assert company.missing_id not in ids


@pytest.fixture(scope="module")
def applied_to_new_rows(tmp_path_factory):
    """Transform analyzed on three rows, then applied to two others: one with a company
    the vocabulary has not seen, one without company or latitude."""
    analyzed = [_row(1.0, company=b"A", latitude=41.8), _row(2.0, company=b"B", latitude=41.9),
                _row(3.0, company=b"A", latitude=42.0)]
    new = [_row(4.0, company=b"C", latitude=41.85), _row(5.0)]
    metadata = dataset_metadata.DatasetMetadata(schema_utils.schema_from_feature_spec(features.raw_feature_spec()))
    with tft_beam.Context(temp_dir=str(tmp_path_factory.mktemp("tft")), force_tf_compat_v1=True):
        transform_fn = (analyzed, metadata) | tft_beam.AnalyzeDataset(preprocessing.preprocessing_fn)
        outputs, _ = ((new, metadata), transform_fn) | tft_beam.TransformDataset()
    return outputs


def test_a_value_outside_the_vocabulary_gets_the_oov_id_right_after_the_last_token(applied_to_new_rows):
    company = features.FEATURES_BY_NAME["company"]
    assert [row["company_xf"] for row in applied_to_new_rows] == [company.oov_id(2), company.missing_id]
    assert company.oov_id(2) == 2 < company.missing_id


def test_integer_range_is_offset_out_of_range_is_oov_and_missing_has_its_own_id(transformed):
    hour = features.FEATURES_BY_NAME["trip_start_hour"]
    assert [row["trip_start_hour_xf"] for row in transformed] == [0, 23, 7]
    area = features.FEATURES_BY_NAME["pickup_community_area"]
    assert area.low == 1
    assert [row["pickup_community_area_xf"] for row in transformed] == [0, area.oov_id(), area.missing_id]
    assert (area.oov_id(), area.missing_id) == (area.size, area.size + 1)
    assert hour.cardinality == hour.size + 2


def test_label_passes_through(transformed):
    assert [row[features.transformed_label_key()] for row in transformed] == [1, 0, 0]


def test_missing_bucketized_value_gets_the_extra_bucket(applied_to_new_rows):
    latitude = features.FEATURES_BY_NAME["pickup_latitude"]
    present, missing = (row["pickup_latitude_xf"] for row in applied_to_new_rows)
    assert 0 <= present < latitude.size
    assert missing == latitude.missing_id == latitude.size


@pytest.mark.slow
@pytest.mark.every_stack
def test_a_z_score_does_not_depend_on_how_the_rows_were_batched(tmp_path):
    """The same rows analyzed in batches of 7 and of 1,000 give the same bits: the local
    run's reader and Beam's source batch differently (docs/vertex.md)."""
    fares = np.random.default_rng(0).lognormal(2.5, 0.8, 1000).astype(np.float32)
    rows = [_row(float(fare), label=int(fare > 12.0)) for fare in fares]
    metadata = dataset_metadata.DatasetMetadata(schema_utils.schema_from_feature_spec(features.raw_feature_spec()))
    scored = []
    for batch_size in (7, 1000):
        with tft_beam.Context(temp_dir=str(tmp_path / str(batch_size)), desired_batch_size=batch_size,
                              force_tf_compat_v1=True):
            (outputs, _), _ = (rows, metadata) | tft_beam.AnalyzeAndTransformDataset(preprocessing.preprocessing_fn)
        scored.append(np.array([row["fare_xf"] for row in outputs], dtype=np.float32))
    assert scored[0].dtype == np.float32
    np.testing.assert_array_equal(scored[0], scored[1])
    assert abs(float(scored[0].mean())) < 1e-3 and abs(float(scored[0].std()) - 1.0) < 1e-3
