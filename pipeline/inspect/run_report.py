"""Reads what one pipeline run did from MLMD into a `RunReport`.

The run is found through its `pipeline_run` context (the run id the runner was given),
through MLMD's public API; every execution of that context is one node of the run.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import os
from typing import Any, Dict, List, Optional

from google.protobuf import json_format
from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2

from components.custom import recorded
from components.custom.recorded import NodeId
from components.model.trainer.settings import TRAINING_SUMMARY_FILE
from components.support import evaluation as evaluation_output
from components.support import files, registry, spans
from pipeline.config import MYSQL_PASSWORD_ENV, MYSQL_USER_ENV, MetadataConfig
from pipeline.outcome import NodeRun, Outcome, RunReport

PIPELINE_RUN_CONTEXT = "pipeline_run"
# Set on a run's context by `gc` (pipeline.run.retention) when it removed the run's files,
# and the evaluation's figures it kept there first (`pipeline.inspect.quality.summary`).
REMOVED_PROPERTY = "gc_removed"
EVAL_SUMMARY_PROPERTY = "eval_summary"
# Characters of the inputs' fingerprint that end a run id (`local_runner.new_run_id`).
RUN_KEY_LENGTH = 16
NODE_CONTEXT = "node"
_STATES = {
    metadata_store_pb2.Execution.CACHED: "cached",
    metadata_store_pb2.Execution.COMPLETE: "ran",
}


def connection_config(metadata: MetadataConfig, writable: bool = True) -> metadata_store_pb2.ConnectionConfig:
    """MLMD's connection: the SQLite file, or MySQL with the account from the environment."""
    config = metadata_store_pb2.ConnectionConfig()
    if metadata.mysql is None:
        config.sqlite.filename_uri = metadata.sqlite_path
        config.sqlite.connection_mode = (
            metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE if writable
            else metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
        )
        return config
    user = os.environ.get(MYSQL_USER_ENV)
    if not user:
        raise ValueError(f"--metadata-mysql needs the database account in {MYSQL_USER_ENV} and "
                         f"{MYSQL_PASSWORD_ENV} (environment variables)")
    config.mysql.host = metadata.mysql.host
    config.mysql.port = metadata.mysql.port
    config.mysql.database = metadata.mysql.database
    config.mysql.user = user
    config.mysql.password = os.environ.get(MYSQL_PASSWORD_ENV, "")
    return config


def connect(metadata: MetadataConfig, writable: bool = False) -> metadata_store.MetadataStore:
    return metadata_store.MetadataStore(connection_config(metadata, writable))


def close_interrupted(metadata: MetadataConfig) -> List[str]:
    """Marks CANCELED the executions a killed run left RUNNING (or NEW), so the store says
    what happened; returns their types. Call it holding the output root's lock: then no
    execution is running."""
    store = connect(metadata, writable=True)
    # Every execution is read: MLMD 1.21 has no filter queries ("ZetaSQL dependency
    # removed"), and a year of weekly runs (700 executions) reads in about 10 ms.
    stale = [
        execution for execution in store.get_executions()
        if execution.last_known_state in (metadata_store_pb2.Execution.RUNNING, metadata_store_pb2.Execution.NEW)
    ]
    for execution in stale:
        execution.last_known_state = metadata_store_pb2.Execution.CANCELED
    if stale:
        store.put_executions(stale)
    types = {t.id: t.name for t in store.get_execution_types()} if stale else {}
    return [types.get(execution.type_id, str(execution.type_id)) for execution in stale]


def _node_ids(store: metadata_store.MetadataStore, pipeline_name: str) -> Dict[int, str]:
    """Node context id -> node id, for this pipeline's nodes."""
    prefix = f"{pipeline_name}."
    return {
        context.id: context.name[len(prefix):]
        for context in store.get_contexts_by_type(NODE_CONTEXT)
        if context.name.startswith(prefix)
    }


OUTPUT_EVENTS = (metadata_store_pb2.Event.OUTPUT, metadata_store_pb2.Event.DECLARED_OUTPUT)
INPUT_EVENTS = (metadata_store_pb2.Event.INPUT, metadata_store_pb2.Event.DECLARED_INPUT)


def outputs(store: metadata_store.MetadataStore, execution_id: int) -> Dict[str, metadata_store_pb2.Artifact]:
    """An execution's output artifacts by output key (the first artifact of each)."""
    return _artifacts_by_key(store, execution_id, OUTPUT_EVENTS)


def inputs(store: metadata_store.MetadataStore, execution_id: int) -> Dict[str, metadata_store_pb2.Artifact]:
    """An execution's input artifacts by input key (the first artifact of each)."""
    return _artifacts_by_key(store, execution_id, INPUT_EVENTS)


def _artifacts_by_key(
    store: metadata_store.MetadataStore, execution_id: int, event_types: tuple
) -> Dict[str, metadata_store_pb2.Artifact]:
    events = [
        e for e in store.get_events_by_execution_ids([execution_id]) if e.type in event_types and e.path.steps
    ]
    artifacts = {a.id: a for a in store.get_artifacts_by_id([e.artifact_id for e in events])} if events else {}
    keys: Dict[str, metadata_store_pb2.Artifact] = {}
    for event in events:
        keys.setdefault(event.path.steps[0].key, artifacts[event.artifact_id])
    return keys


def int_property(artifact: metadata_store_pb2.Artifact, name: str) -> Optional[int]:
    value = artifact.custom_properties.get(name)
    return value.int_value if value is not None else None


def string_property(artifact: metadata_store_pb2.Artifact, name: str) -> str:
    value = artifact.custom_properties.get(name)
    return value.string_value if value is not None else ""


def json_property(artifact: metadata_store_pb2.Artifact, name: str) -> Any:
    value = artifact.custom_properties.get(name)
    return json_format.MessageToDict(value.struct_value) if value is not None else None


def live(artifact: Optional[metadata_store_pb2.Artifact]) -> bool:
    """Whether the artifact's files are there to read (`gc` marks what it deletes)."""
    return artifact is not None and artifact.state == metadata_store_pb2.Artifact.LIVE


def _value(artifact: metadata_store_pb2.Artifact) -> str:
    """The value of a value artifact (`String`): the file at its URI."""
    return files.read_text(artifact.uri)


def describe_anomalies(anomalies_uri: str) -> List[str]:
    """ExampleValidator's findings, split by split (TFDV reads them)."""
    from components.custom import gate

    lines = []
    # missing_ok: the folder removed by hand though its artifact is live.
    for folder in sorted(name for name in files.listdir(anomalies_uri, missing_ok=True) if name.startswith("Split-")):
        split = folder[len("Split-"):]
        lines += [f"[{split}] {line}" for line in gate.anomaly_lines(gate.split_anomalies(anomalies_uri, split))]
    return lines


def _window_mode(anomalies_uri: str) -> bool:
    return f"Split-{recorded.PREVIOUS_SPAN_SPLIT}" in files.listdir(anomalies_uri, missing_ok=True)


def _missed(evaluation_uri: str) -> List[str]:
    """The thresholds a candidate missed, [] (logged) when its validation cannot be read:
    the summary still says it was not blessed."""
    import tensorflow as tf

    from components.support import evaluation as evaluation_output

    try:
        return evaluation_output.failures(evaluation_uri)
    except (tf.errors.OpError, OSError, ValueError) as err:
        logging.warning("which thresholds the model missed is not known: %s", err)
        return []


def eval_metrics(evaluation: metadata_store_pb2.Artifact) -> Dict[str, float]:
    """The Evaluator's metrics over all examples: as it recorded them on its output, or
    for an evaluation recorded without them, read from its files by TFMA."""
    found = string_property(evaluation, recorded.METRICS_PROPERTY)
    if found:
        return json.loads(found)
    from components.support import evaluation as evaluation_output

    return evaluation_output.overall(evaluation.uri)


def warm_start(model_run_uri: str) -> str:
    path = files.join(model_run_uri, TRAINING_SUMMARY_FILE)
    if not files.exists(path):
        return ""
    started = json.loads(files.read_text(path)).get("warm_start", {})
    return f"{'yes' if started.get('used') else 'no'}: {started.get('reason', '')}"


@dataclasses.dataclass
class RunRecords:
    """One run's executions in MLMD: its nodes and their output artifacts by key."""

    nodes: List[NodeRun]
    outputs: Dict[str, Dict[str, metadata_store_pb2.Artifact]]
    # Milliseconds since the epoch of the run's last execution update (0: none).
    last_update: int

    def output(self, node_id: str, key: str) -> Optional[metadata_store_pb2.Artifact]:
        return self.outputs.get(node_id, {}).get(key)


def run_records(store: metadata_store.MetadataStore, pipeline_name: str, run_id: str) -> RunRecords:
    """The executions of run `run_id` of `pipeline_name`, by node (`LookupError` if none)."""
    run_context = store.get_context_by_type_and_name(PIPELINE_RUN_CONTEXT, run_id)
    if run_context is None:
        raise LookupError(f"no run {run_id!r} in the metadata store")
    run_executions = store.get_executions_by_context(run_context.id)
    nodes: List[NodeRun] = []
    by_node: Dict[str, Dict[str, metadata_store_pb2.Artifact]] = {}
    started: Dict[str, int] = {}
    node_ids = _node_ids(store, pipeline_name)
    # Each execution's node from its own contexts: reading each node's executions instead
    # would read every run's, and grow with the history.
    for execution in run_executions:
        node_id = next((node_ids[c.id] for c in store.get_contexts_by_execution(execution.id) if c.id in node_ids),
                       None)
        if node_id is None:
            continue
        seconds = (execution.last_update_time_since_epoch - execution.create_time_since_epoch) / 1000
        started[node_id] = execution.create_time_since_epoch
        nodes.append(NodeRun(node_id, _STATES.get(execution.last_known_state, "failed"), seconds))
        by_node[node_id] = outputs(store, execution.id)
    # In the order they ran.
    nodes.sort(key=lambda n: (started[n.node_id], n.node_id))
    last_update = max((e.last_update_time_since_epoch for e in run_executions), default=0)
    return RunRecords(nodes, by_node, last_update)


def read_run(metadata: MetadataConfig, pipeline_name: str, run_id: str) -> RunReport:
    """The report of run `run_id` of `pipeline_name`, from its MLMD records."""
    return report_of(run_records(connect(metadata), pipeline_name, run_id), run_id)


def _rejected_data(records: RunRecords, report: RunReport, details: bool) -> bool:
    """Whether the data gate or ExampleValidator rejected the run's data; gives `report`
    the gate's checks of each span and the findings (ExampleValidator's only with `details`)."""
    anomalies = records.output(NodeId.EXAMPLE_VALIDATOR, recorded.ANOMALIES_KEY)
    verdict = records.output(NodeId.DATA_GATE, recorded.VERDICT_KEY)
    found: List[str] = []
    if verdict is not None:
        checks = json.loads(string_property(verdict, recorded.SPAN_CHECKS_PROPERTY) or "{}")
        report.span_checks = {span: checks[span] for span in sorted(checks, key=int)}
        if not report.spans:  # the spans' file was removed by `gc`: the gate checked each of them
            report.spans = [int(span) for span in report.span_checks]
        found += [f"[span {span}] {line}" for span, lines in report.span_checks.items() for line in lines]
        found += string_property(verdict, recorded.REPORT_PROPERTY).splitlines()
    anomalous = False
    if live(anomalies):
        blessed = json_property(anomalies, recorded.BLESSED_PROPERTY) or {}
        # In window mode each split is a span, and the span lines above say it all.
        anomalous = not all(int(v) == 1 for v in blessed.values()) and (
            verdict is None or not _window_mode(anomalies.uri))
        if anomalous and details:
            found = describe_anomalies(anomalies.uri) + found
    report.anomalies = found
    return bool(found) or anomalous or (verdict is not None and int_property(verdict, recorded.BLESSED_PROPERTY) != 1)


def report_of(records: RunRecords, run_id: str, details: bool = True) -> RunReport:
    """What run `run_id` decided, from its records; without `details`, a run the data
    rejected is not told why (ExampleValidator's findings, which TFDV reads)."""
    nodes, output, last_update = records.nodes, records.output, records.last_update
    report = RunReport(outcome=Outcome.NOT_BLESSED, nodes=nodes, run_id=run_id)
    if last_update:
        report.finished = datetime.datetime.fromtimestamp(last_update / 1000).astimezone().isoformat(timespec="seconds")
    spans_used = output(NodeId.WINDOW, recorded.SPANS_USED_KEY)
    if live(spans_used):
        report.spans = spans.parse_numbers(_value(spans_used))
    if _rejected_data(records, report, details):
        report.outcome = Outcome.DATA_REJECTED
        return report
    serving_baseline = output(NodeId.BASELINE, recorded.MODEL_KEY)
    if serving_baseline is not None:
        report.baseline = string_property(serving_baseline, recorded.SERVING_PROPERTY)
    model_run = output(NodeId.TRAINER, recorded.MODEL_RUN_KEY)
    if live(model_run):
        report.warm_start = warm_start(model_run.uri)
    evaluation = output(NodeId.EVALUATOR, recorded.EVALUATION_KEY)
    if live(evaluation):
        report.eval_metrics = eval_metrics(evaluation)
    checked = output(NodeId.SERVING_CHECK, recorded.BLESSING_KEY)
    blessing = output(NodeId.EVALUATOR, recorded.BLESSING_KEY)
    if details and live(evaluation) and blessing is not None and int_property(blessing, recorded.BLESSED_PROPERTY) != 1:
        report.missed = _missed(evaluation.uri)
    if checked is not None:
        report.serving_check = string_property(checked, recorded.SERVING_CHECK_PROPERTY)
        evaluator_blessed = blessing is not None and int_property(blessing, recorded.BLESSED_PROPERTY) == 1
        if evaluator_blessed and int_property(checked, recorded.BLESSED_PROPERTY) != 1:
            report.outcome = Outcome.SERVING_CHECK_FAILED
    shadowed = output(NodeId.SHADOW_CHECK, recorded.BLESSING_KEY)
    if shadowed is not None:
        report.shadow_check = string_property(shadowed, recorded.SHADOW_CHECK_PROPERTY)
        report.shadow_measures = json.loads(string_property(shadowed, recorded.SHADOW_MEASURES_PROPERTY) or "{}")
        if string_property(shadowed, recorded.FATE_PROPERTY) == registry.Fate.SHADOW_REFUSED.value:
            report.outcome = Outcome.SHADOW_REFUSED
    pushed = output(NodeId.PUSHER, recorded.PUSHED_MODEL_KEY)
    if pushed is not None and int_property(pushed, recorded.PUSHED_PROPERTY) == 1:
        # A Pusher served from cache pushed nothing in this run: what it pushed before serves.
        pusher_ran = any(node.node_id == NodeId.PUSHER and node.state == "ran" for node in nodes)
        report.outcome = Outcome.PUSHED if pusher_ran else Outcome.UP_TO_DATE
        if string_property(pushed, recorded.FATE_PROPERTY) == registry.Fate.AWAITING_APPROVAL.value:
            report.outcome = Outcome.AWAITING_APPROVAL
            report.held = string_property(pushed, recorded.HELD_PROPERTY)
        report.pushed_version_dir = string_property(pushed, recorded.DESTINATION_PROPERTY)
        pinned = string_property(pushed, recorded.PINNED_PROPERTY)
        if report.outcome is Outcome.PUSHED and pinned and pinned != report.pushed_version:
            report.pinned_to = pinned
    return report


def finished_run(
    metadata: MetadataConfig, pipeline_name: str, fingerprint: str, after: str = ""
) -> Optional[RunReport]:
    """The run of these inputs (by its id's fingerprint) that reached its decision (the
    Pusher finished, or the data gate rejected) after run id `after`, if no run of other
    inputs decided after it."""
    store = connect(metadata)
    suffix = f"-{fingerprint[:RUN_KEY_LENGTH]}"
    contexts = store.get_contexts_by_type(PIPELINE_RUN_CONTEXT)
    # Run ids start with their UTC start time: newest first.
    for run_id in sorted((c.name for c in contexts if c.name > after), reverse=True):
        report = read_run(metadata, pipeline_name, run_id)
        states = {node.node_id: node.state for node in report.nodes}
        decided = states.get(NodeId.PUSHER) in ("ran", "cached") or (
            report.outcome is Outcome.DATA_REJECTED and states.get(NodeId.DATA_GATE) in ("ran", "cached")
        )
        if decided:
            return report if run_id.endswith(suffix) else None
    return None


def kept_auc(context: metadata_store_pb2.Context) -> Optional[float]:
    """The candidate's overall AUC that `gc` kept on a run's context, if it kept one."""
    kept = context.custom_properties.get(EVAL_SUMMARY_PROPERTY)
    overall = json.loads(kept.string_value)["candidate"].get(evaluation_output.OVERALL) if kept is not None else None
    return overall[0] if overall else None
