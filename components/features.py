"""The one declaration of the model's features and label.

Transform, the Trainer, the Evaluator, the data converter and the tests all read
this module; nothing else names a feature.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Dict, Tuple

import tensorflow as tf


class Kind(enum.Enum):
    """How Transform turns a raw feature into a model input."""

    NUMERIC = "numeric"  # z-score; a missing value becomes 0 (the mean)
    BUCKETIZED = "bucketized"  # quantile buckets; a missing value gets its own bucket
    CATEGORICAL = "categorical"  # vocabulary of the `size` most frequent values, plus OOV and missing ids
    # An integer from a known range [low, low + size): its offset is its id, no
    # vocabulary to compute; values outside the range share an OOV id.
    INTEGER_RANGE = "integer_range"


@dataclasses.dataclass(frozen=True)
class Feature:
    name: str
    dtype: tf.dtypes.DType
    kind: Kind
    # Buckets for BUCKETIZED, the vocabulary cap for CATEGORICAL, the range's length for
    # INTEGER_RANGE, unused for NUMERIC.
    size: int = 0
    # The smallest value of an INTEGER_RANGE feature.
    low: int = 0
    # Required features must be present in every example (schema presence 1.0);
    # the others may be missing and are imputed by Transform.
    required: bool = False

    @property
    def transformed_name(self) -> str:
        return f"{self.name}_xf"

    @property
    def vocabulary_name(self) -> str:
        """Name of the Transform vocabulary of a CATEGORICAL feature (its asset file)."""
        return f"vocab_{self.name}"

    @property
    def cardinality(self) -> int:
        """Number of distinct ids the transformed feature can take (0 for NUMERIC)."""
        if self.kind is Kind.BUCKETIZED:
            return self.size + 1  # + the missing bucket
        if self.kind in (Kind.CATEGORICAL, Kind.INTEGER_RANGE):
            return self.size + 2  # + one OOV id + the missing id
        return 0


FEATURES: Tuple[Feature, ...] = (
    Feature("fare", tf.float32, Kind.NUMERIC, required=True),
    Feature("trip_miles", tf.float32, Kind.NUMERIC, required=True),
    Feature("trip_seconds", tf.float32, Kind.NUMERIC),
    Feature("pickup_latitude", tf.float32, Kind.BUCKETIZED, size=10),
    Feature("pickup_longitude", tf.float32, Kind.BUCKETIZED, size=10),
    Feature("dropoff_latitude", tf.float32, Kind.BUCKETIZED, size=10),
    Feature("dropoff_longitude", tf.float32, Kind.BUCKETIZED, size=10),
    Feature("trip_start_hour", tf.int64, Kind.INTEGER_RANGE, size=24, low=0, required=True),
    Feature("trip_start_day", tf.int64, Kind.INTEGER_RANGE, size=7, low=1, required=True),
    Feature("trip_start_month", tf.int64, Kind.INTEGER_RANGE, size=12, low=1, required=True),
    Feature("pickup_community_area", tf.int64, Kind.INTEGER_RANGE, size=77, low=1),
    Feature("dropoff_community_area", tf.int64, Kind.INTEGER_RANGE, size=77, low=1),
    Feature("dropoff_census_tract", tf.int64, Kind.CATEGORICAL, size=200),
    Feature("payment_type", tf.string, Kind.CATEGORICAL, size=10, required=True),
    Feature("company", tf.string, Kind.CATEGORICAL, size=100),
)

# Columns the data carries that are not model inputs: the span key and a column that is
# missing in almost every row of the source.
PASSTHROUGH_COLUMNS: Dict[str, tf.dtypes.DType] = {
    "trip_start_timestamp": tf.int64,
    "pickup_census_tract": tf.int64,
}

LABEL_KEY = "big_tip"
LABEL_DTYPE = tf.int64
# A trip is a "big tip" when the tip exceeds this fraction of the fare.
BIG_TIP_FRACTION = 0.2

# Raw features the Evaluator slices metrics by.
SLICE_FEATURES: Tuple[str, ...] = ("trip_start_hour", "payment_type")

FEATURES_BY_NAME: Dict[str, Feature] = {f.name: f for f in FEATURES}


def transformed_label_key() -> str:
    return f"{LABEL_KEY}_xf"


def raw_feature_spec(include_label: bool = True) -> Dict[str, object]:
    """Parsing spec for raw examples, as the curated schema declares them.

    Required features are dense with one value; optional ones are VarLen (sparse).
    """
    spec: Dict[str, object] = {
        f.name: tf.io.FixedLenFeature([1], f.dtype) if f.required else tf.io.VarLenFeature(f.dtype)
        for f in FEATURES
    }
    if include_label:
        spec[LABEL_KEY] = tf.io.FixedLenFeature([1], LABEL_DTYPE)
    return spec
