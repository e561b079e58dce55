"""Runs `create_pipeline(...)` on this machine: LocalDagRunner (default) or BeamDagRunner.

Resolve config -> build -> compile -> run under a run id of our own -> read that run's
report from MLMD. Whether a run is needed at all is decided
before, without TensorFlow (`pipeline.run_state.plan`).
"""

from __future__ import annotations

import datetime
import os
import time
from typing import Sequence

from tfx import v1 as tfx
from tfx.dsl.compiler import compiler, constants
from tfx.orchestration.beam.beam_dag_runner import BeamDagRunner
from tfx.orchestration.portable import runtime_parameter_utils

from pipeline import config, preflight, run_report, run_state
from pipeline import pipeline as pipeline_lib

# LocalDagRunner runs the nodes one after another in this process; BeamDagRunner makes
# each node a step of one Beam pipeline (here on the DirectRunner, in this process too).
ORCHESTRATORS = dict(zip(config.ORCHESTRATORS, (tfx.orchestration.LocalDagRunner, BeamDagRunner)))


def build_pipeline(run_config: config.RunConfig, span_listing: Sequence[int]) -> tfx.dsl.Pipeline:
    return pipeline_lib.create_pipeline(
        **run_config.pipeline_args(span_listing),
        metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(
            run_config.metadata_path
        ),
    )


def compile_ir(run_config: config.RunConfig, span_listing: Sequence[int], run_id: str):
    """The pipeline's IR with `run_id` as its pipeline_run context."""
    ir = compiler.Compiler().compile(build_pipeline(run_config, span_listing))
    runtime_parameter_utils.substitute_runtime_parameter(ir, {constants.PIPELINE_RUN_ID_PARAMETER_NAME: run_id})
    return ir


def new_run_id() -> str:
    return f"{datetime.datetime.now():%Y%m%d-%H%M%S-%f}-{os.getpid()}"


def run(run_config: config.RunConfig, plan: run_state.RunPlan, orchestrator: str = "local") -> run_state.RunReport:
    """Runs the pipeline once and records and returns what it did."""
    started = time.perf_counter()
    preflight.check_records(plan.files)
    run_id = new_run_id()
    ir = compile_ir(run_config, plan.spans, run_id)
    os.makedirs(run_config.output_root, exist_ok=True)  # MLMD's SQLite file is local
    ORCHESTRATORS[orchestrator]().run_with_ir(ir)
    report = run_report.read_run(run_config.metadata_path, run_config.settings.pipeline_name, run_id)
    report.window_size = run_config.settings.window_size
    report.seconds = time.perf_counter() - started
    run_state.save(run_config.output_root, plan.fingerprint, report)
    return report
