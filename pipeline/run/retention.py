"""`taxi-pipeline gc` and the retention `retrain` applies after each run: removes what no
run, served version or next run needs any more, found through MLMD, never by paths or dates.

What is kept (`Keep`), as whole runs (every artifact their executions read or wrote):
- the newest `keep_runs` runs, and the runs `last_run.json` records;
- every run that pushed a version still in the serving folder (pinned, labelled, loaded
  or within `--keep-versions`: whatever is on disk there);
- and behind every kept artifact, what made it: the producing execution's inputs, and
  theirs, except a warm-start or baseline model's own history (only that model is kept),
  so `lineage VERSION` and `report RUN` keep working for what is kept.

What goes: every other artifact under the pipeline root, the output folders of executions
of removed runs that never recorded an artifact (a killed run's), those executions'
scratch folders, the pages of removed runs, and logs older than the oldest kept run.

The order makes a kill at any point safe: the artifacts to delete are first marked
MARKED_FOR_DELETION in MLMD in one call (TFX's cache and resolvers only return LIVE
artifacts, so no later run can be handed one), then their files are deleted, then each is
marked DELETED. A `gc` stopped midway leaves marked artifacts, which the next `gc`
finishes. The MLMD rows stay (MLMD's API deletes none): executions, events and contexts
keep the history readable, and `history` says a removed run's files are gone. Removed
runs' contexts get the `gc_removed` property (when). Run it holding the output root's lock.
"""

from __future__ import annotations

import dataclasses
import datetime
import glob
import json
import logging
import os
import time
from typing import Dict, Iterable, List, Optional, Set, Tuple

import tensorflow as tf
from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2
from tfx.types import standard_component_specs

from components.custom import pusher
from components.custom.recorded import NodeId
from components.support import files
from pipeline import config
from pipeline.inspect import run_report
from pipeline.run import run_state

Artifact = metadata_store_pb2.Artifact
# Inputs that point at another model's history, not at what made this one.
REFERENCE_INPUTS = (standard_component_specs.BASE_MODEL_KEY, standard_component_specs.BASELINE_MODEL_KEY)
REMOVED_PROPERTY = run_report.REMOVED_PROPERTY
# TFX's scratch folder of each execution, under its node's folder.
SCRATCH = (".system", "executor_execution")
NEWEST = "among the newest runs"
# When `gc` marked an artifact MARKED_FOR_DELETION (seconds since the epoch, a double:
# MySQL's MLMD holds 32-bit integers).
MARKED_PROPERTY = "gc_marked_at"


@dataclasses.dataclass
class Plan:
    """What a collection keeps and removes, and why."""

    kept_runs: Dict[str, str]  # run id -> why
    removed_runs: List[str]
    runs: Dict[str, metadata_store_pb2.Context]  # every run of this root, by id
    artifacts: List[Artifact]  # to delete
    kept_artifacts: int
    paths: List[str]  # files and folders to delete: the artifacts' and the rest
    bytes: int = 0
    deleted: List[str] = dataclasses.field(default_factory=list)

    def summary(self, dry_run: bool) -> str:
        verb = "Would remove" if dry_run else "Removed"
        lines = [f"{verb} {len(self.removed_runs)} run(s), {len(self.artifacts)} artifact(s), "
                 f"{len(self.paths)} path(s): {size_text(self.bytes)}."]
        reasons: Dict[str, List[str]] = {}
        for run_id, why in sorted(self.kept_runs.items()):
            reasons.setdefault(why, []).append(run_id)
        lines.append(f"Kept {len(self.kept_runs)} run(s) and {self.kept_artifacts} artifact(s):")
        lines += [f"  {why}: {', '.join(runs)}" for why, runs in sorted(reasons.items())]
        if self.removed_runs:
            lines.append(f"{'Runs it would remove' if dry_run else 'Removed runs'}: {', '.join(self.removed_runs)}")
        return "\n".join(lines)


def size_text(count: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if count < 1024 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return ""


class _Graph:
    """The store's runs, executions and events, each read once."""

    def __init__(self, store: metadata_store.MetadataStore, pipeline_name: str):
        self.store = store
        self.runs = {c.name: c for c in store.get_contexts_by_type(run_report.PIPELINE_RUN_CONTEXT)}
        self.run_executions: Dict[str, List[int]] = {}
        self.run_of: Dict[int, str] = {}
        self.states: Dict[int, int] = {}
        for name, context in self.runs.items():
            executions = store.get_executions_by_context(context.id)
            self.run_executions[name] = [e.id for e in executions]
            for execution in executions:
                self.run_of.setdefault(execution.id, name)
                self.states[execution.id] = execution.last_known_state
        self.node_of: Dict[int, str] = {}
        for context_id, node_id in run_report._node_ids(store, pipeline_name).items():
            for execution in store.get_executions_by_context(context_id):
                self.node_of[execution.id] = node_id
        events = store.get_events_by_execution_ids(list(self.run_of)) if self.run_of else []
        self.events_of: Dict[int, List[metadata_store_pb2.Event]] = {}
        self.producers: Dict[int, List[int]] = {}
        for event in events:
            self.events_of.setdefault(event.execution_id, []).append(event)
            if event.type in run_report.OUTPUT_EVENTS:
                self.producers.setdefault(event.artifact_id, []).append(event.execution_id)
        self.artifacts = {a.id: a for a in store.get_artifacts()}
        self.types = {t.name: t.id for t in store.get_artifact_types()}

    def run_artifacts(self, run_id: str) -> Tuple[Set[int], Set[int]]:
        """What the run's executions read or wrote, and of those the warm-start and
        baseline models it read (kept, but not what made them)."""
        events = [e for x in self.run_executions.get(run_id, ()) for e in self.events_of.get(x, ())]
        references = {e.artifact_id for e in events if _reference(e)}
        return {e.artifact_id for e in events if not _reference(e)}, references - {
            e.artifact_id for e in events if not _reference(e)}

    def behind(self, artifact_ids: Iterable[int]) -> Set[int]:
        """The artifacts and, recursively, their producers' inputs (not through a
        warm-start or baseline model)."""
        seen: Set[int] = set()
        todo = list(artifact_ids)
        while todo:
            artifact_id = todo.pop()
            if artifact_id in seen:
                continue
            seen.add(artifact_id)
            for execution_id in self.producers.get(artifact_id, ()):
                todo += [e.artifact_id for e in self.events_of.get(execution_id, ())
                         if e.type in run_report.INPUT_EVENTS and not _reference(e)]
        return seen


def _reference(event: metadata_store_pb2.Event) -> bool:
    """An input event of a warm-start or baseline model, or a resolver's output (runs made
    before the baseline was read from the serving folder resolved it from the store)."""
    if event.type in (metadata_store_pb2.Event.INTERNAL_INPUT, metadata_store_pb2.Event.INTERNAL_OUTPUT):
        return True
    return (event.type in run_report.INPUT_EVENTS and bool(event.path.steps)
            and event.path.steps[0].key in REFERENCE_INPUTS)


def _served_runs(graph: _Graph, model_dir: str) -> Dict[str, str]:
    """The runs that pushed a version still on disk: at the destination the push recorded
    (whatever serving folder this command was given), or in `model_dir` (a serving folder
    moved or copied since)."""
    on_disk = {str(v) for v in pusher.versions(model_dir)}
    name = os.path.basename(model_dir.rstrip("/"))
    found: Dict[str, str] = {}
    for artifact in graph.artifacts.values():
        version = run_report.string_property(artifact, pusher.VERSION_PROPERTY)
        destination = run_report.string_property(artifact, pusher.DESTINATION_PROPERTY).rstrip("/")
        if not (version and destination):
            continue
        if (version in on_disk and destination.endswith(f"/{name}/{version}")) or tf.io.gfile.isdir(destination):
            for execution_id in graph.producers.get(artifact.id, ()):
                found.setdefault(graph.run_of.get(execution_id, ""), f"pushed serving version {version}")
    found.pop("", None)
    return found


def plan(
    store: metadata_store.MetadataStore, pipeline_name: str, pipeline_root: str, model_dir: str,
    keep_runs: int, recorded: Iterable[str] = (), shared: bool = False,
) -> Plan:
    """What to keep and what to remove; changes nothing. A `shared` store (MySQL) also
    holds other output roots' runs: only runs that wrote under this pipeline root count."""
    if keep_runs < 1:
        raise ValueError(f"keep_runs must be at least 1, got {keep_runs}")
    graph = _Graph(store, pipeline_name)
    root = pipeline_root.rstrip("/") + "/"
    if shared:
        graph.runs = {run_id: context for run_id, context in graph.runs.items()
                      if any(graph.artifacts[a].uri.startswith(root)
                             for a in graph.run_artifacts(run_id)[0] if a in graph.artifacts)}
    kept: Dict[str, str] = {}
    for run_id in sorted(graph.runs, reverse=True)[:keep_runs]:
        kept[run_id] = NEWEST
    for run_id in recorded:
        if run_id in graph.runs:
            kept.setdefault(run_id, "recorded in last_run.json")
    for run_id, why in _served_runs(graph, model_dir).items():
        kept.setdefault(run_id, why)
    seeds = [graph.run_artifacts(run_id) for run_id in kept]
    keep = graph.behind(a for made, _ in seeds for a in made) | {a for _, references in seeds for a in references}
    doomed = [a for a in graph.artifacts.values()
              if a.uri.startswith(root) and (
                  (a.id not in keep and a.state != Artifact.DELETED)
                  or a.state == Artifact.MARKED_FOR_DELETION)]  # what a stopped `gc` left
    doomed_ids = {a.id for a in doomed}
    protected = [graph.artifacts[a].uri for a in keep if a in graph.artifacts and a not in doomed_ids]
    removed = sorted(run_id for run_id, context in graph.runs.items()
                     if run_id not in kept and REMOVED_PROPERTY not in context.custom_properties)
    paths = [a.uri for a in doomed]
    # The folders of removed runs' executions, and of every execution that never finished
    # (killed: its outputs were never recorded, and a retry is another execution).
    finished = (metadata_store_pb2.Execution.COMPLETE, metadata_store_pb2.Execution.CACHED)
    executions = {x for run_id in removed for x in graph.run_executions[run_id]} | {
        x for run_id in graph.runs for x in graph.run_executions[run_id] if graph.states.get(x) not in finished}
    keys: Dict[str, List[str]] = {}
    for execution_id in sorted(executions):
        node = graph.node_of.get(execution_id)
        if node is not None:
            paths.append(os.path.join(root, node, *SCRATCH, str(execution_id)))
            node_dir = os.path.join(root, node)
            if node_dir not in keys:
                keys[node_dir] = [key for key in files.listdir(node_dir, missing_ok=True) if not key.startswith(".")]
            paths += [os.path.join(node_dir, key, str(execution_id)) for key in keys[node_dir]]
    paths = sorted({p for p in paths if p.startswith(root) and not _overlaps(p, protected)})
    return Plan(kept_runs=kept, removed_runs=removed, runs=graph.runs, artifacts=doomed, kept_artifacts=len(keep),
                paths=paths)


def _overlaps(path: str, protected: Iterable[str]) -> bool:
    path = path.rstrip("/")
    return any(uri.rstrip("/") == path or uri.startswith(path + "/") or path.startswith(uri.rstrip("/") + "/")
               for uri in protected if uri)


def _bytes(path: str) -> int:
    if not tf.io.gfile.exists(path):
        return 0
    if not tf.io.gfile.isdir(path):
        return tf.io.gfile.stat(path).length
    return sum(tf.io.gfile.stat(os.path.join(folder, name)).length
               for folder, _, names in tf.io.gfile.walk(path) for name in names)


def _delete(path: str) -> bool:
    if not tf.io.gfile.exists(path):
        return False
    if tf.io.gfile.isdir(path):
        tf.io.gfile.rmtree(path)
    else:
        tf.io.gfile.remove(path)
    return True


def collect(
    run_config: config.RunConfig, keep_runs: int = config.KEEP_RUNS, dry_run: bool = False,
    store: Optional[metadata_store.MetadataStore] = None,
) -> Plan:
    """Plans and, unless `dry_run`, carries out a collection of `run_config`'s output root."""
    store = store or run_report.connect(run_config.metadata, writable=not dry_run)
    record = run_state.load(run_config.output_root)
    recorded = [r.run_id for r in ((record.report, record.window_report) if record else ()) if r is not None]
    found = plan(store, run_config.settings.pipeline_name, run_config.pipeline_root, run_config.model_serving_dir,
                 keep_runs, recorded, shared=run_config.metadata_mysql is not None)
    found.paths = [p for p in found.paths if tf.io.gfile.exists(p)]
    found.bytes = sum(_bytes(p) for p in found.paths)
    root = run_config.output_root
    pages = [config.report_path(root, run_id) for run_id in found.removed_runs]
    # Files no MLMD run owns: command logs, and the pages of runs stopped before the
    # pipeline started (a rejected data file), older than the oldest of the newest runs.
    owned = {config.report_path(root, run_id) for run_id in found.runs}
    old = _older_than_newest_runs(found, [os.path.join(root, "logs", "*.log"), config.report_path(root, "*")])
    unowned = [p for p in old if p not in owned]
    extra = [p for p in sorted(set(pages + unowned)) if os.path.exists(p)]
    found.bytes += sum(os.path.getsize(p) for p in extra)
    found.paths += extra
    if dry_run:
        return found
    _keep_evaluations(store, run_config.settings.pipeline_name, found)
    marked_at = time.time()
    for artifact in found.artifacts:
        if artifact.state != Artifact.MARKED_FOR_DELETION:
            artifact.state = Artifact.MARKED_FOR_DELETION
            artifact.custom_properties[MARKED_PROPERTY].double_value = marked_at
    if found.artifacts:
        store.put_artifacts(found.artifacts)
    for path in found.paths:
        if _delete(path):
            found.deleted.append(path)
    for artifact in found.artifacts:
        artifact.state = Artifact.DELETED
    if found.artifacts:
        store.put_artifacts(found.artifacts)
    _mark_removed(store, [found.runs[run_id] for run_id in found.removed_runs])
    logging.info("gc: removed %d paths (%d bytes)", len(found.deleted), found.bytes)
    return found


def _keep_evaluations(store: metadata_store.MetadataStore, pipeline_name: str, found: Plan) -> None:
    """Each removed run's evaluation figures, on its run context before its files go: the
    served model's quality over time (`pipeline.inspect.quality`) outlives them."""
    from pipeline.inspect import quality

    contexts = []
    for run_id in found.removed_runs:
        context = found.runs[run_id]
        records = run_report.run_records(store, pipeline_name, run_id)
        evaluation = records.output(NodeId.EVALUATOR, standard_component_specs.EVALUATION_KEY)
        if run_report.EVAL_SUMMARY_PROPERTY in context.custom_properties or not run_report.live(evaluation):
            continue
        if tf.io.gfile.exists(evaluation.uri):
            context.custom_properties[run_report.EVAL_SUMMARY_PROPERTY].string_value = json.dumps(
                quality.summary(evaluation.uri))
            contexts.append(context)
    if contexts:
        store.put_contexts(contexts)


def _mark_removed(store: metadata_store.MetadataStore, contexts: List[metadata_store_pb2.Context]) -> None:
    now = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    for context in contexts:
        context.custom_properties[REMOVED_PROPERTY].string_value = now
    if contexts:
        store.put_contexts(contexts)


def _older_than_newest_runs(found: Plan, patterns: Iterable[str]) -> List[str]:
    """The files matching `patterns` last written before the oldest of the newest runs started."""
    times = [found.runs[run_id].create_time_since_epoch / 1000 for run_id, why in found.kept_runs.items()
             if why == NEWEST]
    if not times:
        return []
    return sorted(path for pattern in patterns for path in glob.glob(pattern) if os.path.getmtime(path) < min(times))
