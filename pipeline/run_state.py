"""What a run did (`RunReport`), and the one record of the last finished run.

Nothing here imports TensorFlow for local paths: an unchanged re-run is decided and
reported in well under a second, before any heavy import.

`<output root>/last_run.json` (the output root is always local) is written once per
finished `run` or `retrain`, by one atomic writer. It holds the run's report, the
fingerprint of its inputs and the last window run's report. Two decisions read it:

- `run`: when the fingerprint of the inputs (the data files' path, size and mtime, this
  project's source and schema, the resolved settings, the versions of the libraries that
  execute it) matches the last finished run and that run's pushed version is still in
  place, the last run is reported instead of starting another. Without this the
  latest-blessed baseline would change under an unchanged candidate on every re-run, and
  the Evaluator and Pusher would run again and push a duplicate version.
- `retrain`: when the last window run already evaluated on the newest span, there is
  nothing to do.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import os
import time
from importlib import metadata as package_metadata
from typing import Dict, List, Optional, Sequence

import components
import pipeline as pipeline_package
from components import spans
from pipeline import config as config_lib
from pipeline import preflight

LAST_RUN_FILE = "last_run.json"
# Distributions whose version changes what a run computes.
_RUNTIME_DISTRIBUTIONS = (
    "tfx", "tensorflow", "tensorflow-transform", "tensorflow-model-analysis",
    "tensorflow-data-validation", "apache-beam", "ml-metadata",
)


class Outcome(enum.Enum):
    PUSHED = "pushed"
    UP_TO_DATE = "up to date"
    NOT_BLESSED = "not blessed"
    DATA_REJECTED = "data rejected"

    @property
    def exit_code(self) -> config_lib.ExitCode:
        return {
            Outcome.PUSHED: config_lib.ExitCode.OK,
            Outcome.UP_TO_DATE: config_lib.ExitCode.OK,
            Outcome.NOT_BLESSED: config_lib.ExitCode.NOT_BLESSED,
            Outcome.DATA_REJECTED: config_lib.ExitCode.DATA_REJECTED,
        }[self]


@dataclasses.dataclass
class NodeRun:
    node_id: str
    state: str  # "ran", "cached" or "failed"
    seconds: float


@dataclasses.dataclass
class RunReport:
    outcome: Outcome
    pushed_version_dir: Optional[str] = None
    anomalies: List[str] = dataclasses.field(default_factory=list)
    eval_metrics: Dict[str, float] = dataclasses.field(default_factory=dict)
    nodes: List[NodeRun] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    reused_previous_run: bool = False
    # The spans the run ingested, oldest first (in window mode the newest is the eval split).
    spans: List[int] = dataclasses.field(default_factory=list)
    # Window mode: the number of spans in the window; None when every span was used.
    window_size: Optional[int] = None
    # The Trainer's warm-start decision and its reason, when it trained.
    warm_start: str = ""
    # Why nothing was run, when nothing was.
    note: str = ""
    # The orchestrator's run id (MLMD's pipeline_run context).
    run_id: str = ""

    def to_json(self) -> Dict[str, object]:
        record = dataclasses.asdict(self)
        record["outcome"] = self.outcome.value
        return record

    @classmethod
    def from_json(cls, record: Dict[str, object]) -> "RunReport":
        record = dict(record)
        record["outcome"] = Outcome(record["outcome"])
        record["nodes"] = [NodeRun(**node) for node in record.get("nodes", [])]
        return cls(**record)


def _file_stamp(path: str) -> str:
    if spans.is_remote(path):
        import tensorflow as tf

        stat = tf.io.gfile.stat(path)
        return f"{stat.length}\0{stat.mtime_nsec}"
    stat = os.stat(path)
    return f"{stat.st_size}\0{stat.st_mtime_ns}"


def fingerprint(run_config: config_lib.RunConfig, files: Sequence[str]) -> str:
    """Changes whenever the data, the project's code, the settings or the runtime change."""
    digest = hashlib.sha256()
    for package in (components, pipeline_package):
        digest.update(config_lib.source_digest(os.path.dirname(package.__file__)).encode())
    digest.update(json.dumps(dataclasses.asdict(run_config), sort_keys=True).encode())
    for name in _RUNTIME_DISTRIBUTIONS:
        digest.update(f"{name}=={package_metadata.version(name)}\n".encode())
    for path in files:
        digest.update(f"{path}\0{_file_stamp(path)}\n".encode())
    return digest.hexdigest()


def _exists(path: str) -> bool:
    if spans.is_remote(path):
        import tensorflow as tf

        return tf.io.gfile.exists(path)
    return os.path.exists(path)


@dataclasses.dataclass
class Record:
    """What `last_run.json` holds."""

    fingerprint: str
    report: RunReport
    # The last run over a window of spans (`retrain`), kept when a `run` over every span
    # comes after it: it is what tells `retrain` the newest span was already trained on.
    window_report: Optional[RunReport] = None


def load(output_root: str) -> Optional[Record]:
    """The record of the last finished run, None before the first."""
    path = os.path.join(output_root, LAST_RUN_FILE)
    if not os.path.exists(path):
        return None
    with open(path) as handle:
        record = json.load(handle)
    window = record.get("window_report")
    return Record(
        record["fingerprint"],
        RunReport.from_json(record["report"]),
        RunReport.from_json(window) if window else None,
    )


def save(output_root: str, run_fingerprint: str, report: RunReport) -> None:
    """Written after the run finished, by an atomic rename: never half a record."""
    previous = load(output_root)
    window = report if report.window_size is not None else (previous.window_report if previous else None)
    path = os.path.join(output_root, LAST_RUN_FILE)
    staged = path + ".tmp"
    text = json.dumps(
        {"fingerprint": run_fingerprint, "report": report.to_json(),
         "window_report": window.to_json() if window else None},
        indent=2,
    )
    os.makedirs(output_root, exist_ok=True)
    with open(staged, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(staged, path)


@dataclasses.dataclass
class RunPlan:
    # The spans found, oldest first, with their files.
    found: List[spans.Span]
    fingerprint: str
    # The last run's report when nothing changed since; None when a run is needed.
    previous: Optional[RunReport]

    @property
    def files(self) -> List[str]:
        return [path for span in self.found for path, _ in span.files]

    @property
    def spans(self) -> List[int]:
        return [span.number for span in self.found]


def plan(run_config: config_lib.RunConfig) -> RunPlan:
    """Lists the data (or raises naming the problem) and decides whether a run is needed."""
    started = time.perf_counter()
    found = preflight.checked_spans(run_config.data_root)
    run_fingerprint = fingerprint(run_config, [path for span in found for path, _ in span.files])
    previous = reusable_report(run_config.output_root, run_fingerprint)
    if previous is not None:
        previous.seconds = time.perf_counter() - started
    return RunPlan(found, run_fingerprint, previous)


def _as_reused(report: RunReport, note: str = "") -> RunReport:
    report.reused_previous_run = True
    report.note = note
    if report.outcome is Outcome.PUSHED:
        report.outcome = Outcome.UP_TO_DATE
    report.nodes = []
    return report


def reusable_report(output_root: str, run_fingerprint: str) -> Optional[RunReport]:
    """The last run's report, if it had this fingerprint and what it pushed still serves."""
    last = load(output_root)
    if last is None or last.fingerprint != run_fingerprint:
        return None
    previous = last.report
    if previous.outcome in (Outcome.PUSHED, Outcome.UP_TO_DATE):
        if not (previous.pushed_version_dir and _exists(previous.pushed_version_dir)):
            return None
    return _as_reused(previous)


def window_done(output_root: str, newest_span: int) -> Optional[RunReport]:
    """The last window run's report, if it already evaluated on `newest_span`."""
    last = load(output_root)
    report = last.window_report if last else None
    if report is None or not report.spans or report.spans[-1] != newest_span:
        return None
    if report.outcome is Outcome.DATA_REJECTED:
        return None
    return _as_reused(report, f"span {newest_span} was already trained on; nothing to do")
