"""Everything one run's page shows (`pipeline.inspect.report_page`), read back from MLMD and the
artifacts the run's executions output: nothing is taken from the console or the log.

Reads through MLMD's public API (`pipeline.inspect.run_report.run_records`) and the artifacts'
own files (TFDV statistics, the data gate's drift file, the Trainer's training summary,
TFMA's metrics and validation result); any part a run did not reach is left empty.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Dict, List, Optional, Tuple

import tensorflow as tf
import tensorflow_data_validation as tfdv
from tensorflow_metadata.proto.v0 import anomalies_pb2, statistics_pb2
from tfx.types import standard_component_specs

from components.custom import gate, ingest, recorded, serving_check, span_statistics
from components.custom.recorded import NodeId
from components.model.trainer.settings import TRAINING_SUMMARY_FILE
from components.support import evaluation as evaluation_output
from components.support.evaluation import SliceMetrics
from pipeline.config import MetadataConfig
from pipeline.inspect import run_report
from pipeline.outcome import RunReport


@dataclasses.dataclass
class FeatureStats:
    """One feature in one span."""

    name: str
    numeric: bool
    count: int
    missing: float  # fraction of examples without it
    # Numeric: mean, std, min, max, and the histogram as (low, high, count) buckets.
    mean: float = 0.0
    std: float = 0.0
    min: float = 0.0
    max: float = 0.0
    buckets: List[Tuple[float, float, float]] = dataclasses.field(default_factory=list)
    # Categorical: distinct values, and the most frequent as (value, count).
    unique: int = 0
    top: List[Tuple[str, float]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class DriftMeasure:
    feature: str
    measure: str  # L_INFTY or JENSEN_SHANNON_DIVERGENCE
    value: float
    threshold: float

    @property
    def over(self) -> bool:
        return self.value > self.threshold


@dataclasses.dataclass
class RunDetails:
    report: RunReport
    # Input split -> the data files ExampleGen read, under the data root.
    files: Dict[str, List[str]] = dataclasses.field(default_factory=dict)
    # The newest span and the one before it, with each one's feature statistics.
    newest_span: Optional[int] = None
    previous_span: Optional[int] = None
    stats: Dict[int, Dict[str, FeatureStats]] = dataclasses.field(default_factory=dict)
    # The fraction of each span's rows its statistics were computed from.
    sample_rate: float = 1.0
    drift: List[DriftMeasure] = dataclasses.field(default_factory=list)
    # The Trainer's per-epoch history (train_loss, eval_loss, eval_auc, ...).
    history: List[Dict[str, float]] = dataclasses.field(default_factory=list)
    best_epoch: int = 0
    slices: List[SliceMetrics] = dataclasses.field(default_factory=list)
    thresholds: List[str] = dataclasses.field(default_factory=list)
    validation_failures: List[str] = dataclasses.field(default_factory=list)
    has_baseline: bool = False
    # The Evaluator's blessing: True, False, or None when it did not run.
    blessed: Optional[bool] = None
    pushed_version: Optional[int] = None
    replaced_version: Optional[int] = None
    serving_version: Optional[int] = None


def _feature_stats(feature: statistics_pb2.FeatureNameStatistics, examples: int) -> FeatureStats:
    name = feature.path.step[0] if feature.path.step else feature.name
    if feature.HasField("num_stats"):
        num = feature.num_stats
        common = num.common_stats
        standard = [h for h in num.histograms if h.type == statistics_pb2.Histogram.STANDARD]
        buckets = [(b.low_value, b.high_value, b.sample_count) for b in standard[0].buckets] if standard else []
        return FeatureStats(name, True, int(common.num_non_missing), _missing(common, examples),
                            num.mean, num.std_dev, num.min, num.max, buckets=buckets)
    strings = feature.string_stats
    common = strings.common_stats
    top = [(value.value, value.frequency) for value in strings.top_values]
    return FeatureStats(name, False, int(common.num_non_missing), _missing(common, examples),
                        unique=int(strings.unique), top=top)


def _missing(common: statistics_pb2.CommonStatistics, examples: int) -> float:
    return (examples - common.num_non_missing) / examples if examples else 0.0


def features_of(statistics: statistics_pb2.DatasetFeatureStatisticsList) -> Dict[str, FeatureStats]:
    if not statistics.datasets:
        return {}
    dataset = statistics.datasets[0]
    found = (_feature_stats(feature, dataset.num_examples) for feature in dataset.features)
    return {stats.name: stats for stats in found}


def _span_statistics(records: run_report.RunRecords, spans_read: List[int]) -> Dict[int, Dict[str, FeatureStats]]:
    """The newest two spans' statistics, as the data gate compared them."""
    verdict = records.output(NodeId.DATA_GATE, gate.VERDICT_KEY)
    statistics = records.output(NodeId.STATISTICS_GEN, standard_component_specs.STATISTICS_KEY)
    newest_two = spans_read[-2:]
    if verdict is not None:
        sliced = os.path.join(verdict.uri, f"span-{span_statistics.STATS_FILE}")
        if tf.io.gfile.exists(sliced):
            by_name = {d.name: d for d in tfdv.load_stats_binary(sliced).datasets}
            return {
                span: features_of(statistics_pb2.DatasetFeatureStatisticsList(datasets=[by_name[str(span)]]))
                for span in newest_two if str(span) in by_name
            }
    if statistics is not None and len(newest_two) == 2:
        # Window mode: the newest span is the `eval` split, the one before `train_1`.
        splits = dict(zip(newest_two, (gate.PREVIOUS_SPAN_SPLIT, "eval")))
        found = {}
        for span, split in splits.items():
            path = os.path.join(statistics.uri, f"Split-{split}", span_statistics.STATS_FILE)
            if tf.io.gfile.exists(path):
                found[span] = features_of(tfdv.load_stats_binary(path))
        return found
    return {}


def _drift(records: run_report.RunRecords) -> List[DriftMeasure]:
    verdict = records.output(NodeId.DATA_GATE, gate.VERDICT_KEY)
    if verdict is None:
        return []
    path = os.path.join(verdict.uri, gate.ANOMALIES_FILE)
    if not tf.io.gfile.exists(path):
        return []
    with tf.io.gfile.GFile(path, "rb") as handle:
        found = anomalies_pb2.Anomalies.FromString(handle.read())
    return [
        DriftMeasure(info.path.step[0], anomalies_pb2.DriftSkewInfo.Measurement.Type.Name(m.type), m.value,
                     m.threshold)
        for info in found.drift_skew_info if info.path.step
        for m in info.drift_measurements
    ]


def _evaluation(details: RunDetails, evaluation_uri: str) -> None:
    details.slices = evaluation_output.slices(evaluation_uri)
    details.has_baseline = any(s.baseline for s in details.slices)
    for threshold in evaluation_output.thresholds(evaluation_uri):
        details.thresholds.append(
            f"{threshold.metric} - baseline's >= {threshold.value:g} (when there is a baseline)" if threshold.change
            else f"{threshold.metric} >= {threshold.value:g}")
    details.validation_failures = evaluation_output.failures(evaluation_uri)


def _optional_int(artifact, name: str) -> Optional[int]:
    value = run_report.string_property(artifact, name)
    return int(value) if value.isdigit() else None


def read(
    metadata: MetadataConfig, pipeline_name: str, run_id: str, report: Optional[RunReport] = None
) -> RunDetails:
    """The details of run `run_id` (`LookupError` if the store has no such run), with its
    `report` when the caller has it already (else it is read too)."""
    records = run_report.run_records(run_report.connect(metadata), pipeline_name, run_id)
    details = RunDetails(report=report or run_report.report_of(records, run_id))
    examples = records.output(NodeId.EXAMPLE_GEN, standard_component_specs.EXAMPLES_KEY)
    if examples is not None:
        details.files = json.loads(run_report.string_property(examples, ingest.SOURCE_FILES_PROPERTY) or "{}")
    spans_read = details.report.spans
    if len(spans_read) >= 2:
        details.previous_span, details.newest_span = spans_read[-2:]
    elif spans_read:
        details.newest_span = spans_read[-1]
    details.stats = _span_statistics(records, spans_read)
    verdict = records.output(NodeId.DATA_GATE, gate.VERDICT_KEY)
    if verdict is not None and gate.SAMPLE_RATE_PROPERTY in verdict.custom_properties:
        details.sample_rate = verdict.custom_properties[gate.SAMPLE_RATE_PROPERTY].double_value
    details.drift = _drift(records)
    model_run = records.output(NodeId.TRAINER, standard_component_specs.MODEL_RUN_KEY)
    summary_path = os.path.join(model_run.uri, TRAINING_SUMMARY_FILE) if model_run is not None else ""
    if summary_path and tf.io.gfile.exists(summary_path):
        with tf.io.gfile.GFile(summary_path) as handle:
            summary = json.load(handle)
        details.history = summary.get("history", [])
        details.best_epoch = summary.get("best_epoch", 0)
    evaluation = records.output(NodeId.EVALUATOR, standard_component_specs.EVALUATION_KEY)
    if run_report.live(evaluation):
        _evaluation(details, evaluation.uri)
    blessing = records.output(NodeId.EVALUATOR, standard_component_specs.BLESSING_KEY)
    if blessing is not None:
        details.blessed = run_report.int_property(blessing, serving_check.BLESSED_PROPERTY) == 1
    pushed = records.output(NodeId.PUSHER, standard_component_specs.PUSHED_MODEL_KEY)
    pusher_ran = any(node.node_id == NodeId.PUSHER and node.state == "ran" for node in records.nodes)
    if pusher_ran and pushed is not None and run_report.int_property(pushed, recorded.PUSHED_PROPERTY) == 1:
        details.pushed_version = _optional_int(pushed, recorded.VERSION_PROPERTY)
        details.replaced_version = _optional_int(pushed, recorded.REPLACED_PROPERTY)
        details.serving_version = _optional_int(pushed, recorded.SERVING_PROPERTY)
    return details
