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
- all spans hash-split: each span's statistics are computed here with TFDV's
  `GenerateStatistics` on the pipeline's Beam settings (one streaming pass over the
  spans' files; up to `IN_PROCESS_ROWS` rows read into the statistics, by TFDV's
  in-memory computation in this process instead) and validated against the schema.
  Above `SPAN_SAMPLE_ROWS` rows per span they are computed from a sample: each record is
  kept or not by a hash of its bytes (deterministic: the same data gives the same
  verdict), at the rate that leaves about that many rows per span. The check against the
  schema's fractions (domain mass, presence) and the drift distances are then estimates;
  docs/scale.md gives their measured error. A rule that one bad row breaks (a required feature missing) is still
  checked on every row, by ExampleValidator over the whole splits.

Drift thresholds are the curated schema's `drift_comparator`s (L-infinity for categorical
features, Jensen-Shannon divergence for numeric ones), between the newest two spans the
run ingested (SpanWindow's `spans_used`). The label is gated the same way: its share of
1s (the L-infinity distance of a binary label) may move at most
`features.LABEL_DRIFT_THRESHOLD` from one span to the next, or four standard errors of
the difference where spans are small enough for sampling noise to reach that, so a label
an upstream bug zeroed, inverted or recomputed is never trained on.

The verdict is one integer property, `blessed`, for `tfx.dsl.Cond`, with what was found
in each span (`span_checks`, JSON: span number -> lines) and the drift lines (`report`).
"""

# No `from __future__ import annotations`: TFX reads this component's type hints.
import json
import logging
import os
import shutil
from typing import Dict, List, Optional, Tuple

import apache_beam as beam
import tensorflow as tf
import tensorflow_data_validation as tfdv
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions
from tensorflow_metadata.proto.v0 import anomalies_pb2, schema_pb2, statistics_pb2
from tfx.dsl.component.experimental.annotations import BeamComponentParameter, InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.types import standard_artifacts

from components.custom import beam_fns, window
from components.model import features
from components.support import spans

BLESSED_PROPERTY = "blessed"
# The output artifact (the parameter name of `DataGate` below).
VERDICT_KEY = "verdict"
REPORT_PROPERTY = "report"
SPAN_CHECKS_PROPERTY = "span_checks"
# The fraction of each span's records its statistics were computed from (all spans
# hash-split mode; see `sample_rate`).
SAMPLE_RATE_PROPERTY = "span_sample_rate"
SCHEMA_DIFF_FILE = "SchemaDiff.pb"
ANOMALIES_FILE = "DriftAnomalies.pb"
STATS_FILE = "FeatureStats.pb"
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


# Above about this many rows per span on average, each span's statistics come from a
# sample of about this many rows (see the module's docstring).
SPAN_SAMPLE_ROWS = 25_000
# Up to this many rows read into the statistics in all (after sampling), and when Beam runs
# in the component's process anyway (`beam_runs_here`), the spans' statistics are computed
# in that process, a span per thread (`span_statistics_in_process`): 1.3 s instead of
# 2.6 s on data/ (15k rows), 4.0 s instead of 7.5 s at 1M rows (a sample of 200,000);
# beyond, by the pipeline's Beam runner, whose workers share the reading.
IN_PROCESS_ROWS = 300_000
# TFDV's in-memory statistics count categorical values exactly up to this many distinct
# values (its Misra-Gries sketch's size, `stats_impl._DEFAULT_MG_SKETCH_SIZE`).
EXACT_DISTINCT_VALUES = 1024


def label_share(stats: statistics_pb2.DatasetFeatureStatisticsList) -> Optional[Tuple[float, float]]:
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


# A label change must also exceed this many standard errors of the difference of two
# binomial shares, so that spans of a few hundred rows do not stop on sampling noise.
LABEL_NOISE_Z = 4.0


def label_drift(current: statistics_pb2.DatasetFeatureStatisticsList,
                previous: statistics_pb2.DatasetFeatureStatisticsList, newest: int, previous_span: int,
                threshold: float = features.LABEL_DRIFT_THRESHOLD) -> List[str]:
    """A line naming the label when its share of 1s moved from the previous span to the
    newest by more than `threshold` (a binary label's L-infinity distance) and more than
    `LABEL_NOISE_Z` standard errors, else none."""
    now, before = label_share(current), label_share(previous)
    if now is None or before is None:
        return []
    (share, count), (previous_share, previous_count) = now, before
    pooled = (share * count + previous_share * previous_count) / (count + previous_count)
    noise = LABEL_NOISE_Z * (pooled * (1 - pooled) * (1 / count + 1 / previous_count)) ** 0.5
    change = abs(share - previous_share)
    if change <= max(threshold, noise):
        return []
    return [f"[label span {previous_span} -> {newest}] label {features.LABEL_KEY!r}: share of 1s "
            f"{previous_share:.3f} -> {share:.3f}, L_INFTY={change:.3f} (threshold {max(threshold, noise):.3f}): "
            "check how the label is made upstream (a broken join, a unit change) before training on it"]


def sample_rate(total_rows: int, span_count: int) -> float:
    """The fraction of records the per-span statistics read: 1 up to `SPAN_SAMPLE_ROWS`
    rows per span on average, less beyond."""
    if total_rows <= 0 or span_count <= 0:
        return 1.0
    return min(1.0, SPAN_SAMPLE_ROWS * span_count / total_rows)


def compute_span_statistics(
    pipeline: beam.Pipeline, data_root: str, numbers: List[int], output_dir: str,
    schema: Optional[schema_pb2.Schema] = None, rate: float = 1.0, in_process: bool = False,
) -> Dict[int, statistics_pb2.DatasetFeatureStatisticsList]:
    """TFDV statistics of each of the spans `numbers`, from the records `beam_fns.in_sample`
    at `rate`, also written to `output_dir` (`span-FeatureStats.pb`, one dataset per span,
    named by its number).

    In one streaming pass of `pipeline` (one statistics computation sliced by span, not
    one per span; Beam spreads the files over its workers); with `in_process`, span by
    span in this process instead (`span_statistics_in_process`), unless a categorical
    feature of a span has more distinct values than that computation counts exactly.

    Records are decoded by `schema`, so that every batch holds the same columns (without
    one, a batch holds the features its records happen to have, and batches of one span
    that disagree cannot be combined)."""
    found = spans.list_spans(data_root, only=numbers)
    if sorted(span.number for span in found) != sorted(numbers):
        raise ValueError(f"spans {numbers} were ingested but are no longer all under {data_root}")
    path = os.path.join(output_dir, f"span-{STATS_FILE}")
    result = span_statistics_in_process(found, schema, rate) if in_process else None
    if result is not None and _beyond_exact_counts(result):
        logging.info("a categorical feature of a span has more than %d distinct values: the spans' statistics "
                     "are computed by the Beam pass instead", EXACT_DISTINCT_VALUES)
        result = None
    if result is not None:
        tf.io.gfile.makedirs(output_dir)
        sliced = statistics_pb2.DatasetFeatureStatisticsList(
            datasets=[result[number].datasets[0] for number in sorted(result)]
        )
        with tf.io.gfile.GFile(path, "wb") as handle:
            handle.write(sliced.SerializeToString())
    else:
        result = _span_statistics_in_beam(pipeline, found, path, schema, rate)
    empty = sorted(set(numbers) - set(result))
    if empty:
        raise ValueError(f"spans {empty} under {data_root} hold no examples")
    return result


def beam_runs_here(options: PipelineOptions) -> bool:
    """Whether `options` run Beam in this process (the DirectRunner in memory or on
    threads). Elsewhere (a portable job service, Flink, Spark, Dataflow, the DirectRunner's
    worker processes) the user sent Beam's work out of the component's process: the
    gate's pass goes there too, whatever the data's size."""
    runner = (options.view_as(StandardOptions).runner or "DirectRunner").rsplit(".", 1)[-1]
    mode = options.view_as(DirectOptions).direct_running_mode
    return runner in ("DirectRunner", "FnApiRunner", "SwitchingDirectRunner") and mode != "multi_processing"


def computed_in_process(total_rows: int, rate: float, options: PipelineOptions) -> bool:
    """Whether the spans' statistics are computed in the component's process: when Beam
    runs there anyway, and the rows read into them (`total_rows` at the sample `rate`)
    are at most `IN_PROCESS_ROWS`."""
    return round(total_rows * rate) <= IN_PROCESS_ROWS and beam_runs_here(options)


def _beyond_exact_counts(result: Dict[int, statistics_pb2.DatasetFeatureStatisticsList]) -> bool:
    return any(
        feature.string_stats.unique > EXACT_DISTINCT_VALUES
        for statistics in result.values()
        for feature in statistics.datasets[0].features
    )


def span_statistics_in_process(
    found: List[spans.Span], schema: Optional[schema_pb2.Schema], rate: float,
) -> Dict[int, statistics_pb2.DatasetFeatureStatisticsList]:
    """Each span's statistics computed in this process, one span's decoded records in
    memory per thread at a time (a thread per core), by TFDV's in-memory computation. For
    small or sampled data: it spares the fixed cost of a Beam pipeline, about half of the
    gate's time on data/, and its reading and decoding leave the GIL.

    It counts categorical values with sketches (Misra-Gries, KMV) where the Beam pass
    counts exactly: the same figures while a feature has at most `EXACT_DISTINCT_VALUES`
    distinct values in a span (`compute_span_statistics` checks, and falls back to the
    Beam pass beyond); every other statistic is the Beam pass's to the last bits of a float."""
    from concurrent.futures import ThreadPoolExecutor

    from tensorflow_data_validation.statistics import stats_impl
    from tfx_bsl.coders import example_coder

    serialized_schema = schema.SerializeToString() if schema is not None else None

    def statistics_of(span: spans.Span) -> Optional[statistics_pb2.DatasetFeatureStatisticsList]:
        records = [record for file, _ in span.files for batch in beam_fns.sampled_batches(file, rate)
                   for record in batch]
        if not records:
            return None
        decoded = example_coder.ExamplesToRecordBatchDecoder(serialized_schema).DecodeBatch(records)
        del records
        statistics = stats_impl.generate_statistics_in_memory(decoded, tfdv.StatsOptions())
        statistics.datasets[0].name = str(span.number)
        return statistics

    with ThreadPoolExecutor(max_workers=max(1, min(len(found), os.cpu_count() or 1))) as pool:
        computed = list(pool.map(statistics_of, found))
    return {span.number: statistics for span, statistics in zip(found, computed) if statistics is not None}


def _span_statistics_in_beam(
    pipeline: beam.Pipeline, found: List[spans.Span], path: str, schema: Optional[schema_pb2.Schema], rate: float,
) -> Dict[int, statistics_pb2.DatasetFeatureStatisticsList]:
    options = tfdv.StatsOptions(experimental_slice_functions=[beam_fns.by_span])
    files = [(span.number, file) for span in found for file, _ in span.files]
    with pipeline as p:
        _ = (
            p
            | "Files" >> beam.Create(files)
            | "Spread" >> beam.Reshuffle()
            | "ReadSpanFiles" >> beam.ParDo(beam_fns.ReadSpanFile(schema, rate))
            | "Statistics" >> tfdv.GenerateStatistics(options)
            | "Write" >> tfdv.WriteStatisticsToBinaryFile(path)
        )
    sliced = tfdv.load_stats_binary(path)
    return {
        int(dataset.name): statistics_pb2.DatasetFeatureStatisticsList(datasets=[dataset])
        for dataset in sliced.datasets
        if dataset.name != tfdv.constants.DEFAULT_SLICE_KEY
    }


def split_statistics(
    statistics: standard_artifacts.ExampleStatistics, split: str
) -> statistics_pb2.DatasetFeatureStatisticsList:
    """StatisticsGen's statistics of one split (its `Split-<name>/FeatureStats.pb`)."""
    return tfdv.load_stats_binary(os.path.join(statistics.uri, f"Split-{split}", STATS_FILE))


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
        # int(): TFX compiles a parameter taken from another task's output as a STRING
        # input, so on Vertex this is "0" or "1".
        if not int(fresh):
            # SpanWindow found the serving model trained on exactly this window: nothing
            # to train on (in a compiled pipeline, where no run state stops the job before).
            verdict.set_int_custom_property(BLESSED_PROPERTY, 0)
            verdict.set_string_custom_property(
                REPORT_PROPERTY, f"nothing new: the serving model was trained on spans {spans_used}")
            verdict.set_string_custom_property(SPAN_CHECKS_PROPERTY, "{}")
            return
        split_blessings = anomalies.get_json_value_custom_property(BLESSED_PROPERTY) or {}
        schema_ok = bool(split_blessings) and all(int(value) == 1 for value in split_blessings.values())
        loaded_schema = tfdv.load_schema_text(os.path.join(schema.uri, "schema.pbtxt"))
        spans_read = window.parse_spans(spans_used)
        splits = set(json.loads(statistics.split_names))
        if PREVIOUS_SPAN_SPLIT in splits:
            # Window mode (two spans at least): one split per span, named by age as
            # SpanWindow named them, the newest `eval`.
            split_names = spans.window_train_splits(len(spans_read)) + [spans.WINDOW_EVAL_SPLIT]
            by_span = dict(zip(spans_read, split_names))
            checks = {span: anomaly_lines(split_anomalies(anomalies.uri, split)) for span, split in by_span.items()}
            span_stats = {span: split_statistics(statistics, by_span[span]) for span in spans_read[-2:]}
        else:
            total_rows = sum(
                dataset.num_examples for split in splits for dataset in split_statistics(statistics, split).datasets
            )
            rate = sample_rate(total_rows, len(spans_read))
            verdict.set_float_custom_property(SAMPLE_RATE_PROPERTY, rate)
            span_stats = compute_span_statistics(
                beam_pipeline, data_root, spans_read, verdict.uri, schema=loaded_schema, rate=rate,
                in_process=computed_in_process(total_rows, rate, beam_pipeline.options),
            )
            checks = {
                span: anomaly_lines(tfdv.validate_statistics(span_stats[span], loaded_schema)) for span in spans_read
            }
        lines: List[str] = []
        if len(spans_read) >= 2:
            previous, newest = spans_read[-2:]
            found = drift_anomalies(span_stats[newest], span_stats[previous], loaded_schema)
            tf.io.gfile.makedirs(verdict.uri)  # made by LocalDagRunner, not by Vertex AI (see ImportSchema)
            with tf.io.gfile.GFile(os.path.join(verdict.uri, ANOMALIES_FILE), "wb") as handle:
                handle.write(found.SerializeToString())
            lines = describe(found, newest, previous) + label_drift(
                span_stats[newest], span_stats[previous], newest, previous
            )
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
