"""The one record of the last finished runs (`last_run.json`), and the plan of the next.

Nothing here imports TensorFlow for local paths: an unchanged re-run is decided and
reported in well under a second, before any heavy import.

`<output root>/last_run.json` (the output root is always local) is written once per
finished `run` or `retrain`, by one atomic writer. It holds the last run's report and the
last window run's report (`retrain`), each with the fingerprint of its inputs: the bytes
of the data files it ingested, this project's source and schema, the resolved settings,
the versions of the libraries that execute it. When a run is asked for with the
fingerprint of the last one and what that run pushed still serves, the last run is
reported instead of starting another. Content decides, never paths or mtimes: a
`make-data` that rewrites identical bytes is not a change, and any changed byte is; an
output root moved or copied with its data and serving folder is not a change either
(the paths its records hold are corrected by `pipeline.run.relocation`).

A change of library versions also turns the components' cache off for that run
(`RunPlan.cache`): TFX's cache keys do not include library versions, so without this a
new TensorFlow would reuse statistics, transform graph and model made by the old one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time
from typing import Dict, List, Optional

import components
import pipeline as pipeline_package
from components.model.trainer.settings import SAVED_MODEL_FILE
from components.support import files, registry, serving_config, source, spans
from pipeline import config as config_lib
from pipeline.outcome import Outcome, RunReport
from pipeline.run import preflight

# The data files' digests by path and stat, so unchanged files are not read again.
DIGESTS_FILE = "file_digests.json"
def fingerprint(run_config: config_lib.RunConfig, files_digest: str) -> str:
    """Changes whenever the data's bytes (`files_digest`: `spans.files_digest`), the
    project's code or schema, the settings or the runtime change."""
    digest = hashlib.sha256()
    for package in (components, pipeline_package):
        digest.update(source.source_digest(os.path.dirname(package.__file__)).encode())
    digest.update(json.dumps(_inputs(run_config), sort_keys=True).encode())
    digest.update(json.dumps(registry.runtime_versions(), sort_keys=True).encode())
    digest.update(files_digest.encode())
    return digest.hexdigest()


def _inputs(run_config: config_lib.RunConfig) -> dict:
    """The settings and the metadata store, not where the data, output root, serving
    folder or this package's source sit: a root moved or copied with its data and serving
    folder is unchanged (`pipeline.run.relocation`), and so is a clone elsewhere."""
    settings = dataclasses.asdict(run_config.settings)
    settings["beam_args"] = [arg for arg in settings["beam_args"] if not arg.startswith("--setup_file=")]
    return {"settings": settings, "metadata_mysql": str(run_config.metadata_mysql or "")}


@dataclasses.dataclass
class Record:
    """What `last_run.json` holds."""

    report: RunReport
    # The last run over a window of spans (`retrain`), kept when a `run` over every span
    # comes after it: it is what tells `retrain` the newest span was already trained on.
    window_report: Optional[RunReport] = None
    # The library versions the last run ran with.
    runtime: Dict[str, str] = dataclasses.field(default_factory=dict)


def load(output_root: str) -> Optional[Record]:
    """The record of the last finished run, None before the first."""
    path = os.path.join(output_root, config_lib.LAST_RUN_FILE)
    if not os.path.exists(path):
        return None
    with open(path) as handle:
        record = json.load(handle)
    window = record.get("window_report")
    return Record(
        RunReport.from_json(record["report"]),
        RunReport.from_json(window) if window else None,
        record.get("runtime") or {},
    )


def save(output_root: str, report: RunReport) -> None:
    """Written after the run finished, by an atomic rename: never half a record."""
    previous = load(output_root)
    window = report if report.window_size is not None else (previous.window_report if previous else None)
    write_json(os.path.join(output_root, config_lib.LAST_RUN_FILE),
               {"report": report.to_json(), "window_report": window.to_json() if window else None,
                "runtime": registry.runtime_versions()})


def write_json(path: str, value: object) -> None:
    """`value` as JSON at the local `path`, by an atomic rename of a synced file: a reader
    sees the old file or the new one, never half of one."""
    staged = f"{path}.tmp-{os.getpid()}"
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(staged, "w") as handle:
        json.dump(value, handle, indent=2)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(staged, path)


@dataclasses.dataclass
class RunPlan:
    # The spans the run ingests, oldest first, with their files: every span, or in
    # window mode the window's.
    found: List[spans.Span]
    fingerprint: str
    # The report of what decided already when a run would repeat it (see `plan`); None
    # when a run is needed.
    previous: Optional[RunReport]
    # The candidate's inputs (`registry.inputs_digest`), which its record entry keeps.
    inputs: str = ""
    # Entries under the data root that nothing reads (logged, and named on the console).
    ignored: List[str] = dataclasses.field(default_factory=list)
    # Whether components may reuse cached outputs; why not, when they may not.
    cache: bool = True
    cache_note: str = ""

    @property
    def files(self) -> List[str]:
        return [path for span in self.found for path, _ in span.files]

    @property
    def spans(self) -> List[int]:
        return [span.number for span in self.found]

    @property
    def folders(self) -> List[str]:
        return [span.folder_name for span in self.found]


def plan(run_config: config_lib.RunConfig) -> RunPlan:
    """Lists the data (or raises naming the problem) and decides whether a run is needed."""
    started = time.perf_counter()
    serving_config.refuse_a_lost_pin(run_config.model_serving_dir)
    found = preflight.checked_spans(run_config.data_root)
    ignored = preflight.ignored_entries(run_config.data_root, found)
    window_size = run_config.settings.window_size
    if window_size is not None:
        found = found[-window_size:]
    with spans.remembered_digests(os.path.join(run_config.output_root, DIGESTS_FILE)):
        files_digest = spans.files_digest(path for span in found for path, _ in span.files)
    run_fingerprint = fingerprint(run_config, files_digest)
    inputs = registry.inputs_digest(config_lib.static_inputs(run_config.settings), registry.runtime_versions(),
                                    files_digest)
    record = load(run_config.output_root)
    last = None if record is None else (record.report if window_size is None else record.window_report)
    for path in ignored:
        logging.warning("ignored (not a span folder or span data file, read by nothing): %s", path)
    previous = decided_before(last, run_fingerprint, inputs, run_config.model_serving_dir, run_config.output_root)
    if previous is not None:
        previous.seconds = time.perf_counter() - started
        previous.ignored = ignored
    cache, cache_note = True, ""
    if record is not None and record.runtime and record.runtime != registry.runtime_versions():
        changed = ", ".join(
            f"{name} {record.runtime.get(name, '?')} -> {version}"
            for name, version in sorted(registry.runtime_versions().items()) if record.runtime.get(name) != version
        )
        cache, cache_note = False, f"library versions changed since the last run ({changed}): every component runs"
    return RunPlan(found, run_fingerprint, previous, inputs, ignored, cache, cache_note)


def _as_reused(report: RunReport) -> RunReport:
    report.reused_previous_run = True
    if report.outcome is Outcome.PUSHED:
        report.outcome = Outcome.UP_TO_DATE
    report.nodes = []
    report.held = ""  # what became of a held candidate since is the record's (the decision's note)
    return report


# What a candidate's fate makes of a run that would repeat it.
_OUTCOMES = {
    registry.Fate.NOT_BLESSED: Outcome.NOT_BLESSED,
    registry.Fate.SERVING_CHECK_FAILED: Outcome.SERVING_CHECK_FAILED,
    registry.Fate.AWAITING_APPROVAL: Outcome.AWAITING_APPROVAL,
    registry.Fate.REJECTED: Outcome.REJECTED,
    registry.Fate.SHADOW_REFUSED: Outcome.SHADOW_REFUSED,
}


def decided_before(last: Optional[RunReport], run_fingerprint: str, inputs: str,
                   model_serving_dir: str, output_root: str = "") -> Optional[RunReport]:
    """The report of what decided already, when a run of these inputs would repeat it:
    the model's record (`serving_config.decide`: the version that serves or the newest
    candidate had these inputs, or a person rejected them), or the last run when it had this very fingerprint and
    made no candidate (the data gate refused the data) or ran before the record existed.
    Decided by the record, its page is the page of the run that made the candidate, when
    `output_root` has it (another output root may have pushed to the serving folder)."""
    if last is not None and last.fingerprint == run_fingerprint and last.outcome is Outcome.DATA_REJECTED:
        return _as_reused(last)
    record = registry.read(model_serving_dir)
    if not record.candidates:
        return reusable_report(last, run_fingerprint, model_serving_dir)
    decision = serving_config.decide(model_serving_dir, inputs)
    if decision is None:
        return None
    candidate = decision.candidate
    if last is not None and last.run_id and last.run_id == candidate.run:
        report = last
    else:
        page = config_lib.report_path(output_root, candidate.run) if output_root and candidate.run else ""
        # A person's decision set the candidate's time: then when its run finished is not known here.
        report = RunReport(outcome=Outcome.UP_TO_DATE, spans=list(candidate.spans), run_id=candidate.run,
                           finished="" if candidate.by else candidate.at,
                           page=page if page and os.path.exists(page) else "")
    report.outcome = _OUTCOMES.get(candidate.fate, Outcome.UP_TO_DATE)
    shown = candidate.version if candidate.fate is registry.Fate.AWAITING_APPROVAL else decision.serving
    report.pushed_version_dir = files.join(model_serving_dir, str(shown)) if shown is not None else None
    unchanged = report is last and last.fingerprint == run_fingerprint and candidate.version == decision.serving
    report = _as_reused(report)
    if not unchanged:  # else the last run is said to be unchanged (`commands.summary`)
        report.note = f"Nothing to train: {decision.says} (`--force` trains anyway)."
    missing = serving_config.state_of(model_serving_dir).missing_note(model_serving_dir)
    report.note = " ".join(part for part in (report.note, missing) if part)
    return report


def reusable_report(last: Optional[RunReport], run_fingerprint: str, model_serving_dir: str) -> Optional[RunReport]:
    """`last`, if it had this fingerprint and what it pushed is still in `model_serving_dir`
    (the serving folder given now, which may be another than the one it pushed to)."""
    if last is None or last.fingerprint != run_fingerprint:
        return None
    if last.outcome in (Outcome.PUSHED, Outcome.UP_TO_DATE):
        if not last.pushed_version_dir:
            return None
        here = files.join(model_serving_dir, last.pushed_version)
        if not files.exists(files.join(here, SAVED_MODEL_FILE)):  # a whole version, not a folder of that name
            return None
        last.pushed_version_dir = here
    return _as_reused(last)
