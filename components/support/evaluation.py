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


def failures(evaluation_uri: str) -> List[str]:
    """Each threshold the candidate missed, by slice ("auc 0.9533 on Overall, where it must
    be at least 0.99"), from TFMA's validation: why the Evaluator did not bless it."""
    import tensorflow_model_analysis as tfma

    validation = tfma.load_validation_result(evaluation_uri)
    return [_missed(failure, slice_name(per_slice.slice_key))
            for per_slice in validation.metric_validations_per_slice for failure in per_slice.failures]


def _missed(failure, slice_text: str) -> str:
    import tensorflow_model_analysis as tfma

    threshold, bounds = failure.metric_threshold, []
    if threshold.HasField("value_threshold"):
        given = threshold.value_threshold
        bounds += [f"at least {given.lower_bound.value:g}"] if given.HasField("lower_bound") else []
        bounds += [f"at most {given.upper_bound.value:g}"] if given.HasField("upper_bound") else []
    if threshold.HasField("change_threshold"):
        given = threshold.change_threshold
        side = "at least" if given.direction == tfma.MetricDirection.HIGHER_IS_BETTER else "at most"
        bounds += [f"{side} {given.absolute.value:g}"] if given.HasField("absolute") else []
        bounds += [f"{side} {given.relative.value:g} of the baseline's"] if given.HasField("relative") else []
    name = failure.metric_key.name + (" change from the baseline" if failure.metric_key.is_diff else "")
    value = (f" {failure.metric_value.double_value.value:.4f}" if failure.metric_value.HasField("double_value")
             else "")
    must = f", where it must be {' and '.join(bounds)}" if bounds else ""
    return f"{name}{value} on {slice_text}{must}" + (f" ({failure.message})" if failure.message else "")


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
