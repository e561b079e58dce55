"""The data gate: every span checked on its own against the schema, and the newest span's
drift from the one before it.

ExampleValidator checks each ExampleGen split against the schema. With every span
hash-split into train/eval, a split is the union of all spans, and an anomaly confined
to a new span is diluted below the schema's tolerances (5% unknown payment types in the
newest of 16 spans is 0.3% of the union, within `min_domain_mass` 0.99). So this gate
checks each span on its own too:

- window mode: each span is its own split (`eval` the newest, `train_1` the one before,
  ...), so ExampleValidator's per-split anomalies are per-span already; they are read
  back by split and named by span;
- all spans hash-split: each span's statistics are computed here from the spans' files
  (`components.custom.span_statistics`: in this process or by a Beam pass, from a
  deterministic sample beyond `SPAN_SAMPLE_ROWS` rows a span) and validated against the
  schema.

Drift thresholds are the curated schema's `drift_comparator`s (L-infinity for categorical
features, Jensen-Shannon divergence for numeric ones), between the newest two spans the
run ingested (SpanWindow's `spans_used`). The label is gated the same way: its share of
1s (the L-infinity distance of a binary label) may move at most
`gate_thresholds.LABEL_DRIFT_THRESHOLD` from one span to the next, or
`gate_thresholds.LABEL_NOISE_Z` standard errors of the difference where spans are small
enough for sampling noise to reach that, so a label an upstream bug zeroed, inverted or
recomputed is never trained on. Every threshold of the gate is set or named in
`components.model.gate_thresholds`.

The verdict is one integer property, `blessed`, for `tfx.dsl.Cond`, with what was found
in each span (`span_checks`, JSON: span number -> lines) and the drift lines (`report`).
"""

# No `from __future__ import annotations`: TFX reads this component's type hints.
import json
import os
import shutil
from typing import Dict, List, Optional, Set, Tuple

import apache_beam as beam
import tensorflow as tf
import tensorflow_data_validation as tfdv
from tensorflow_metadata.proto.v0 import anomalies_pb2, schema_pb2, statistics_pb2
from tfx.dsl.component.experimental.annotations import BeamComponentParameter, InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.types import standard_artifacts

from components.custom import recorded, span_statistics
from components.model import features, gate_thresholds
from components.support import spans

BLESSED_PROPERTY = recorded.BLESSED_PROPERTY
# The output artifact (the parameter name of `DataGate` below).
VERDICT_KEY = recorded.VERDICT_KEY
REPORT_PROPERTY = recorded.REPORT_PROPERTY
SPAN_CHECKS_PROPERTY = recorded.SPAN_CHECKS_PROPERTY
# The fraction of each span's records its statistics were computed from (all spans
# hash-split mode; see `span_statistics.sample_rate`).
SAMPLE_RATE_PROPERTY = "span_sample_rate"
SCHEMA_DIFF_FILE = "SchemaDiff.pb"
ANOMALIES_FILE = "DriftAnomalies.pb"
# In window mode, the split that holds the span before the newest.
PREVIOUS_SPAN_SPLIT = recorded.PREVIOUS_SPAN_SPLIT

Statistics = statistics_pb2.DatasetFeatureStatisticsList


def drift_anomalies(current: Statistics, previous: Statistics, schema) -> anomalies_pb2.Anomalies:
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


def anomaly_lines(anomalies: anomalies_pb2.Anomalies) -> List[str]:
    """One line per anomalous feature (and one for the dataset), naming it."""
    lines = []
    for feature, info in sorted(anomalies.anomaly_info.items()):
        kinds = ", ".join(anomalies_pb2.AnomalyInfo.Type.Name(r.type) for r in info.reason)
        lines.append(f"feature {feature!r}: {kinds}: {info.description}")
    if anomalies.HasField("dataset_anomaly_info"):
        lines.append(f"dataset: {anomalies.dataset_anomaly_info.description}")
    return lines


def split_anomalies(anomalies_uri: str, split: str) -> anomalies_pb2.Anomalies:
    """ExampleValidator's findings for one split (its `Split-<name>/SchemaDiff.pb`)."""
    with tf.io.gfile.GFile(os.path.join(anomalies_uri, f"Split-{split}", SCHEMA_DIFF_FILE), "rb") as handle:
        return anomalies_pb2.Anomalies.FromString(handle.read())


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


def label_share(stats: Statistics) -> Optional[Tuple[float, float]]:
    """(the share of examples whose label is 1, how many examples have a label) in
    `stats`, or None when they hold no label values: from the label's numeric statistics
    (StatisticsGen's, computed without a schema) or its categorical ones (computed with the
    schema, whose `bool_domain` makes it categorical)."""
    for feature in stats.datasets[0].features if stats.datasets else ():
        if tuple(feature.path.step) != (features.LABEL_KEY,):
            continue
        if feature.HasField("num_stats"):
            counted = feature.num_stats.common_stats.num_non_missing
            return (feature.num_stats.mean, counted) if counted else None
        buckets = feature.string_stats.rank_histogram.buckets
        total = sum(bucket.sample_count for bucket in buckets)
        return (sum(b.sample_count for b in buckets if b.label == "1") / total, total) if total else None
    return None


def label_drift(current: Statistics, previous: Statistics, newest: int, previous_span: int,
                threshold: float = gate_thresholds.LABEL_DRIFT_THRESHOLD) -> List[str]:
    """A line naming the label when its share of 1s moved from the previous span to the
    newest by more than `threshold` (a binary label's L-infinity distance) and more than
    `gate_thresholds.LABEL_NOISE_Z` standard errors, else none."""
    now, before = label_share(current), label_share(previous)
    if now is None or before is None:
        return []
    (share, count), (previous_share, previous_count) = now, before
    pooled = (share * count + previous_share * previous_count) / (count + previous_count)
    noise = gate_thresholds.LABEL_NOISE_Z * (pooled * (1 - pooled) * (1 / count + 1 / previous_count)) ** 0.5
    change = abs(share - previous_share)
    if change <= max(threshold, noise):
        return []
    return [f"[label span {previous_span} -> {newest}] label {features.LABEL_KEY!r}: share of 1s "
            f"{previous_share:.3f} -> {share:.3f}, L_INFTY={change:.3f} (threshold {max(threshold, noise):.3f}): "
            "check how the label is made upstream (a broken join, a unit change) before training on it"]


def _nothing_new(verdict: standard_artifacts.ExampleAnomalies, spans_used: str) -> None:
    """SpanWindow found the serving model trained on exactly this window: nothing to train
    on (in a compiled pipeline, where no run state stops the job before)."""
    verdict.set_int_custom_property(BLESSED_PROPERTY, 0)
    verdict.set_string_custom_property(
        REPORT_PROPERTY, f"nothing new: the serving model was trained on spans {spans_used}")
    verdict.set_string_custom_property(SPAN_CHECKS_PROPERTY, "{}")


def _checks_by_split(
    statistics: standard_artifacts.ExampleStatistics, anomalies: standard_artifacts.ExampleAnomalies,
    spans_read: List[int],
) -> Tuple[Dict[int, List[str]], Dict[int, Statistics]]:
    """Window mode (two spans at least): one split per span, named by age as SpanWindow
    named them, the newest `eval`. (Each span's anomaly lines, the newest two spans'
    statistics.)"""
    split_names = spans.window_train_splits(len(spans_read)) + [spans.WINDOW_EVAL_SPLIT]
    by_span = dict(zip(spans_read, split_names))
    checks = {span: anomaly_lines(split_anomalies(anomalies.uri, split)) for span, split in by_span.items()}
    span_stats = {span: span_statistics.split_statistics(statistics, by_span[span]) for span in spans_read[-2:]}
    return checks, span_stats


def _checks_by_span(
    statistics: standard_artifacts.ExampleStatistics, splits: Set[str], verdict: standard_artifacts.ExampleAnomalies,
    data_root: str, spans_read: List[int], schema: schema_pb2.Schema, beam_pipeline: beam.Pipeline,
) -> Tuple[Dict[int, List[str]], Dict[int, Statistics]]:
    """All spans hash-split: each span's statistics computed from its files (a sample of
    them beyond `span_statistics.SPAN_SAMPLE_ROWS` rows a span), validated against
    `schema`. (Each span's anomaly lines, every span's statistics.)"""
    total_rows = sum(
        dataset.num_examples for split in splits
        for dataset in span_statistics.split_statistics(statistics, split).datasets
    )
    rate = span_statistics.sample_rate(total_rows, len(spans_read))
    verdict.set_float_custom_property(SAMPLE_RATE_PROPERTY, rate)
    span_stats = span_statistics.compute_span_statistics(
        beam_pipeline, data_root, spans_read, verdict.uri, schema=schema, rate=rate,
        in_process=span_statistics.computed_in_process(total_rows, rate, beam_pipeline.options),
    )
    checks = {span: anomaly_lines(tfdv.validate_statistics(span_stats[span], schema)) for span in spans_read}
    return checks, span_stats


def _drift_lines(span_stats: Dict[int, Statistics], spans_read: List[int], schema: schema_pb2.Schema,
                 verdict_uri: str) -> List[str]:
    """The newest span's drift from the previous one, features and label, a line each;
    the features' findings also written to `ANOMALIES_FILE`."""
    if len(spans_read) < 2:
        return []
    previous, newest = spans_read[-2:]
    found = drift_anomalies(span_stats[newest], span_stats[previous], schema)
    tf.io.gfile.makedirs(verdict_uri)  # made by LocalDagRunner, not by Vertex AI (see ImportSchema)
    with tf.io.gfile.GFile(os.path.join(verdict_uri, ANOMALIES_FILE), "wb") as handle:
        handle.write(found.SerializeToString())
    return describe(found, newest, previous) + label_drift(span_stats[newest], span_stats[previous], newest, previous)


def is_fresh(value: object) -> bool:
    """SpanWindow's `fresh` as the gate receives it: an integer locally; on Vertex a STRING
    input (TFX compiles a parameter taken from another task's output so), which a backend
    renders from the integer as "1", or as "1.0", or passes as a number."""
    try:
        number = float(value)
    except (TypeError, ValueError) as err:
        raise ValueError(f"the data gate's fresh parameter must be 0 or 1, got {value!r}") from err
    if number not in (0.0, 1.0):
        raise ValueError(f"the data gate's fresh parameter must be 0 or 1, got {value!r}")
    return number == 1.0


@component(use_beam=True)
def DataGate(  # a component is named like a class
    statistics: InputArtifact[standard_artifacts.ExampleStatistics],
    schema: InputArtifact[standard_artifacts.Schema],
    anomalies: InputArtifact[standard_artifacts.ExampleAnomalies],
    verdict: OutputArtifact[standard_artifacts.ExampleAnomalies],
    data_root: Parameter[str],
    spans_used: Parameter[str],
    fresh: Parameter[int] = 1,
    code_version: Parameter[str] = "",  # read by the cache key alone: an edit to the gate re-runs it
    beam_pipeline: BeamComponentParameter[beam.Pipeline] = None,
) -> None:
    """One verdict on the data: ExampleValidator found no anomaly in any split, and the
    newest span did not drift past the schema's thresholds from the previous one.

    The verdict is one integer property, `blessed`, for `tfx.dsl.Cond`. (Conditions on
    ExampleValidator's own per-split dict compile wrongly for KFP v2 in TFX 1.16: the
    split keys become list indexes.)
    """
    try:
        if not is_fresh(fresh):
            _nothing_new(verdict, spans_used)
            return
        split_blessings = anomalies.get_json_value_custom_property(BLESSED_PROPERTY) or {}
        schema_ok = bool(split_blessings) and all(int(value) == 1 for value in split_blessings.values())
        loaded_schema = tfdv.load_schema_text(os.path.join(schema.uri, "schema.pbtxt"))
        spans_read = spans.parse_numbers(spans_used)
        splits = set(json.loads(statistics.split_names))
        if PREVIOUS_SPAN_SPLIT in splits:
            checks, span_stats = _checks_by_split(statistics, anomalies, spans_read)
        else:
            checks, span_stats = _checks_by_span(
                statistics, splits, verdict, data_root, spans_read, loaded_schema, beam_pipeline)
        lines = _drift_lines(span_stats, spans_read, loaded_schema, verdict.uri)
        spans_ok = not any(checks.values())
        verdict.set_int_custom_property(BLESSED_PROPERTY, 1 if schema_ok and spans_ok and not lines else 0)
        verdict.set_string_custom_property(REPORT_PROPERTY, "\n".join(lines))
        verdict.set_string_custom_property(
            SPAN_CHECKS_PROPERTY, json.dumps({str(span): found_lines for span, found_lines in checks.items()})
        )
    finally:
        # The pipeline TFX made for the component keeps a temporary folder until it runs;
        # the gate often does not run it (statistics in this process, window mode).
        shutil.rmtree(beam_pipeline.local_tempdir, ignore_errors=True)
