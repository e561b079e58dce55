"""One self-contained HTML page per run: `<output root>/reports/<run id>.html`.

The page is a Jinja2 template (`pipeline/inspect/templates/run_report.html.j2`) filled from
`pipeline.inspect.run_details.RunDetails`; the plots are SVG charts (`svg_charts`) embedded as
data URIs, and the CSS is inline, so the file opens anywhere, offline, with nothing to
install.
"""

from __future__ import annotations

import math
import os
from typing import Dict, List, Optional

import jinja2

from pipeline import config
from pipeline.inspect import run_details as details_lib
from pipeline.inspect import svg_charts
from pipeline.outcome import Outcome, RunReport

# The id of the text of a page that stands in for a run's page being drawn.
PLACEHOLDER_ID = "being-drawn"
TEMPLATE = "run_report.html.j2"
# The most frequent values of a categorical feature shown in its plot.
TOP_VALUES = 8
CANDIDATE_COLOR, BASELINE_COLOR = "#1f6feb", "#9a9a9a"
NEWEST_COLOR, PREVIOUS_COLOR = "#1f6feb", "#f0883e"
# Slices with fewer eval examples are in the table but not in the plot: their AUC is noise.
MIN_PLOTTED_SLICE = 30
# The metrics of the per-slice table, in this order.
SLICE_METRICS = ("example_count", "auc", "binary_accuracy", "calibration")


def _timings_plot(report: RunReport) -> Optional[str]:
    nodes = [node for node in report.nodes if node.seconds >= 0]
    if not nodes:
        return None
    colors = {"ran": "#2da44e", "cached": "#9a9a9a", "failed": "#cf222e"}
    return svg_charts.horizontal_bars(
        [node.node_id for node in nodes],
        [("", [colors.get(node.state, "#9a9a9a") for node in nodes], [node.seconds for node in nodes])],
        "seconds (grey: reused from cache, red: failed)",
    )


def feature_plot(name: str, newest: Optional[details_lib.FeatureStats],
                  previous: Optional[details_lib.FeatureStats], labels: List[str]) -> str:
    """The feature's distribution in each span, as fractions of its examples: a
    histogram of a number, the most frequent values of a category (an SVG chart, see
    `svg_charts`: a page has one per feature)."""
    pairs = [(stats, label, color) for stats, label, color in
             ((previous, labels[0], PREVIOUS_COLOR), (newest, labels[1], NEWEST_COLOR)) if stats is not None]
    if pairs and pairs[0][0].numeric:
        histograms = []
        for stats, label, color in pairs:
            total = sum(count for _, _, count in stats.buckets) or 1.0
            histograms.append((label, color, [(low, high, count / total) for low, high, count in stats.buckets]))
        return svg_charts.histogram(name, histograms)
    values = [value for value, _ in (pairs[-1][0].top if pairs else [])][:TOP_VALUES]
    shares = []
    for stats, label, color in pairs:
        counts, total = dict(stats.top), stats.count or 1
        shares.append((label, color, [counts.get(value, 0) / total for value in values]))
    return svg_charts.categories(name, [value[:12] for value in values], shares)


def distance_plot(measures: List[details_lib.DriftMeasure],
                  label: str = "drift distance / its threshold (over 1: rejected)") -> Optional[str]:
    if not measures:
        return None
    ratios = [m.value / m.threshold if m.threshold else 0.0 for m in measures]
    finite = [ratio for ratio in ratios if math.isfinite(ratio)]
    return svg_charts.horizontal_bars(
        [m.feature for m in measures], [("", ["#cf222e" if m.over else "#2da44e" for m in measures], ratios)],
        label, high=max(1.05, _rounded_up(max(finite, default=0.0))), marker=1.0,
    )


def _rounded_up(value: float) -> float:
    return math.ceil(value * 10) / 10


def _training_plot(history: List[Dict[str, float]], best_epoch: int) -> Optional[str]:
    if not history:
        return None
    series = [(key, color, [epoch[key] for epoch in history], "left")
              for key, color in (("train_loss", "#1f6feb"), ("eval_loss", "#f0883e"))
              if all(key in epoch for epoch in history)]
    if all("eval_auc" in epoch for epoch in history):
        series.append(("eval_auc", "#2da44e", [epoch["eval_auc"] for epoch in history], "right"))
    return svg_charts.lines(list(range(1, len(history) + 1)), series, "epoch", "loss", "eval AUC",
                            marker=best_epoch, marker_label=f"kept: epoch {best_epoch}")


def _slices_plot(slices: List[details_lib.SliceMetrics], has_baseline: bool) -> Optional[str]:
    shown = [s for s in slices if "auc" in s.candidate and s.candidate.get("example_count", 0) >= MIN_PLOTTED_SLICE]
    if not shown:
        return None
    series = [("candidate", [CANDIDATE_COLOR] * len(shown), [s.candidate["auc"] for s in shown])]
    if has_baseline:
        series.append(("baseline (serving)", [BASELINE_COLOR] * len(shown),
                       [s.baseline.get("auc", 0.0) for s in shown]))
    return svg_charts.horizontal_bars([s.slice for s in shown], series,
                                      f"AUC (slices of {MIN_PLOTTED_SLICE} examples or more)", low=0.5, high=1.0)


def _shadow_plot(measures: dict) -> str:
    """Both models' scores of the shadow check's requests, bin by bin side by side; "" when
    it measured nothing."""
    if not measures.get("requests"):
        return ""
    candidate, serving = measures["candidate_histogram"], measures["serving_histogram"]
    width = 1.0 / len(candidate)
    names = [f"{index * width:.2f}" for index in range(len(candidate))]
    total = float(measures["requests"])
    return svg_charts.categories(
        f"Scores of the {measures['requests']} newest logged requests (share per bin, from its lower bound)", names,
        [("candidate", CANDIDATE_COLOR, [count / total for count in candidate]),
         (f"serving (version {measures.get('serving', '?')})", BASELINE_COLOR, [count / total for count in serving])])


def decision(details: details_lib.RunDetails) -> str:
    """The run's decision in one sentence, with its exit status."""
    report = details.report
    code = int(report.exit_code)
    if report.outcome is Outcome.PUSHED:
        version = details.pushed_version or report.pushed_version or ""
        replaced = f", replacing version {details.replaced_version}" if details.replaced_version else ""
        held = (f"; serving stays pinned to version {details.serving_version}"
                if details.serving_version and details.serving_version != details.pushed_version else "")
        return f"Pushed model version {version}{replaced}{held} (exit {code})."
    if report.outcome is Outcome.UP_TO_DATE:
        return f"Up to date: the model already serving, {report.pushed_version_dir}, stays (exit {code})."
    if report.outcome is Outcome.DATA_REJECTED:
        return f"Data rejected: nothing was trained or pushed (exit {code})."
    if report.outcome is Outcome.AWAITING_APPROVAL:
        version = report.pushed_version or "VERSION"
        held = f" Held for approval: {report.held}." if report.held else ""
        return (f"Model passed every check and awaits approval as {report.pushed_version_dir}; "
                f"{report.kept_serving} until `taxi-pipeline serving approve {version}` (exit {code}).{held}")
    if report.outcome is Outcome.SHADOW_REFUSED:
        return f"Model passed the serving check but the shadow check refused it: {report.shadow_check} (exit {code})."
    if report.outcome is Outcome.REJECTED:
        return f"A person rejected the model of these inputs: nothing was trained (exit {code})."
    if report.outcome is Outcome.SERVING_CHECK_FAILED:
        return (f"Model blessed but it failed the serving check, so it was not pushed: {report.serving_check} "
                f"(exit {code}).")
    return f"Model trained but not blessed: {report.kept_serving} (exit {code})."


def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("pipeline.inspect", "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render(details: details_lib.RunDetails) -> str:
    """The page's HTML."""
    report = details.report
    labels = [f"span {details.previous_span}", f"span {details.newest_span}"]
    names = sorted(set().union(*(stats.keys() for stats in details.stats.values()))) if details.stats else []
    newest = details.stats.get(details.newest_span, {})
    previous = details.stats.get(details.previous_span, {})
    feature_rows = [
        {"name": name, "newest": newest.get(name), "previous": previous.get(name),
         "plot": feature_plot(name, newest.get(name), previous.get(name), labels)}
        for name in names
    ]
    return environment().get_template(TEMPLATE).render(
        report=report,
        details=details,
        decision=decision(details),
        outcome_class={Outcome.PUSHED: "ok", Outcome.UP_TO_DATE: "ok", Outcome.NOT_BLESSED: "warn",
                       Outcome.SERVING_CHECK_FAILED: "bad", Outcome.DATA_REJECTED: "bad",
                       Outcome.AWAITING_APPROVAL: "warn", Outcome.REJECTED: "warn",
                       Outcome.SHADOW_REFUSED: "bad"}[report.outcome],
        shadow_plot=_shadow_plot(report.shadow_measures),
        timings_plot=_timings_plot(report),
        total_seconds=sum(node.seconds for node in report.nodes),
        feature_rows=feature_rows,
        span_labels=labels,
        drift_plot=distance_plot(details.drift),
        training_plot=_training_plot(details.history, details.best_epoch),
        slices_plot=_slices_plot(details.slices, details.has_baseline),
        slice_metrics=SLICE_METRICS,
    )


def write(output_root: str, details: details_lib.RunDetails) -> str:
    """Writes the run's page (atomically) and returns its path."""
    return _replace(config.report_path(output_root, details.report.run_id), render(details))


def write_placeholder(output_root: str, run_id: str) -> str:
    """A page that stands in for the run's page while it is being drawn (see
    `pipeline.run.process.after_exit`): it reloads itself every second until the run's
    page replaces it, and says how to write it should it never come. Returns its path."""
    text = ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"1\">"
            f"<title>Run {run_id}</title></head>\n<body><p id=\"{PLACEHOLDER_ID}\">The page of run {run_id} is "
            "being drawn; this page reloads by itself. If it still shows this after a minute, write it with "
            f"<code>taxi-pipeline report {run_id} --output-root {output_root}</code>.</p></body></html>\n")
    return _replace(config.report_path(output_root, run_id), text)


def _replace(path: str, text: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    staged = f"{path}.tmp-{os.getpid()}"
    with open(staged, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(staged, path)
    return path
