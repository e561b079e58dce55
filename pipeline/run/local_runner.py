"""Runs `create_pipeline(...)` on this machine: LocalDagRunner (default) or BeamDagRunner.

Resolve config -> build -> compile -> run under a run id of our own -> read that run's
report from MLMD. Whether a run is needed at all is decided
before, without TensorFlow (`pipeline.run.run_state.plan`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import importlib
import logging
import os
import time
from concurrent.futures import Future
from typing import Iterator, Optional, Sequence, Tuple

from tfx.dsl.compiler import compiler, constants
from tfx.orchestration import pipeline as tfx_pipeline
from tfx.orchestration.portable import runtime_parameter_utils

from components import compat
from components.custom import baseline, pusher, serving_check, span_statistics
from components.custom.recorded import MODEL_KEY, NodeId
from components.support import beam_place, registry, serving_config
from pipeline import config, outcome
from pipeline import pipeline as pipeline_lib
from pipeline.beam import options as beam_options
from pipeline.inspect import run_report
from pipeline.patches import tfx as tfx_patches
from pipeline.run import logs, preflight, process, run_state, statistics_ahead, watch

# LocalDagRunner runs the nodes one after another in this process; BeamDagRunner makes
# each node a step of one Beam pipeline (here on the DirectRunner, in this process too).
# Each is imported when a run asks for it: TFX's BeamDagRunner module imports its Docker
# launcher, and with it the Docker client.
ORCHESTRATORS = dict(zip(config.ORCHESTRATORS, ("tfx.orchestration.local.local_dag_runner.LocalDagRunner",
                                                "tfx.orchestration.beam.beam_dag_runner.BeamDagRunner")))


def orchestrator_class(name: str) -> type:
    """The runner class of `ORCHESTRATORS`' `name`."""
    module, _, attribute = ORCHESTRATORS[name].rpartition(".")
    return getattr(importlib.import_module(module), attribute)


def build_pipeline(
    run_config: config.RunConfig, span_listing: Sequence[str], enable_cache: bool = True, inputs: str = "",
    serving: Optional[str] = None,
) -> tfx_pipeline.Pipeline:
    """The run's pipeline; `serving` is the version that serves as the run planned with it
    (`baseline.serving_now`, read now when not given)."""
    return pipeline_lib.create_pipeline(
        **run_config.pipeline_args(span_listing, inputs),
        serving=baseline.serving_now(run_config.model_serving_dir) if serving is None else serving,
        metadata_connection_config=run_report.connection_config(run_config.metadata),
        enable_cache=enable_cache,
    )


def compile_ir(run_config: config.RunConfig, span_listing: Sequence[str], run_id: str, enable_cache: bool = True,
               inputs: str = "", serving: Optional[str] = None, push_again: bool = False):
    """The pipeline's IR with `run_id` as its pipeline_run context; with `push_again`, the
    Pusher's cache key holds the run's id, so that it executes even when every input is
    an earlier run's: the version that run pushed is gone (`serving_config.pushed_and_gone`)."""
    ir = compiler.Compiler().compile(build_pipeline(run_config, span_listing, enable_cache, inputs, serving))
    runtime_parameter_utils.substitute_runtime_parameter(ir, {constants.PIPELINE_RUN_ID_PARAMETER_NAME: run_id})
    if push_again:
        for node in ir.nodes:
            if node.pipeline_node.node_info.id == NodeId.PUSHER:
                node.pipeline_node.parameters.parameters[pusher.RUN_KEY].field_value.string_value = run_id
    return ir


def new_run_id(fingerprint: str) -> str:
    """`<UTC time>-<pid>-<inputs>`: sorts by start time; ends with the inputs' fingerprint,
    by which a re-run finds a run of the same inputs that finished but was not recorded."""
    started = datetime.datetime.now(datetime.timezone.utc)
    return f"{started:%Y%m%d-%H%M%S-%f}-{os.getpid()}-{fingerprint[:run_report.RUN_KEY_LENGTH]}"


def run(
    run_config: config.RunConfig, plan: run_state.RunPlan, orchestrator: str = "local", recover: bool = True,
    page_later: bool = False, record_check: Optional[Future[int]] = None, command: str = "run",
    notify_url: str = "",
    ahead: Optional[statistics_ahead.Ahead] = None,
) -> outcome.RunReport:
    """Runs the pipeline once and records and returns what it did; with `recover`, a run
    of the same inputs that finished unrecorded is recorded instead (see `_unrecorded`);
    with `page_later`, its page is drawn after the process's exit status is known
    (`process.after_exit`). `record_check` is the plan's files' record check, started
    earlier (`preflight.start_check`); None: it is done here. `command` and `notify_url`:
    the command this run serves and its alert webhook, for an alert the services' watch
    posts when it ends the run. `ahead`: the gate's statistics computed ahead (`statistics_ahead`), or None."""
    started = time.perf_counter()
    # The output root's lock says no run of this root is running; a MySQL store is shared
    # with other roots whose runs may be, so it is left as it is.
    if run_config.metadata_mysql is None and run_config.metadata.exists():
        for node_id in run_report.close_interrupted(run_config.metadata):
            logging.warning("an earlier run was stopped while %s ran; its execution is marked CANCELED", node_id)
    recovered = _unrecorded(run_config, plan) if recover else None
    if recovered is not None:
        report = recovered
    else:
        rows = record_check.result() if record_check is not None else preflight.check_records(plan.files)
        serving = baseline.serving_now(run_config.model_serving_dir)
        missing = serving_config.state_of(run_config.model_serving_dir).missing
        run_config = _sized(run_config, rows, models=1 if serving == registry.NOTHING_SERVES else 2)
        if not plan.cache:
            logging.warning("%s", plan.cache_note)
        run_id = new_run_id(plan.fingerprint)
        gone = serving_config.pushed_and_gone(run_config.model_serving_dir, plan.inputs)
        if gone is not None:
            logging.warning("version %d, pushed by a run of these inputs, is no longer in %s: this run pushes the "
                            "model again", gone, run_config.model_serving_dir)
        ir = compile_ir(run_config, plan.folders, run_id, enable_cache=plan.cache, inputs=plan.inputs,
                        serving=serving, push_again=gone is not None)
        os.makedirs(run_config.output_root, exist_ok=True)  # MLMD's SQLite file is local
        # A MySQL store or a Beam service that stops answering would hold the run for good.
        with watch.watching(run_config.metadata, run_config.settings.beam_args, logs.current_path(""), command,
                            notify_url):
            span_statistics.expect_ahead(ahead.wait if ahead is not None else None)
            try:
                with _probe_ahead(rows, bool(run_config.settings.parallel_beam_args)):
                    orchestrator_class(orchestrator)().run_with_ir(ir)
            finally:
                serving_check.stop_spare()
                span_statistics.expect_ahead(None)
            report = run_report.read_run(run_config.metadata, run_config.settings.pipeline_name, run_id)
        if missing:
            report.note = report.note or _missing_note(run_config, missing, serving)
    report.window_size = run_config.settings.window_size
    report.stack = compat.describe()
    report.ignored = plan.ignored
    report.fingerprint = plan.fingerprint
    report.finished = report.finished or datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    report.seconds = time.perf_counter() - started
    if report.run_id:
        report.page = write_page(run_config, report, later=page_later)
    run_state.save(run_config.output_root, report)
    return report


def _missing_note(run_config: config.RunConfig, missing: Sequence[int], serving: str) -> str:
    """What the run made of versions `models.config` loaded that were not in the folder;
    `serving`: the baseline it compared with (`baseline.serving_now`)."""
    model_dir = run_config.model_serving_dir
    baseline_was = ("none" if serving == registry.NOTHING_SERVES
                    else f"version {serving}, the newest one loaded that is there")
    still = serving_config.state_of(run_config.model_serving_dir).missing_note(model_dir)
    return (f"When the run started, {serving_config.CONFIG_FILE} loaded version {', '.join(map(str, missing))} of "
            f"{model_dir}, which was not there (deleted or moved?): the run's baseline was {baseline_was}. "
            + (still or f"{serving_config.CONFIG_FILE} no longer names it."))


@contextlib.contextmanager
def _probe_ahead(rows: int, evaluator_in_workers: bool) -> Iterator[None]:
    """The serving check's probe imports TensorFlow on the core the nodes before the check
    leave idle, instead of on the run's path: 3-4 s of a run. It starts once the data gate
    has let the run through, when the first node after the gate that executes (not one
    from the cache) is done: a run the gate refuses, or one killed before, starts no
    process of 0.5 GB for nothing. From `MULTI_PROCESS_ROWS` rows on it starts when the
    Trainer is done, beside an Evaluator in this process (which keeps one core busy), not
    beside the Trainer's two-core data preparation; and not at all beside the Evaluator's
    Beam workers (`evaluator_in_workers`), which its import slowed more than it saved, and
    beside which its memory would stand (at 1M rows: ServingCheck 3.4 -> 0.5 s but the
    Evaluator 21.8 -> 23.7 s, peak 3.14 -> 3.71 GB). Handed the model as soon as the
    Trainer wrote it, it loads the model and replays its warmup requests while the
    Evaluator runs; the check then times requests."""
    if evaluator_in_workers:
        starts: Tuple[str, ...] = ()
    elif rows >= beam_options.MULTI_PROCESS_ROWS:
        starts = (NodeId.TRAINER,)
    else:
        starts = (NodeId.BASELINE, NodeId.TRANSFORM, NodeId.TRAINER)
    with contextlib.ExitStack() as hooks:
        for node_id in starts:
            hooks.enter_context(tfx_patches.when_done(node_id, _start_probe))
        hooks.enter_context(tfx_patches.when_done(NodeId.TRAINER, _hand_over_model))
        yield


def _start_probe(_outputs: dict) -> None:
    serving_check.start_spare_once()


def _hand_over_model(outputs: dict) -> None:
    from tfx.utils import path_utils

    models = outputs.get(MODEL_KEY) or []
    if models:
        serving_check.hand_over(path_utils.serving_model_path(models[0].uri))


def write_page(
    run_config: config.RunConfig, report: outcome.RunReport, recorded: bool = True, later: bool = False
) -> str:
    """The run's HTML page (`pipeline.inspect.report_page`), from its MLMD records, or with
    `recorded` False from `report` alone (a run stopped before the pipeline started); ""
    if it could not be written, which never changes the run's outcome (the log says why).
    With `later`, what it shows is read now, and it is drawn once the process's exit
    status is known (a placeholder stands in for it until then)."""
    from pipeline.inspect import report_page, run_details

    try:
        if recorded:
            details = run_details.read(run_config.metadata, run_config.settings.pipeline_name, report.run_id, report)
        else:
            details = run_details.RunDetails(report=report)
        if not later:
            return report_page.write(run_config.output_root, details)
        process.after_exit(functools.partial(_draw_page, run_config.output_root, details))
        return report_page.write_placeholder(run_config.output_root, report.run_id)
    except Exception:  # a page is a view of the run: it must not fail a run that pushed
        logging.exception("the run's page could not be written")
        return ""


def _draw_page(output_root: str, details) -> None:
    from pipeline.inspect import report_page

    try:
        report_page.write(output_root, details)
    except Exception:  # as in write_page; the placeholder says how to write it again
        logging.exception("the run's page could not be written")


def _sized(run_config: config.RunConfig, rows: int, models: int = 1) -> config.RunConfig:
    """`run_config` sized for `rows`: the eval split (`config.sized_evaluation`), worker
    processes for the Evaluator when it scores enough rows (its eval rows times `models`,
    the candidate and the serving model if one serves: `beam_options.parallel_beam_args`)
    and threads for ImportExampleGen (`beam_options.threaded_beam_args`)."""
    settings = run_config.settings
    evaluation = config.sized_evaluation(settings.evaluation, rows)
    scored = config.eval_rows(evaluation, rows, settings.window_size) * models
    parallel = beam_options.parallel_beam_args(settings.beam_args, scored)
    ingest = beam_options.threaded_beam_args(settings.beam_args, rows)
    logging.info("%d rows: Beam runs %s", rows, _describe_beam(settings.beam_args, parallel, ingest))
    if evaluation != settings.evaluation:
        logging.info("%d rows: the eval split is 1 hash bucket of %d (about %d rows)", rows,
                     evaluation.train_buckets + 1, config.eval_rows(evaluation, rows))
    return dataclasses.replace(
        run_config,
        settings=dataclasses.replace(settings, parallel_beam_args=parallel, ingest_beam_args=ingest,
                                     evaluation=evaluation),
    )


def _describe_beam(beam_args: Sequence[str], parallel: Sequence[str], ingest: Sequence[str] = ()) -> str:
    from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

    def described(args: Sequence[str]) -> str:
        options = PipelineOptions(list(args))
        direct = options.view_as(DirectOptions)
        runner = options.view_as(StandardOptions).runner
        where = beam_place.place(runner, direct.direct_running_mode).value
        return (f"{(runner or '').rsplit('.', 1)[-1]} {direct.direct_running_mode} with "
                f"{direct.direct_num_workers} worker(s) {where}")

    if not parallel and not ingest:
        return f"{described(beam_args)} for every component"
    workers = (f"{described(parallel)} for the Evaluator (>= {beam_options.EVALUATOR_WORKERS_ROWS} rows scored), "
               if parallel else "")
    threads = f"{described(ingest)} for ImportExampleGen, " if ingest else ""
    return f"{workers}{threads}{described(beam_args)} for the others"


def _unrecorded(run_config: config.RunConfig, plan: run_state.RunPlan) -> Optional[outcome.RunReport]:
    """The report of a run of these very inputs that finished after the last recorded run
    but was stopped before it was recorded (a kill after the Pusher): its decision stands.
    Running again would compare the model it pushed with itself."""
    if not run_config.metadata.exists():
        return None
    record = run_state.load(run_config.output_root)
    recorded = [r.run_id for r in ((record.report, record.window_report) if record else ()) if r is not None]
    report = run_report.finished_run(
        run_config.metadata, run_config.settings.pipeline_name, plan.fingerprint, after=max(recorded, default="")
    )
    if report is not None and report.outcome in (outcome.Outcome.PUSHED, outcome.Outcome.UP_TO_DATE):
        # What it pushed must still be what serves (another root may push to one folder).
        version = report.pushed_version or ""
        if pusher.versions(run_config.model_serving_dir)[-1:] != [int(version) if version.isdigit() else None]:
            return None
    if report is not None:
        report.note = (
            f"Run {report.run_id} of the same inputs finished but was not recorded (it was stopped before); "
            "its result stands and nothing was run again."
        )
    return report
