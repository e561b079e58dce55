"""The data gate: schema anomalies, and the newest span's drift from the one before it.

The thresholds are the curated schema's `drift_comparator`s (L-infinity for categorical
features, Jensen-Shannon divergence for numeric ones). ExampleValidator checks all the
data against the schema; this component checks how much the newest span moved.
Statistics are computed in memory (spans are small; no Beam pipeline to start).
"""

# No `from __future__ import annotations`: TFX reads this component's type hints.
import os
from typing import List, Tuple

import pyarrow as pa
import tensorflow as tf
import tensorflow_data_validation as tfdv
from tensorflow_data_validation.statistics import stats_impl
from tensorflow_metadata.proto.v0 import anomalies_pb2, statistics_pb2
from tfx import v1 as tfx
from tfx.types import standard_artifacts
from tfx_bsl.coders import example_coder

from components import spans

BLESSED_PROPERTY = "blessed"
# The output artifact (the parameter name of `DataGate` below).
VERDICT_KEY = "verdict"
REPORT_PROPERTY = "report"
ANOMALIES_FILE = "DriftAnomalies.pb"
_BATCH = 10_000


def newest_spans(data_root: str, count: int = 2) -> List[Tuple[int, str]]:
    """The `count` newest `(span number, folder)` under `data_root`, oldest first."""
    found = spans.numbered(tf.io.gfile.listdir(data_root))[-count:]
    return [(span, os.path.join(data_root, name)) for span, name in found]


def span_statistics(folder: str) -> statistics_pb2.DatasetFeatureStatisticsList:
    """TFDV statistics of every GZIP TFRecord file in a span folder."""
    files = sorted(tf.io.gfile.glob(os.path.join(folder, "*")))
    decoder = example_coder.ExamplesToRecordBatchDecoder()
    batches = []
    records = tf.data.TFRecordDataset(files, compression_type="GZIP").batch(_BATCH)
    for batch in records.as_numpy_iterator():
        batches.append(decoder.DecodeBatch(list(batch)))
    if not batches:
        raise ValueError(f"span folder {folder} holds no examples")
    table = pa.Table.from_batches(batches).combine_chunks()
    (record_batch,) = table.to_batches(max_chunksize=table.num_rows)
    return stats_impl.generate_statistics_in_memory(record_batch, tfdv.StatsOptions())


def drift_anomalies(
    current: statistics_pb2.DatasetFeatureStatisticsList,
    previous: statistics_pb2.DatasetFeatureStatisticsList,
    schema,
) -> anomalies_pb2.Anomalies:
    """Only the drift findings: what the comparators in `schema` flag between the two."""
    found = tfdv.validate_statistics(current, schema, previous_statistics=previous)
    drift = anomalies_pb2.Anomalies()
    drift.CopyFrom(found)
    drift.ClearField("anomaly_info")
    drift.ClearField("dataset_anomaly_info")
    for feature, info in found.anomaly_info.items():
        reasons = [r for r in info.reason if anomalies_pb2.AnomalyInfo.Type.Name(r.type).startswith("COMPARATOR_")]
        if reasons:
            kept = drift.anomaly_info[feature]
            kept.CopyFrom(info)
            del kept.reason[:]
            kept.reason.extend(reasons)
            kept.description = " ".join(r.description for r in reasons)
    return drift


def describe(drift: anomalies_pb2.Anomalies, newest: int, previous: int) -> List[str]:
    measured = {d.path.step[0]: d for d in drift.drift_skew_info if d.path.step}
    lines = []
    for feature, info in sorted(drift.anomaly_info.items()):
        values = ", ".join(
            f"{anomalies_pb2.DriftSkewInfo.Measurement.Type.Name(m.type)}={m.value:.3f} "
            f"(threshold {m.threshold:.3f})"
            for m in measured[feature].drift_measurements
        ) if feature in measured else info.description
        lines.append(f"[drift span {previous} -> {newest}] feature {feature!r}: {values}")
    return lines


@tfx.dsl.components.component
def DataGate(  # pylint: disable=invalid-name
    examples: tfx.dsl.components.InputArtifact[standard_artifacts.Examples],
    schema: tfx.dsl.components.InputArtifact[standard_artifacts.Schema],
    anomalies: tfx.dsl.components.InputArtifact[standard_artifacts.ExampleAnomalies],
    verdict: tfx.dsl.components.OutputArtifact[standard_artifacts.ExampleAnomalies],
    data_root: tfx.dsl.components.Parameter[str],
) -> None:
    """One verdict on the data: ExampleValidator found no anomaly in any split, and the
    newest span did not drift past the schema's thresholds from the previous one.

    The verdict is one integer property, `blessed`, for `tfx.dsl.Cond`. (Conditions on
    ExampleValidator's own per-split dict compile wrongly for KFP v2 in TFX 1.16: the
    split keys become list indexes.) `examples` is not read: it ties this component to
    ExampleGen's run, so that new data re-runs it instead of reusing a cached verdict.
    """
    del examples
    split_blessings = anomalies.get_json_value_custom_property(BLESSED_PROPERTY) or {}
    schema_ok = bool(split_blessings) and all(int(value) == 1 for value in split_blessings.values())
    loaded_schema = tfdv.load_schema_text(os.path.join(schema.uri, "schema.pbtxt"))
    pair = newest_spans(data_root)
    lines: List[str] = []
    if len(pair) == 2:
        (previous, previous_dir), (newest, newest_dir) = pair
        found = drift_anomalies(span_statistics(newest_dir), span_statistics(previous_dir), loaded_schema)
        with tf.io.gfile.GFile(os.path.join(verdict.uri, ANOMALIES_FILE), "wb") as handle:
            handle.write(found.SerializeToString())
        lines = describe(found, newest, previous)
    verdict.set_int_custom_property(BLESSED_PROPERTY, 1 if schema_ok and not lines else 0)
    verdict.set_string_custom_property(REPORT_PROPERTY, "\n".join(lines))
