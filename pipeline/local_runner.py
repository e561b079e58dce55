"""Runs the pipeline with LocalDagRunner and reports what happened, read from MLMD.

Whether a run is needed at all is decided first, without TensorFlow, by
`pipeline.run_record` (see there).
"""

from __future__ import annotations

import json
import os
import time
from typing import Dict, List, Optional

import tensorflow as tf
from ml_metadata.proto import metadata_store_pb2
from tensorflow_metadata.proto.v0 import anomalies_pb2
from tfx import v1 as tfx
from tfx.dsl.compiler import compiler
from tfx.orchestration import metadata
from tfx.proto.orchestration import pipeline_pb2
from tfx.types import artifact_utils, standard_component_specs

from components import drift, window
from components.trainer.settings import ExportConfig
from pipeline import beam_tuning
from pipeline import config as config_lib
from pipeline import pipeline as pipeline_lib
from pipeline import run_record
from pipeline.run_record import NodeRun, Outcome, RunReport


def build_pipeline(run_config: config_lib.RunConfig) -> tfx.dsl.Pipeline:
    return pipeline_lib.create_pipeline(
        pipeline_name=run_config.pipeline_name,
        pipeline_root=run_config.pipeline_root,
        data_root=run_config.data_root,
        schema_path=config_lib.schema_dir(),
        serving_model_dir=run_config.model_serving_dir,
        train=run_config.train,
        export_settings=ExportConfig(model_name=run_config.model_name),
        evaluation=run_config.evaluation,
        code_version=config_lib.code_version(),
        keep_versions=run_config.keep_versions,
        window_size=run_config.window_size,
        warm_start=run_config.warm_start,
        beam_pipeline_args=run_config.beam_args,
        metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(
            run_config.metadata_path
        ),
    )


def compile_without_window_cache(pipeline: tfx.dsl.Pipeline) -> pipeline_pb2.Pipeline:
    """The pipeline's IR, with the cache of the SpanWindow node off: it must look at the
    data root on every run, and its parameters alone would make every run a cache hit."""
    ir = compiler.Compiler().compile(pipeline)
    for node in ir.nodes:
        if node.pipeline_node.node_info.id == window.NODE_ID:
            node.pipeline_node.execution_options.caching_options.enable_cache = False
    return ir


def run(
    run_config: config_lib.RunConfig, force: bool = False, plan: Optional[run_record.RunPlan] = None
) -> RunReport:
    """Runs the pipeline once (unless nothing changed) and reports the outcome."""
    started = time.perf_counter()
    plan = plan or run_record.plan(run_config)
    if plan.previous is not None and not force:
        return plan.previous
    run_record.check_records(plan.files)
    pipeline = build_pipeline(run_config)
    tf.io.gfile.makedirs(run_config.output_root)
    connection = tfx.orchestration.metadata.sqlite_metadata_connection_config(run_config.metadata_path)
    with metadata.Metadata(connection) as store:
        watermark = max((e.id for e in store.store.get_executions()), default=0)
    beam_tuning.apply()
    tfx.orchestration.LocalDagRunner().run_with_ir(compile_without_window_cache(pipeline))
    with metadata.Metadata(connection) as store:
        report = _report_from_mlmd(store.store, run_config.pipeline_name, watermark)
    report.seconds = time.perf_counter() - started
    run_record.save_last_run(run_config.output_root, plan.fingerprint, report)
    return report


def _outputs(store, execution_id: int) -> Dict[str, metadata_store_pb2.Artifact]:
    """An execution's output artifacts by output key (the first artifact of each)."""
    events = [
        e for e in store.get_events_by_execution_ids([execution_id])
        if e.type in (metadata_store_pb2.Event.OUTPUT, metadata_store_pb2.Event.DECLARED_OUTPUT) and e.path.steps
    ]
    artifacts = {a.id: a for a in store.get_artifacts_by_id([e.artifact_id for e in events])} if events else {}
    keys: Dict[str, metadata_store_pb2.Artifact] = {}
    for event in events:
        keys.setdefault(event.path.steps[0].key, artifacts[event.artifact_id])
    return keys


def _typed(store, artifact: metadata_store_pb2.Artifact):
    artifact_type = store.get_artifact_types_by_id([artifact.type_id])[0]
    return artifact_utils.deserialize_artifact(artifact_type, artifact)


def _describe_anomalies(anomalies_uri: str) -> List[str]:
    lines = []
    for split_dir in sorted(tf.io.gfile.glob(os.path.join(anomalies_uri, "Split-*"))):
        split = os.path.basename(split_dir)[len("Split-"):]
        for path in tf.io.gfile.glob(os.path.join(split_dir, "SchemaDiff.pb")):
            with tf.io.gfile.GFile(path, "rb") as handle:
                anomalies = anomalies_pb2.Anomalies.FromString(handle.read())
            for feature, info in sorted(anomalies.anomaly_info.items()):
                kinds = ", ".join(anomalies_pb2.AnomalyInfo.Type.Name(r.type) for r in info.reason)
                lines.append(f"[{split}] feature {feature!r}: {kinds}: {info.description}")
            if anomalies.HasField("dataset_anomaly_info"):
                lines.append(f"[{split}] dataset: {anomalies.dataset_anomaly_info.description}")
    return lines


def _eval_metrics(evaluation_uri: str) -> Dict[str, float]:
    import tensorflow_model_analysis as tfma

    result = tfma.load_eval_result(evaluation_uri)
    overall = result.get_metrics_for_slice(slice_name=()) or {}
    values = {}
    for name in ("auc", "binary_accuracy", "example_count", "calibration"):
        metric = overall.get(name, {})
        if "doubleValue" in metric:
            values[name] = float(metric["doubleValue"])
    return values


def _warm_start(model_run_uri: str) -> str:
    from components.trainer.run import TRAINING_SUMMARY_FILE

    path = os.path.join(model_run_uri, TRAINING_SUMMARY_FILE)
    if not tf.io.gfile.exists(path):
        return ""
    with tf.io.gfile.GFile(path) as handle:
        started = json.load(handle).get("warm_start", {})
    return f"{'yes' if started.get('used') else 'no'}: {started.get('reason', '')}"


def _report_from_mlmd(store, pipeline_name: str, watermark: int) -> RunReport:
    nodes: List[NodeRun] = []
    outputs: Dict[str, Dict[str, object]] = {}
    prefix = f"{pipeline_name}."
    for context in store.get_contexts_by_type("node"):
        if not context.name.startswith(prefix):
            continue
        node_id = context.name[len(prefix):]
        for execution in store.get_executions_by_context(context.id):
            if execution.id <= watermark:
                continue
            state = {
                metadata_store_pb2.Execution.CACHED: "cached",
                metadata_store_pb2.Execution.COMPLETE: "ran",
            }.get(execution.last_known_state, "failed")
            seconds = (execution.last_update_time_since_epoch - execution.create_time_since_epoch) / 1000
            nodes.append(NodeRun(node_id, state, seconds))
            outputs[node_id] = {key: _typed(store, a) for key, a in _outputs(store, execution.id).items()}
    nodes.sort(key=lambda n: n.node_id)

    def output(node_id: str, key: str):
        return outputs.get(node_id, {}).get(key)

    report = RunReport(outcome=Outcome.NOT_BLESSED, nodes=nodes)
    spans_used = output(window.NODE_ID, window.SPANS_KEY)
    if spans_used is not None:
        report.spans = [int(span) for span in spans_used.read().split(",")]
    anomalies = output("ExampleValidator", standard_component_specs.ANOMALIES_KEY)
    if anomalies is not None:
        blessed = anomalies.get_json_value_custom_property("blessed") or {}
        if not all(int(v) == 1 for v in blessed.values()):
            report.outcome = Outcome.DATA_REJECTED
            report.anomalies = _describe_anomalies(anomalies.uri)
            return report
    drift_check = output("DataGate", drift.VERDICT_KEY)
    if drift_check is not None and drift_check.get_int_custom_property(drift.BLESSED_PROPERTY) != 1:
        report.outcome = Outcome.DATA_REJECTED
        report.anomalies = drift_check.get_string_custom_property(drift.REPORT_PROPERTY).splitlines()
        return report
    model_run = output("Trainer", standard_component_specs.MODEL_RUN_KEY)
    if model_run is not None:
        report.warm_start = _warm_start(model_run.uri)
    evaluation = output("Evaluator", standard_component_specs.EVALUATION_KEY)
    if evaluation is not None:
        report.eval_metrics = _eval_metrics(evaluation.uri)
    pushed = output("Pusher", standard_component_specs.PUSHED_MODEL_KEY)
    if pushed is not None and pushed.get_int_custom_property("pushed") == 1:
        report.outcome = Outcome.PUSHED
        report.pushed_version_dir = pushed.get_string_custom_property("pushed_destination")
    return report
