"""The one declaration of the model's features and label.

Transform, the Trainer, the Evaluator, the data converter and the synthetic data (its
noise on the numeric features, the label from the fare and the tips) and the tests all
read this module; nothing else names a feature, but for the feature the synthetic data's
`--drift` moves (`pipeline/data/synthetic.py`, `DRIFT_FEATURE`, one of the numeric ones).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Dict, Optional, Tuple

import tensorflow as tf


class Kind(enum.Enum):
    """How Transform turns a raw feature into a model input.

    Every kind but NUMERIC gives ids; their layout is `Feature`'s (`oov_id`,
    `missing_id`, `cardinality`), and Transform, the model's id table, the TFLite
    lookups and warm start all read it from there.
    """

    NUMERIC = "numeric"  # z-score; a missing value becomes 0 (the mean)
    BUCKETIZED = "bucketized"  # quantile buckets; a missing value gets its own bucket
    CATEGORICAL = "categorical"  # vocabulary of the `size` most frequent values, plus OOV and missing ids
    # An integer from a known range [low, low + size): its offset is its id, no
    # vocabulary to compute; values outside the range share an OOV id.
    INTEGER_RANGE = "integer_range"


# Kinds whose transformed feature is an id into the model's shared table.
ID_KINDS = frozenset({Kind.BUCKETIZED, Kind.CATEGORICAL, Kind.INTEGER_RANGE})


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

    def oov_id(self, vocabulary_size: Optional[int] = None) -> int:
        """The id of a value outside the range (INTEGER_RANGE) or the vocabulary (CATEGORICAL).

        An INTEGER_RANGE feature's is `size`. A CATEGORICAL feature's depends on its
        vocabulary, so `vocabulary_size` (its number of tokens) is required: Transform
        numbers the one OOV bucket right after the last token, and a vocabulary can hold
        fewer than `size` tokens; the ids between its OOV id and `missing_id` are then
        unused. BUCKETIZED and NUMERIC features have no OOV id: quantile buckets are open
        at both ends.
        """
        if self.kind is Kind.INTEGER_RANGE:
            if vocabulary_size is not None:
                raise ValueError(f"{self.name} is an integer range: it has no vocabulary")
            return self.size
        if self.kind is Kind.CATEGORICAL:
            if vocabulary_size is None or not 0 <= vocabulary_size <= self.size:
                raise ValueError(f"{self.name}: needs its vocabulary's size (0 to {self.size}), got {vocabulary_size}")
            return vocabulary_size
        raise ValueError(f"{self.name} ({self.kind.value}) has no OOV id")

    @property
    def missing_id(self) -> int:
        """The id of a missing value: one past the largest possible OOV id, `size + 1`
        (CATEGORICAL, INTEGER_RANGE), or the extra bucket `size` (BUCKETIZED).

        It does not depend on the vocabulary's actual size, so neither does the model's
        table."""
        if self.kind is Kind.BUCKETIZED:
            return self.size
        if self.kind in (Kind.CATEGORICAL, Kind.INTEGER_RANGE):
            return self.size + 1
        raise ValueError(f"{self.name} ({self.kind.value}) has no ids: a missing value becomes the mean")

    @property
    def cardinality(self) -> int:
        """Number of distinct ids the transformed feature can take (0 for NUMERIC): ids
        run from 0 to `missing_id`."""
        return self.missing_id + 1 if self.kind in ID_KINDS else 0


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
# A trip is a "big tip" when the tip exceeds this fraction of the fare: the source's tips
# column (not a feature: it is the label's source) against the fare feature.
BIG_TIP_FRACTION = 0.2
FARE_KEY = "fare"
TIPS_COLUMN = "tips"

# Raw features the Evaluator slices metrics by.
SLICE_FEATURES: Tuple[str, ...] = ("trip_start_hour", "payment_type")

FEATURES_BY_NAME: Dict[str, Feature] = {f.name: f for f in FEATURES}


def column_dtypes() -> Dict[str, tf.dtypes.DType]:
    """Every column the data carries with its type: the features, the passthrough columns
    and the label."""
    dtypes = {f.name: f.dtype for f in FEATURES}
    dtypes.update(PASSTHROUGH_COLUMNS)
    dtypes[LABEL_KEY] = LABEL_DTYPE
    return dtypes


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
