"""The page of one `monitor` run: its findings, the skew of each feature against its
threshold, the records read, and each feature's distribution in the traffic beside the
training data's; in the run page's style (`pipeline.inspect.report_page`)."""

from __future__ import annotations

import os

from pipeline.inspect import report_page

TEMPLATE = "monitor.html.j2"
SKEW_LABEL = "skew distance / its threshold (over 1: a finding)"
PAGE_FILE = "monitor.html"


def render(result) -> str:
    """The page of `result` (a `pipeline.ops.monitor.MonitorResult`)."""
    labels = ["training data", "serving traffic"]
    names = sorted(set(result.serving_stats) | set(result.training_stats))
    rows = [
        {"name": name, "newest": result.serving_stats.get(name), "previous": result.training_stats.get(name),
         "plot": report_page.feature_plot(name, result.serving_stats.get(name), result.training_stats.get(name),
                                          labels)}
        for name in names
    ]
    verdict = (f"{len(result.findings)} finding(s): the traffic does not look like the data version "
               f"{result.version} was trained on (exit 4)." if result.findings else
               f"The traffic looks like the data version {result.version} was trained on (exit 0).")
    return report_page.environment().get_template(TEMPLATE).render(
        result=result, verdict=verdict, feature_rows=rows, span_labels=labels,
        skew_plot=report_page.distance_plot(result.skew, SKEW_LABEL),
    )


def write(output_dir: str, result) -> str:
    """Writes the page (atomically) into `output_dir`; returns its path."""
    path = os.path.join(output_dir, PAGE_FILE)
    staged = f"{path}.tmp"
    with open(staged, "w", encoding="utf-8") as handle:
        handle.write(render(result))
    os.replace(staged, path)
    return path
