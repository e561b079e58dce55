"""The Evaluator's output read back: metrics by slice (the candidate's and the
baseline's) and the thresholds it applied. The run page, the quality page and the model
card all read it through here."""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Tuple

OVERALL = "Overall"
# The metrics a run reports over all examples (`overall`), in its summary and `history`.
HEADLINE = ("auc", "binary_accuracy", "example_count", "calibration")


@dataclasses.dataclass
class SliceMetrics:
    """The eval metrics of one slice, the candidate's and the baseline's."""

    slice: str
    candidate: Dict[str, float]
    baseline: Dict[str, float]


@dataclasses.dataclass(frozen=True)
class Threshold:
    metric: str  # the metric's class name, e.g. AUC
    change: bool  # False: a floor on the value; True: a floor on the change from the baseline
    value: float


def slice_name(slice_key) -> str:
    parts = []
    for key in slice_key.single_slice_keys:
        kind = key.WhichOneof("kind")
        value = getattr(key, kind) if kind else ""
        parts.append(f"{key.column}={value.decode() if isinstance(value, bytes) else value}")
    return ", ".join(parts) or OVERALL


def slice_order(name: str) -> Tuple[str, float, str]:
    """`trip_start_hour=2` before `trip_start_hour=10`."""
    column, _, value = name.partition("=")
    try:
        return column, float(value), ""
    except ValueError:
        return column, float("inf"), value


def slices(evaluation_uri: str) -> List[SliceMetrics]:
    """The metrics by slice, the overall first, then in `slice_order`; the baseline's
    are empty without a baseline."""
    import tensorflow_model_analysis as tfma

    by_slice: Dict[str, SliceMetrics] = {}
    for metrics in tfma.load_metrics(evaluation_uri):
        name = slice_name(metrics.slice_key)
        entry = by_slice.setdefault(name, SliceMetrics(name, {}, {}))
        for item in metrics.metric_keys_and_values:
            if item.key.is_diff or not item.value.HasField("double_value"):
                continue
            baseline = item.key.model_name == "baseline"
            (entry.baseline if baseline else entry.candidate)[item.key.name] = item.value.double_value.value
    overall = by_slice.pop(OVERALL, None)
    return ([overall] if overall else []) + [by_slice[name] for name in sorted(by_slice, key=slice_order)]


def overall(evaluation_uri: str) -> Dict[str, float]:
    """The headline metrics (`HEADLINE`) over all examples, the candidate's."""
    import tensorflow_model_analysis as tfma

    result = tfma.load_eval_result(evaluation_uri)
    metrics = result.get_metrics_for_slice(slice_name=()) or {}
    return {name: float(metrics[name]["doubleValue"]) for name in HEADLINE if "doubleValue" in metrics.get(name, {})}


def thresholds(evaluation_uri: str) -> List[Threshold]:
    """The value and change floors of the evaluation's config."""
    from tensorflow_model_analysis.writers import eval_config_writer

    found = []
    eval_config = eval_config_writer.load_eval_run(evaluation_uri)[0]
    for spec in eval_config.metrics_specs if eval_config else []:
        for metric in spec.metrics:
            for per_slice in metric.per_slice_thresholds:
                threshold = per_slice.threshold
                if threshold.HasField("value_threshold") and threshold.value_threshold.HasField("lower_bound"):
                    found.append(Threshold(metric.class_name, False, threshold.value_threshold.lower_bound.value))
                if threshold.HasField("change_threshold") and threshold.change_threshold.HasField("absolute"):
                    found.append(Threshold(metric.class_name, True, threshold.change_threshold.absolute.value))
    return found
