"""`taxi-pipeline history` and `taxi-pipeline lineage VERSION`: what the runs did, and
where a served model came from, read from MLMD through its public API.

A version folder under the serving folder is traced back through the events of the
executions that produced each artifact: the Pusher's PushedModel (by its
`pushed_version`) -> the Model it pushed and the blessing that let it -> the Trainer
execution and its inputs (examples, transform graph, schema, warm-start model) -> the
ExampleGen execution and the files it read; the blessing -> the ServingCheck execution ->
the Evaluator's blessing, execution and metrics.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import os
from typing import Dict, List, Optional

from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2

from components.custom import recorded
from components.custom.recorded import NodeId
from components.support import files, registry
from components.support import spans as spans_lib
from pipeline.config import MetadataConfig
from pipeline.inspect import monitor_records, run_report
from pipeline.outcome import Outcome, RunReport

PUSHED_MODEL_TYPE = "PushedModel"


def _time(milliseconds: int) -> str:
    return datetime.datetime.fromtimestamp(milliseconds / 1000).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def run_ids(store: metadata_store.MetadataStore) -> List[str]:
    """Every run id, newest first (run ids start with their UTC start time)."""
    return sorted((c.name for c in store.get_contexts_by_type(run_report.PIPELINE_RUN_CONTEXT)), reverse=True)


def status(report: RunReport) -> str:
    """The run's outcome, or how it ended without one."""
    states = {node.node_id: node.state for node in report.nodes}
    if report.outcome is Outcome.DATA_REJECTED or states.get(NodeId.PUSHER) in ("ran", "cached"):
        return report.outcome.value
    if "failed" in states.values():
        failed = sorted(node for node, state in states.items() if state == "failed")
        return f"failed in {', '.join(failed)}"
    return "stopped before its decision"


def _awaited_in(report: RunReport) -> Optional[str]:
    """The local model folder of the version `report`'s run left awaiting approval, or None."""
    if report.outcome is not Outcome.AWAITING_APPROVAL or not report.pushed_version:
        return None
    model_dir = os.path.dirname(report.pushed_version_dir.rstrip("/"))
    if files.is_remote(model_dir) or not report.pushed_version.isdigit():
        return None
    return model_dir


def decided_since(report: RunReport, records: Optional[Dict[str, Optional[registry.Record]]] = None) -> str:
    """For a run whose model awaited approval: what became of it since ("then approved by
    ana at …"), from the model's record beside the version; "" while it awaits, and when
    the record does not say: it no longer knows the version (the serving folder moved),
    cannot be read (`history` says so under its listing, `serving list` why), or is in Cloud
    Storage (reading history reads no bucket).
    `records`: the records read so far, by model folder, filled in."""
    model_dir = _awaited_in(report)
    if model_dir is None:
        return ""
    records = {} if records is None else records
    if model_dir not in records:
        try:
            records[model_dir] = registry.read(model_dir)
        except (ValueError, OSError) as err:
            logging.warning("history: what became of version %s is not shown: %s", report.pushed_version, err)
            records[model_dir] = None
    record = records[model_dir]
    candidate = record.of_version(int(report.pushed_version)) if record is not None else None
    if candidate is None or candidate.fate is registry.Fate.AWAITING_APPROVAL:
        return ""
    return f"then {candidate.fate.value}{candidate.decision()}"


def history(metadata: MetadataConfig, pipeline_name: str, limit: int) -> str:
    """The newest `limit` runs, one line each: when, spans, outcome (and for a version that
    awaited approval, what became of it since: `decided_since`), AUC, version; and
    `monitor` runs: when, the version monitored, requests, findings."""
    store = run_report.connect(metadata)
    model_records: Dict[str, Optional[registry.Record]] = {}
    contexts = {c.name: c for c in store.get_contexts_by_type(run_report.PIPELINE_RUN_CONTEXT)}
    lines = []  # (milliseconds, line, the model folder whose record it could not read, or None)
    for run_id in sorted(contexts, reverse=True)[:limit]:
        records = run_report.run_records(store, pipeline_name, run_id)
        report = run_report.report_of(records, run_id, details=False)
        when = _time(records.last_update) if records.last_update else "?"
        spans = f"{report.spans[0]}-{report.spans[-1]}" if len(report.spans) > 1 else ",".join(map(str, report.spans))
        # After gc, the figure it kept of the evaluation it removed.
        found_auc = report.eval_metrics.get("auc", run_report.kept_auc(contexts[run_id]))
        auc = f"auc {found_auc:.4f}" if found_auc is not None else ""
        version = f"version {report.pushed_version}" if report.pushed_version else ""
        removed = contexts[run_id].custom_properties.get(run_report.REMOVED_PROPERTY)
        gone = f"(files removed by gc {removed.string_value[:10]})" if removed is not None else ""
        since = decided_since(report, model_records)
        model_dir = _awaited_in(report)
        lines.append((records.last_update, "  ".join(
            part for part in (when, run_id, f"spans {spans or '-'}", status(report), since, auc, version, gone)
            if part), model_dir if model_dir and model_records.get(model_dir, True) is None else None))
    for found in monitor_records.read_all(store)[:limit]:
        lines.append((found.recorded, "  ".join((_time(found.recorded), found.monitor_id,
                                                 monitor_records.describe(found))), None))
    if not lines:
        return f"No runs recorded in {metadata}."
    listed = sorted(lines, key=lambda listed_line: listed_line[0], reverse=True)[:limit]
    # A note for each record that could not be read, when a run listed awaited approval there.
    unread = list(dict.fromkeys(model_dir for _, _, model_dir in listed if model_dir))
    return "\n".join([line for _, line, _ in listed] + [_unread_note(model_dir) for model_dir in unread])


def _unread_note(model_dir: str) -> str:
    serving_dir, model_name = os.path.split(model_dir.rstrip("/"))
    return (f"Not shown: what became of the versions above that awaited approval in {model_dir}, since "
            f"{registry.path(model_dir)} cannot be read (`taxi-pipeline serving list --serving-dir {serving_dir} "
            f"--model-name {model_name}` says why).")


def run_of(store: metadata_store.MetadataStore, execution: metadata_store_pb2.Execution) -> str:
    """The id of the run `execution` belongs to ("?" if none is recorded)."""
    run_type = store.get_context_type(run_report.PIPELINE_RUN_CONTEXT)
    runs = [c.name for c in store.get_contexts_by_execution(execution.id) if c.type_id == run_type.id]
    return runs[0] if runs else "?"


@dataclasses.dataclass
class _Store:
    store: metadata_store.MetadataStore

    def producer(self, artifact_id: int) -> Optional[metadata_store_pb2.Execution]:
        """The execution that made the artifact (not one that reused it from cache)."""
        events = [e for e in self.store.get_events_by_artifact_ids([artifact_id])
                  if e.type in run_report.OUTPUT_EVENTS]
        executions = self.store.get_executions_by_id([e.execution_id for e in events]) if events else []
        made = [e for e in executions if e.last_known_state == metadata_store_pb2.Execution.COMPLETE]
        return min(made or executions, key=lambda e: e.id) if (made or executions) else None

    def run_of(self, execution: metadata_store_pb2.Execution) -> str:
        return run_of(self.store, execution)

    def describe(self, execution: Optional[metadata_store_pb2.Execution]) -> str:
        if execution is None:
            return "not recorded"
        return f"execution {execution.id} of run {self.run_of(execution)}, {_time(execution.create_time_since_epoch)}"


def pushed_model(store: metadata_store.MetadataStore, model_dir: str, version: int):
    """The PushedModel artifact of `version` of this model (the first, if a re-run
    recorded the same push again): pushed to `model_dir`, or else to a folder of the same
    model name (a serving folder that was moved or copied since)."""
    model_dir = model_dir.rstrip("/")
    same_version = [
        artifact for artifact in store.get_artifacts_by_type(PUSHED_MODEL_TYPE)
        if run_report.string_property(artifact, recorded.VERSION_PROPERTY) == str(version)
    ]

    def destination(artifact) -> str:
        return run_report.string_property(artifact, recorded.DESTINATION_PROPERTY).rstrip("/")

    found = [a for a in same_version if destination(a) == f"{model_dir}/{version}"] or [
        a for a in same_version if destination(a).endswith(f"/{os.path.basename(model_dir)}/{version}")
    ]
    return min(found, key=lambda a: a.id) if found else None


def lineage(metadata: MetadataConfig, model_dir: str, version: int) -> str:
    """Where version `version` in `model_dir` came from (`LookupError` if MLMD has no
    push of it)."""
    store = _Store(run_report.connect(metadata))
    pushed = pushed_model(store.store, model_dir, version)
    if pushed is None:
        raise LookupError(f"no push of version {version} to {model_dir} is recorded in {metadata}")
    push = store.producer(pushed.id)
    lines = [f"Version {version} in {model_dir}", f"  pushed by the Pusher, {store.describe(push)}"]
    pusher_inputs = run_report.inputs(store.store, push.id) if push else {}
    model = pusher_inputs.get(recorded.MODEL_KEY)
    blessing = pusher_inputs.get(recorded.MODEL_BLESSING_KEY)
    if model is None:
        return "\n".join(lines + ["  (the push's inputs are not recorded)"])
    train = store.producer(model.id)
    lines += [f"Model {model.uri}", f"  trained by the Trainer, {store.describe(train)}"]
    trainer_inputs = run_report.inputs(store.store, train.id) if train else {}
    base = trainer_inputs.get(recorded.BASE_MODEL_KEY)
    if base is not None:
        lines.append(f"  warm-start candidate: model {base.uri}")
    graph = trainer_inputs.get(recorded.TRANSFORM_GRAPH_KEY)
    if graph is not None:
        lines += [f"Transform graph {graph.uri}", f"  made by Transform, {store.describe(store.producer(graph.id))}"]
    schema = trainer_inputs.get(recorded.SCHEMA_KEY)
    if schema is not None:
        lines.append(f"Schema {schema.uri}")
    examples = trainer_inputs.get(recorded.EXAMPLES_KEY)
    if examples is not None:
        ingested = store.producer(examples.id)
        lines += [f"Examples {examples.uri}", f"  ingested by ImportExampleGen, {store.describe(ingested)}"]
        if ingested is not None and "input_base" in ingested.custom_properties:
            lines.append(f"  from the data root {ingested.custom_properties['input_base'].string_value}")
        sources: Dict[str, List[str]] = json.loads(
            run_report.string_property(examples, recorded.SOURCE_FILES_PROPERTY) or "{}")
        spans = spans_lib.by_number({path.split("/", 1)[0] for files in sources.values() for path in files})
        if spans:
            lines.append(f"  spans: {', '.join(spans)}")
        for split, files in sorted(sources.items()):
            lines += [f"  files of input split {split}:"] + [f"    {path}" for path in spans_lib.by_number(files)]
    check = store.producer(blessing.id) if blessing is not None else None
    shadow = run_report.string_property(blessing, recorded.SHADOW_CHECK_PROPERTY) if check is not None else ""
    if shadow:  # the Pusher's blessing came through the shadow check, then the serving check's
        lines.append(f"Shadow check: {shadow} ({store.describe(check)})")
        blessing = run_report.inputs(store.store, check.id).get(recorded.MODEL_BLESSING_KEY)
        check = store.producer(blessing.id) if blessing is not None else None
    if check is not None:
        lines.append(f"Serving check: {run_report.string_property(blessing, recorded.SERVING_CHECK_PROPERTY)}"
                     f" ({store.describe(check)})")
        blessing = run_report.inputs(store.store, check.id).get(recorded.MODEL_BLESSING_KEY)
    if blessing is not None:
        evaluate = store.producer(blessing.id)
        blessed = run_report.int_property(blessing, recorded.BLESSED_PROPERTY) == 1
        lines += [f"Evaluation: {'blessed' if blessed else 'NOT blessed'} by the Evaluator, {store.describe(evaluate)}"]
        evaluation = run_report.outputs(store.store, evaluate.id).get(recorded.EVALUATION_KEY) \
            if evaluate else None
        if evaluation is not None:
            metrics = run_report.eval_metrics(evaluation)
            lines.append("  " + ", ".join(f"{name} {value:.4f}" for name, value in sorted(metrics.items())))
    return "\n".join(lines)
