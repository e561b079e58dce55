"""The data gate: schema anomalies, and the newest span's drift from the one before it.

The thresholds are the curated schema's `drift_comparator`s (L-infinity for categorical
features, Jensen-Shannon divergence for numeric ones). ExampleValidator checks all the
data against the schema; this component checks how much the newest span moved.

The two spans compared are the newest two of those the run ingested (SpanWindow's
`spans_used`). Their statistics come from StatisticsGen when each span is its own split
(window mode: `eval` is the newest, `train_1` the one before); with every span hash-split
into train/eval, they are computed here with TFDV's `GenerateStatistics` on the pipeline's
Beam settings, reading the two spans' files as a stream.
"""

# No `from __future__ import annotations`: TFX reads this component's type hints.
import json
import os
from typing import Dict, List

import apache_beam as beam
import tensorflow as tf
import tensorflow_data_validation as tfdv
from tensorflow_metadata.proto.v0 import anomalies_pb2, statistics_pb2
from tfx import v1 as tfx
from tfx.types import standard_artifacts
from tfx_bsl.public import tfxio

from components import spans, window

BLESSED_PROPERTY = "blessed"
# The output artifact (the parameter name of `DataGate` below).
VERDICT_KEY = "verdict"
REPORT_PROPERTY = "report"
ANOMALIES_FILE = "DriftAnomalies.pb"
_STATS_FILE = "FeatureStats.pb"
# In window mode, the split that holds the span before the newest.
PREVIOUS_SPAN_SPLIT = "train_1"


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


def compute_span_statistics(
    pipeline: beam.Pipeline, data_root: str, numbers: List[int], output_dir: str
) -> Dict[int, statistics_pb2.DatasetFeatureStatisticsList]:
    """TFDV statistics of each of the spans `numbers`, computed on `pipeline` (streamed)."""
    found = spans.list_spans(data_root, only=numbers)
    if sorted(span.number for span in found) != sorted(numbers):
        raise ValueError(f"spans {numbers} were ingested but are no longer all under {data_root}")
    paths = {}
    with pipeline as p:
        for span in found:
            paths[span.number] = os.path.join(output_dir, f"span-{span.number}-{_STATS_FILE}")
            _ = (
                p
                | f"Read[{span.number}]" >> tfxio.TFExampleRecord(file_pattern=span.pattern).BeamSource()
                | f"Statistics[{span.number}]" >> tfdv.GenerateStatistics(tfdv.StatsOptions())
                | f"Write[{span.number}]" >> tfdv.WriteStatisticsToBinaryFile(paths[span.number])
            )
    return {number: tfdv.load_stats_binary(path) for number, path in paths.items()}


def split_statistics(
    statistics: standard_artifacts.ExampleStatistics, split: str
) -> statistics_pb2.DatasetFeatureStatisticsList:
    """StatisticsGen's statistics of one split (its `Split-<name>/FeatureStats.pb`)."""
    return tfdv.load_stats_binary(os.path.join(statistics.uri, f"Split-{split}", _STATS_FILE))


@tfx.dsl.components.component(use_beam=True)
def DataGate(  # a component is named like a class
    statistics: tfx.dsl.components.InputArtifact[standard_artifacts.ExampleStatistics],
    schema: tfx.dsl.components.InputArtifact[standard_artifacts.Schema],
    anomalies: tfx.dsl.components.InputArtifact[standard_artifacts.ExampleAnomalies],
    spans_used: tfx.dsl.components.InputArtifact[standard_artifacts.String],
    verdict: tfx.dsl.components.OutputArtifact[standard_artifacts.ExampleAnomalies],
    data_root: tfx.dsl.components.Parameter[str],
    beam_pipeline: tfx.dsl.components.BeamComponentParameter[beam.Pipeline] = None,
) -> None:
    """One verdict on the data: ExampleValidator found no anomaly in any split, and the
    newest span did not drift past the schema's thresholds from the previous one.

    The verdict is one integer property, `blessed`, for `tfx.dsl.Cond`. (Conditions on
    ExampleValidator's own per-split dict compile wrongly for KFP v2 in TFX 1.16: the
    split keys become list indexes.)
    """
    split_blessings = anomalies.get_json_value_custom_property(BLESSED_PROPERTY) or {}
    schema_ok = bool(split_blessings) and all(int(value) == 1 for value in split_blessings.values())
    loaded_schema = tfdv.load_schema_text(os.path.join(schema.uri, "schema.pbtxt"))
    spans_read = window.parse_spans(spans_used.read())
    lines: List[str] = []
    if len(spans_read) >= 2:
        previous, newest = spans_read[-2:]
        splits = set(json.loads(statistics.split_names))
        if {spans.WINDOW_EVAL_SPLIT, PREVIOUS_SPAN_SPLIT} <= splits:
            current_stats = split_statistics(statistics, spans.WINDOW_EVAL_SPLIT)
            previous_stats = split_statistics(statistics, PREVIOUS_SPAN_SPLIT)
        else:
            computed = compute_span_statistics(beam_pipeline, data_root, [previous, newest], verdict.uri)
            current_stats, previous_stats = computed[newest], computed[previous]
        found = drift_anomalies(current_stats, previous_stats, loaded_schema)
        with tf.io.gfile.GFile(os.path.join(verdict.uri, ANOMALIES_FILE), "wb") as handle:
            handle.write(found.SerializeToString())
        lines = describe(found, newest, previous)
    verdict.set_int_custom_property(BLESSED_PROPERTY, 1 if schema_ok and not lines else 0)
    verdict.set_string_custom_property(REPORT_PROPERTY, "\n".join(lines))
