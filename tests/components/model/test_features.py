"""The curated schema and the feature spec must describe the same contract."""

import pytest
import tensorflow as tf
from tensorflow_metadata.proto.v0 import schema_pb2

from components.model import features
from tests.helpers import curated_schema

SCHEMA_TYPES = {tf.float32: schema_pb2.FLOAT, tf.int64: schema_pb2.INT, tf.string: schema_pb2.BYTES}


def test_every_feature_is_in_the_schema_with_its_type_and_presence():
    by_name = {f.name: f for f in curated_schema().feature}
    for feature in features.FEATURES:
        declared = by_name[feature.name]
        assert declared.type == SCHEMA_TYPES[feature.dtype], feature.name
        required = declared.presence.min_fraction == 1.0
        assert required == feature.required, feature.name


def test_label_is_required_and_absent_when_serving():
    label = {f.name: f for f in curated_schema().feature}[features.LABEL_KEY]
    assert label.presence.min_fraction == 1.0
    assert "SERVING" in label.not_in_environment


def test_schema_declares_no_feature_the_data_does_not_carry():
    known = {f.name for f in features.FEATURES} | set(features.PASSTHROUGH_COLUMNS) | {features.LABEL_KEY}
    assert {f.name for f in curated_schema().feature} == known


def test_raw_feature_spec_is_dense_for_required_and_sparse_for_optional():
    spec = features.raw_feature_spec()
    assert isinstance(spec["fare"], tf.io.FixedLenFeature)
    assert isinstance(spec["company"], tf.io.VarLenFeature)
    assert features.LABEL_KEY not in features.raw_feature_spec(include_label=False)


def test_cardinality_counts_oov_and_missing_ids():
    assert features.FEATURES_BY_NAME["payment_type"].cardinality == 12
    assert features.FEATURES_BY_NAME["pickup_latitude"].cardinality == 11
    assert features.FEATURES_BY_NAME["fare"].cardinality == 0


def test_integer_range_ids_are_offsets_then_oov_then_missing():
    hour = features.FEATURES_BY_NAME["trip_start_hour"]
    assert (hour.oov_id(), hour.missing_id, hour.cardinality) == (24, 25, 26)
    with pytest.raises(ValueError, match="no vocabulary"):
        hour.oov_id(24)


def test_categorical_oov_id_follows_the_vocabulary_and_missing_id_does_not():
    company = features.FEATURES_BY_NAME["company"]
    assert company.oov_id(company.size) == company.size
    assert company.oov_id(3) == 3
    assert company.missing_id == company.size + 1 == company.cardinality - 1
    for wrong in (None, company.size + 1, -1):
        with pytest.raises(ValueError, match="vocabulary's size"):
            company.oov_id(wrong)


def test_bucketized_missing_value_takes_the_extra_bucket_and_numeric_has_no_ids():
    latitude = features.FEATURES_BY_NAME["pickup_latitude"]
    assert latitude.missing_id == latitude.size == latitude.cardinality - 1
    with pytest.raises(ValueError, match="no OOV id"):
        latitude.oov_id()
    fare = features.FEATURES_BY_NAME["fare"]
    with pytest.raises(ValueError, match="no ids"):
        _ = fare.missing_id
    with pytest.raises(ValueError, match="no OOV id"):
        fare.oov_id()


def test_integer_range_features_match_the_schema_int_domain():
    by_name = {f.name: f for f in curated_schema().feature}
    ranged = [f for f in features.FEATURES if f.kind is features.Kind.INTEGER_RANGE]
    assert ranged
    for feature in ranged:
        domain = by_name[feature.name].int_domain
        assert (domain.min, domain.max) == (feature.low, feature.low + feature.size - 1), feature.name
