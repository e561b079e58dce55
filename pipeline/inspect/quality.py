"""The served model's quality over time, read from MLMD: `taxi-pipeline history --page`.

Each run that evaluated a candidate scored the model then serving (the Evaluator's
baseline) on the same new data, which that model never saw: its AUC there, overall and
per slice, is the served model's realized quality on the newest span before it was
replaced, and the candidate's is beside it. The figures come from each run's evaluation
artifact, found through MLMD; for a run whose files `gc` removed, from the summary `gc`
kept on the run's context (`run_report.EVAL_SUMMARY_PROPERTY`) before it deleted them. So the page
covers every run the store recorded, on SQLite or MySQL.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import os
from typing import Dict, List, Optional, Tuple

from ml_metadata import metadata_store
from tfx.types import standard_component_specs

from components.custom.recorded import NodeId
from components.support import evaluation as evaluation_output
from pipeline import config
from pipeline.inspect import report_page, run_report
from pipeline.outcome import Outcome

PAGE_FILE = "history.html"
TEMPLATE = "quality.html.j2"
METRIC = "auc"
# Slices shown in their own plot: those with this many eval examples in the newest run.
MIN_SLICE_EXAMPLES = report_page.MIN_PLOTTED_SLICE
MAX_SLICE_PLOTS = 12
SERVED_COLOR, CANDIDATE_COLOR = "#f0883e", "#1f6feb"

# slice -> (AUC, eval examples)
Figures = Dict[str, Tuple[float, float]]


def summary(evaluation_uri: str) -> dict:
    """An evaluation's AUC and example count by slice, the candidate's and the baseline's:
    what `gc` keeps in MLMD."""
    found: dict = {"candidate": {}, "baseline": {}}
    for entry in evaluation_output.slices(evaluation_uri):
        for side, metrics in (("candidate", entry.candidate), ("baseline", entry.baseline)):
            if METRIC in metrics:
                found[side][entry.slice] = [metrics[METRIC], metrics.get("example_count", 0.0)]
    return found


@dataclasses.dataclass
class QualityPoint:
    run_id: str
    finished: int  # milliseconds since the epoch
    span: Optional[int]  # the newest span the run read: the new data both models were scored on
    outcome: str
    candidate: Figures
    served: Figures  # the baseline: the model serving when the run started
    removed: bool  # the run's files were removed by gc; the figures are its kept summary

    def auc(self, side: str, slice_name: str = evaluation_output.OVERALL) -> Optional[float]:
        found = getattr(self, side).get(slice_name)
        return found[0] if found else None


def points(store: metadata_store.MetadataStore, pipeline_name: str) -> List[QualityPoint]:
    """Every run that evaluated a candidate, oldest first."""
    from pipeline.inspect import lineage

    found = []
    for context in sorted(store.get_contexts_by_type(run_report.PIPELINE_RUN_CONTEXT), key=lambda c: c.name):
        records = run_report.run_records(store, pipeline_name, context.name)
        evaluation = records.output(NodeId.EVALUATOR, standard_component_specs.EVALUATION_KEY)
        kept = context.custom_properties.get(run_report.EVAL_SUMMARY_PROPERTY)
        if run_report.live(evaluation):
            figures = summary(evaluation.uri)
        elif kept is not None:
            figures = json.loads(kept.string_value)
        else:
            continue
        report = run_report.report_of(records, context.name)
        found.append(QualityPoint(
            run_id=context.name, finished=records.last_update, span=report.spans[-1] if report.spans else None,
            outcome=lineage.status(report),
            candidate={k: tuple(v) for k, v in figures["candidate"].items()},
            served={k: tuple(v) for k, v in figures["baseline"].items()},
            removed=run_report.REMOVED_PROPERTY in context.custom_properties,
        ))
    return found


def _label(point: QualityPoint) -> str:
    return f"span {point.span}" if point.span is not None else point.run_id[:13]


def _plot(found: List[QualityPoint], slice_name: str, floor: float, title: str, size=(6.5, 2.8)) -> Optional[str]:
    from matplotlib.figure import Figure

    figure = Figure(figsize=size)
    axes = figure.subplots()
    xs = list(range(len(found)))
    drawn = False
    for side, color, label in (("served", SERVED_COLOR, "served model, on the new span"),
                               ("candidate", CANDIDATE_COLOR, "candidate, on the same span")):
        pairs = [(x, p.auc(side, slice_name)) for x, p in zip(xs, found) if p.auc(side, slice_name) is not None]
        if pairs:
            drawn = True
            axes.plot([x for x, _ in pairs], [y for _, y in pairs], marker="o", color=color, label=label)
    if not drawn:
        return None
    pushed = [x for x, p in zip(xs, found) if p.outcome == Outcome.PUSHED.value]
    for x in pushed:
        axes.axvline(x, color="#2da44e", alpha=0.25, linewidth=3)
    axes.axhline(floor, color="#cf222e", linestyle="--", linewidth=1, label=f"blessing threshold ({floor:g})")
    axes.set_xticks(xs)
    axes.set_xticklabels([_label(p) for p in found], rotation=45, ha="right", fontsize=7)
    axes.set_ylabel("AUC")
    axes.set_title(title, fontsize=9)
    axes.legend(fontsize=7, loc="lower left")
    return _png(figure)


def _png(figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def render(found: List[QualityPoint], evaluation: config.EvaluationConfig) -> str:
    newest = next((p for p in reversed(found) if p.candidate), None)
    slices = sorted(
        (name for name, (_, count) in (newest.candidate.items() if newest else [])
         if name != evaluation_output.OVERALL and count >= MIN_SLICE_EXAMPLES),
        key=lambda name: -newest.candidate[name][1],
    )[:MAX_SLICE_PLOTS]
    slice_plots = [(name, _plot(found, name, evaluation.min_auc, name, size=(3.4, 2.4))) for name in slices]
    return report_page.environment().get_template(TEMPLATE).render(
        points=found, overall=evaluation_output.OVERALL, evaluation=evaluation,
        overall_plot=_plot(found, evaluation_output.OVERALL, evaluation.min_auc, "Overall (green bands: pushed)"),
        slice_plots=[(name, plot) for name, plot in slice_plots if plot], label=_label,
        min_examples=MIN_SLICE_EXAMPLES,
    )


def write_page(metadata: config.MetadataConfig, pipeline_name: str, output_root: str,
               evaluation: config.EvaluationConfig) -> str:
    """Writes `<output_root>/history.html` (atomically); returns its path."""
    found = points(run_report.connect(metadata), pipeline_name)
    path = os.path.join(output_root, PAGE_FILE)
    os.makedirs(output_root, exist_ok=True)
    staged = f"{path}.tmp"
    with open(staged, "w", encoding="utf-8") as handle:
        handle.write(render(found, evaluation))
    os.replace(staged, path)
    return path
