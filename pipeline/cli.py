"""`taxi-pipeline`: the command line of the pipeline.

    taxi-pipeline run        the pipeline end to end on this machine (LocalDagRunner, or
                             BeamDagRunner with --orchestrator beam); does nothing when
                             nothing changed since the last run
    taxi-pipeline retrain    for schedulers: train on the newest --window spans when a new
                             span landed, else do nothing
    taxi-pipeline compile    write the PipelineJob JSON for Kubeflow Pipelines v2 / Vertex AI
    taxi-pipeline schedule   create a Vertex AI schedule that runs the compiled JSON
    taxi-pipeline make-data  rebuild data/ from the CSV shipped in the tfx wheel, or write
                             synthetic data of any size (--rows N --out DIR)
    taxi-pipeline report     re-render a past run's HTML page from the metadata store
    taxi-pipeline history    the recent runs: when, spans, outcome, metrics, pushed version
    taxi-pipeline lineage    where a served model version came from: data, executions, evaluation
    taxi-pipeline predict    batch scoring of tf.Example TFRecords with a pushed model (Beam)
    taxi-pipeline serving    list | rollback [VERSION] | pin VERSION | unpin: which version
                             TF Serving serves (its models.config), never deleting one
    taxi-pipeline beam-services  Beam's job service and a worker pool on this machine, for
                             `--beam portable` (run, retrain and predict take `--beam`)

Exit status (`pipeline.config.ExitCode`): 0 pushed or nothing to do, 3 trained but not
blessed, 4 data rejected, 5 another run or retrain holds the output root's lock, 6
blessed but failed the serving check, 1 any other error.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import logging
import os
import sys
import time
import warnings
from typing import Optional, Sequence

from components import compat
from components.model.trainer.settings import TrainConfig
from components.support import spans
from pipeline import beam_args, config, failures
from pipeline.run import lock, logs, preflight, retrain, run_state, speedups


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _add_latency_budget(command: argparse.ArgumentParser) -> None:
    command.add_argument("--latency-budget-ms", type=float, default=config.Settings().latency_budget_ms,
                         help="the serving check's p99 budget for a single-example request; over it, the model "
                              "is not pushed (exit 6)")


def _mysql_address(text: str) -> config.MySqlAddress:
    try:
        return config.MySqlAddress.parse(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


def _add_metadata_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--output-root", default=config.OUTPUT_ROOT, help="pipeline root, MLMD and logs")
    command.add_argument("--metadata-mysql", type=_mysql_address, default=None, metavar="HOST:PORT/DB",
                         help=f"keep MLMD in this MySQL/MariaDB database instead of the output root's SQLite file "
                              f"(account from {config.MYSQL_USER_ENV} and {config.MYSQL_PASSWORD_ENV})")


def _add_serving_location(command: argparse.ArgumentParser) -> None:
    command.add_argument("--serving-dir", default=config.SERVING_DIR, help="where blessed models are pushed")
    command.add_argument("--model-name", default=config.MODEL_NAME, help="the model's folder under --serving-dir")


def _add_beam_options(command: argparse.ArgumentParser, default_help: str) -> None:
    beam = command.add_argument_group(
        "where the Beam work runs", "see pipeline/beam_args.py; options after `--` are passed to Beam last, and win"
    )
    beam.add_argument("--beam", choices=beam_args.KINDS, default="direct",
                      help=f"direct: {default_help}; portable: a Beam job service and a Python worker pool; "
                           "flink, spark, dataflow: those runners")
    beam.add_argument("--job-endpoint", metavar="HOST:PORT", help="portable, spark: the Beam job service")
    beam.add_argument("--worker-pool", metavar="HOST:PORT",
                      help="portable, flink, spark: a Python worker pool started from this package's environment "
                           "(python -m apache_beam.runners.worker.worker_pool_main --service_port=PORT)")
    beam.add_argument("--flink-master", metavar="HOST:PORT", help="flink: the JobManager's REST address")
    beam.add_argument("--flink-job-server-jar", metavar="PATH",
                      help="flink: Beam's Flink job server jar, where Maven Central cannot be reached")
    beam.add_argument("--sdk-image", metavar="IMAGE",
                      help="flink, spark without a pool: the pipeline image, run in Docker; dataflow: its SDK "
                           "container (the pipeline image)")
    beam.add_argument("--beam-workers", type=int, metavar="N",
                      help="flink, spark: worker processes per job (Flink's parallelism too); dataflow: its "
                           "most workers")
    beam.add_argument("--dataflow-project", metavar="PROJECT", help="dataflow: the Google Cloud project")
    beam.add_argument("--dataflow-region", metavar="REGION", help="dataflow: its region, e.g. europe-west4")
    beam.add_argument("--temp-location", metavar="GS_PATH", help="dataflow: a gs:// folder for its temporary files")


def beam_target(args: argparse.Namespace) -> beam_args.BeamTarget:
    """The `--beam` flags as a BeamTarget, or ValueError naming what is missing."""
    if getattr(args, "beam_target", None) is not None:
        return args.beam_target
    target = beam_args.target_from(
        args.beam, job_endpoint=args.job_endpoint, worker_pool=args.worker_pool, flink_master=args.flink_master,
        flink_job_server_jar=args.flink_job_server_jar, sdk_image=args.sdk_image, workers=args.beam_workers,
        dataflow_project=args.dataflow_project, dataflow_region=args.dataflow_region,
        temp_location=args.temp_location,
    )
    problems = target.problems()
    if problems:
        raise ValueError("; ".join(problems))
    return target


def _add_local_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--data-root", default=config.DATA_ROOT, help="folder of span-<N>/ TFRecord folders")
    _add_metadata_options(command)
    command.add_argument("--serving-dir", default=config.SERVING_DIR, help="where blessed models are pushed")
    command.add_argument("--keep-versions", type=_positive, default=config.KEEP_VERSIONS,
                         help="pushed versions kept in the serving folder; older ones are deleted")
    command.add_argument("--force", action="store_true", help="run even when nothing changed since the last run")
    command.add_argument("--verbose", action="store_true", help="full TensorFlow/Beam/TFX logs on the console")
    command.add_argument("--run-eagerly", action="store_true",
                         help="run the Trainer's tf.functions eagerly (debugging; much slower)")
    command.add_argument("--orchestrator", choices=config.ORCHESTRATORS, default=config.ORCHESTRATORS[0],
                         help="local: LocalDagRunner, one node after another; beam: BeamDagRunner, "
                              "each node a step of one Beam pipeline")
    command.add_argument("--no-speedups", action="store_true",
                         help=f"run without the library speed-ups of pipeline/run/speedups.py (also {speedups.ENV}=0)")
    _add_latency_budget(command)
    command.add_argument("--notify", default=None, metavar="URL",
                         help="POST a JSON summary to this Slack-compatible webhook when the command ends, "
                              "whatever the outcome (a failure to notify never changes the exit status)")
    _add_beam_options(command, "Beam's in-memory engine in this process")
    command.add_argument("beam_args", nargs="*", metavar="BEAM_ARG", help="extra Beam options, after `--`")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="taxi-pipeline", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run the pipeline end to end on this machine")
    _add_local_options(run)
    retrain = commands.add_parser(
        "retrain", help="for schedulers: train on the newest spans if a new span landed, else do nothing"
    )
    retrain.add_argument("--window", type=_positive, default=config.WINDOW_SIZE,
                         help="spans in the rolling window: the newest is evaluated on, the others trained on")
    _add_local_options(retrain)

    kfp = commands.add_parser("compile", help="write the pipeline JSON for Kubeflow Pipelines v2 / Vertex AI")
    kfp.add_argument("--image", required=True, help="the pipeline image (see Dockerfile)")
    kfp.add_argument("--pipeline-root", required=True,
                     help="gs:// root for component outputs")
    kfp.add_argument("--data-root", required=True, help="gs:// folder of span-<N>/ folders (or /gcs/BUCKET/...)")
    kfp.add_argument("--serving-dir", required=True,
                     help="gs:// folder blessed models are pushed to (or /gcs/BUCKET/...)")
    kfp.add_argument("--keep-versions", type=_positive, default=config.KEEP_VERSIONS, help="pushed versions kept")
    kfp.add_argument("--window", type=int, default=config.WINDOW_SIZE,
                     help="train on the newest N spans, chosen on each run (the newest is evaluated on); "
                          "0: every span, hash-split")
    kfp.add_argument("--output", default="pipeline.json", help="where to write the PipelineJob JSON")
    _add_latency_budget(kfp)
    kfp.add_argument("--notify", default="", metavar="URL",
                     help="a Slack-compatible webhook the pipeline's exit handler tells how each run ended, "
                          "even when a component failed")
    _add_beam_options(kfp, "Beam's in-memory engine inside each component's container")
    kfp.add_argument("beam_args", nargs="*", metavar="BEAM_ARG",
                     help="Beam options for the Beam components (e.g. Dataflow's), after `--`")

    schedule = commands.add_parser("schedule", help="create a Vertex AI schedule running the compiled pipeline")
    schedule.add_argument("--pipeline-json", default="pipeline.json", help="written by `taxi-pipeline compile`")
    schedule.add_argument("--cron", required=True, help='when to run, e.g. "0 3 * * *" (UTC)')
    schedule.add_argument("--project", required=True, help="Google Cloud project")
    schedule.add_argument("--region", required=True, help="Vertex AI region, e.g. europe-west4")
    schedule.add_argument("--service-account", default=None, help="service account the runs use")
    schedule.add_argument("--dry-run", action="store_true", help="print the CreateScheduleRequest, send nothing")

    report = commands.add_parser("report", help="write a past run's HTML page again, from the metadata store")
    report.add_argument("run", nargs="?", default=None,
                        help="a run id, or its start (e.g. 20261123-0745); default: the newest run")
    _add_metadata_options(report)
    history = commands.add_parser("history", help="the recent runs: when, spans, outcome, metrics, pushed version")
    history.add_argument("--limit", type=_positive, default=20, help="runs shown, newest first")
    _add_metadata_options(history)
    lineage = commands.add_parser(
        "lineage", help="the spans, files, executions and evaluation behind a pushed model version"
    )
    lineage.add_argument("version", type=int, help="a version folder's number under the serving folder")
    _add_metadata_options(lineage)
    _add_serving_location(lineage)

    predict = commands.add_parser("predict", help="score tf.Example TFRecords with a pushed model, with Beam")
    predict.add_argument("--model", default="latest",
                         help="'latest' (the version TF Serving serves, a pin included) or a version number")
    predict.add_argument("--input", required=True, metavar="GLOB", help="GZIP TFRecords of tf.Example to score")
    predict.add_argument("--output", required=True, metavar="DIR", help="a new or empty folder for the scores")
    predict.add_argument("--csv", action="store_true", help="also write a CSV of probability and class")
    predict.add_argument("--key", default="", metavar="FEATURE", help="with --csv: a feature's value to join on")
    _add_serving_location(predict)
    _add_beam_options(predict, "Beam's in-memory engine in this process")
    predict.add_argument("beam_args", nargs="*", metavar="BEAM_ARG",
                         help="Beam options after `--` (e.g. Dataflow's); default: this machine's DirectRunner")

    services = commands.add_parser(
        "beam-services", help="Beam's job service and a Python worker pool on 127.0.0.1, for --beam portable"
    )
    services.add_argument("--job-port", type=int, default=8099, help="the job service's port (0: any free one)")
    services.add_argument("--worker-pool-port", type=int, default=50000,
                          help="the worker pool's port (0: any free one)")

    serving = commands.add_parser(
        "serving", help="list the pushed versions, roll back, pin or unpin what TF Serving serves"
    )
    serving.add_argument("action", choices=("list", "rollback", "pin", "unpin"),
                         help="list: versions and labels; rollback [VERSION]: serve VERSION (default: the one "
                              "before what serves now) and keep serving it; pin VERSION: serve only it; unpin: "
                              "serve the newest again")
    serving.add_argument("version", nargs="?", type=int, default=None, help="a version folder's number")
    _add_serving_location(serving)

    data = commands.add_parser(
        "make-data", help="rebuild data/ from the CSV shipped in the tfx wheel, or write synthetic data of any size"
    )
    data.add_argument("--csv", default=None, help="source CSV (default: the one in the tfx wheel)")
    data.add_argument("--out", default=None, help=f"output folder (default {config.DATA_ROOT}; required with --rows)")
    data.add_argument("--rows", type=_positive, default=None,
                      help="write this many synthetic rows (drawn from the CSV with noise; for timing and memory, "
                           "see pipeline/data/synthetic.py) instead of converting the CSV as it is")
    data.add_argument("--spans", type=_positive, default=8, help="with --rows: time-ordered spans to write")
    data.add_argument("--seed", type=int, default=0, help="with --rows: the same seed writes the same bytes")
    return parser


def _ranges(numbers: Sequence[int]) -> str:
    """`1-4, 7, 9-10` for [1, 2, 3, 4, 7, 9, 10]."""
    groups: list = []
    for number in sorted(numbers):
        if groups and number == groups[-1][1] + 1:
            groups[-1][1] = number
        else:
            groups.append([number, number])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in groups)


def _print_report(report: run_state.RunReport, log_path: str) -> None:
    Outcome = run_state.Outcome  # noqa: N806
    lines = []
    if report.note:
        lines.append(report.note)
    elif report.reused_previous_run:
        lines.append("Nothing changed since the last run (same data, code and settings); nothing was run.")
    if report.spans and report.window_size:
        *train, newest = report.spans
        lines.append(f"Spans: trained on {', '.join(map(str, train))}; evaluated on {newest}")
    elif report.spans:
        lines.append(f"Spans: {', '.join(map(str, report.spans))} (hash-split train:eval)")
    if report.span_checks:
        ok = [int(span) for span, found in report.span_checks.items() if not found]
        bad = [f"{span} ({len(found)} finding{'s' if len(found) > 1 else ''})"
               for span, found in report.span_checks.items() if found]
        verdicts = ([f"ok {_ranges(ok)}"] if ok else []) + ([f"rejected {', '.join(bad)}"] if bad else [])
        lines.append(f"Spans checked one by one against the schema: {'; '.join(verdicts)}")
    if report.ignored:
        more = len(report.ignored) - 3
        shown = ", ".join(report.ignored[:3]) + (f" and {more} more" if more > 0 else "")
        lines.append(f"Ignored (not span data, read by nothing; listed in the log): {shown}")
    if report.warm_start:
        lines.append(f"Warm start: {report.warm_start}")
    if report.anomalies:
        lines.append("Data rejected by the schema contract:")
        lines += [f"  {line}" for line in report.anomalies]
    if report.eval_metrics:
        metrics = ", ".join(
            f"{k}={v:.0f}" if k == "example_count" else f"{k}={v:.4f}" for k, v in sorted(report.eval_metrics.items())
        )
        lines.append(f"Eval metrics (overall): {metrics}")
    summary = {
        Outcome.PUSHED: f"Pushed a new model version: {report.pushed_version_dir}",
        Outcome.UP_TO_DATE: f"Up to date; serving {report.pushed_version_dir}",
        Outcome.NOT_BLESSED: "Model trained but NOT blessed; the previous version keeps serving.",
        Outcome.SERVING_CHECK_FAILED: f"Model blessed but it FAILED the serving check ({report.serving_check}); "
                                      "the previous version keeps serving.",
        Outcome.DATA_REJECTED: "Data rejected; nothing was trained or pushed.",
    }[report.outcome]
    if report.stack:
        lines.append(f"Stack {report.stack}")
    lines.append(f"{summary} ({report.seconds:.1f} s, exit {int(report.exit_code)})")
    lines.append(f"Full log: {log_path}")
    if report.page:
        lines.append(f"Report: {report.page}")
    print("\n".join(lines))


def _run_config(args: argparse.Namespace) -> config.RunConfig:
    return config.RunConfig(
        data_root=args.data_root,
        output_root=args.output_root,
        serving_dir=args.serving_dir,
        metadata_mysql=args.metadata_mysql,
        settings=config.Settings(
            keep_versions=args.keep_versions,
            latency_budget_ms=args.latency_budget_ms,
            beam_args=beam_args.command_line(config.local_beam_args(), beam_target(args), tuple(args.beam_args)),
            train=TrainConfig(run_eagerly=args.run_eagerly),
        ),
    ).resolved()


@dataclasses.dataclass
class Ending:
    """How a command ended: the run's report, or the error it stopped on, said last (for
    `--notify` too), after the path of the log that holds its traceback."""

    report: Optional[run_state.RunReport] = None
    error: str = ""
    # The run's log file, or the log `main` writes for a failure it could not foresee.
    log_path: str = ""
    # Whether the error is one the log can tell more of (not a refused argument).
    logged: bool = False

    def fail(self, message: str, logged: bool = False) -> None:
        self.error, self.logged = message, logged or bool(self.log_path)

    def say(self) -> None:
        """The last lines on stderr: where the full log is, then what broke and what to do."""
        if self.logged and self.log_path:
            print(f"Full log: {logs.current_path(self.log_path)}", file=sys.stderr)
        print(f"error: {self.error}", file=sys.stderr)


def _run(args: argparse.Namespace, ending: Ending) -> int:
    """`run` and `retrain`: resolve the config, run, report; exit status by outcome."""
    started = time.perf_counter()
    if not args.verbose:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        # For the processes the run starts (Beam's workers): their Python warnings would
        # go straight to the console; their log records reach the run's log file.
        os.environ.setdefault("PYTHONWARNINGS", "ignore")
    # The config first (it refuses a remote output root before anything is written there),
    # then logging: importing TensorFlow, TFX and their dependencies already logs and warns.
    run_config = _run_config(args)
    log_path = logs.configure(os.path.join(run_config.output_root, "logs"), args.verbose)
    ending.log_path = log_path
    logging.info("Stack %s", compat.describe())

    def run_pipeline(resolved: config.RunConfig, plan: run_state.RunPlan) -> run_state.RunReport:
        logs.import_tensorflow(log_path, args.verbose)
        with speedups.local_runner(speedups.enabled()) as local_runner:
            return local_runner.run(resolved, plan, orchestrator=args.orchestrator, recover=not args.force)

    try:
        with lock.RunLock(run_config.output_root, args.command):
            failures.check_store(run_config.metadata, run_config.output_root, writable=True)
            preflight.check_schema(config.schema_file())
            if args.command == "retrain":
                report = retrain.retrain(run_config, args.window, run_pipeline, force=args.force)
            else:
                plan = run_state.plan(run_config)
                # An unchanged re-run is decided without importing TensorFlow or TFX.
                reuse = plan.previous is not None and not args.force
                report = plan.previous if reuse else run_pipeline(run_config, plan)
    except (spans.DataRootError, spans.WindowError) as err:
        logging.exception("%s failed", args.command)
        ending.fail(str(err))
        return config.ExitCode.ERROR
    except preflight.BadDataError as err:
        logging.exception("%s: data rejected", args.command)
        ending.fail(f"data rejected: {err}")
        ending.report = _rejected_before_the_run(run_config, str(err), started)
        print("Data rejected; nothing was trained or pushed.")
        if ending.report.page:
            print(f"Report: {ending.report.page}")
        return config.ExitCode.DATA_REJECTED
    except lock.LockHeld as err:
        ending.fail(str(err))
        return config.ExitCode.LOCKED
    report.seconds = time.perf_counter() - started
    ending.report = report
    _print_report(report, log_path)
    return report.exit_code


def _rejected_before_the_run(run_config: config.RunConfig, reason: str, started: float) -> run_state.RunReport:
    """The report of a run the record check stopped before the pipeline started (nothing
    in MLMD), with its page."""
    from pipeline.run import local_runner

    report = run_state.RunReport(
        outcome=run_state.Outcome.DATA_REJECTED, anomalies=[reason], stack=compat.describe(),
        run_id=local_runner.new_run_id("rejected"),
        finished=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        seconds=time.perf_counter() - started,
    )
    report.page = local_runner.write_page(run_config, report, recorded=False)
    return report


def _compile(args: argparse.Namespace) -> int:
    from pipeline.cloud import kubeflow_runner

    kfp_config = config.KubeflowConfig(
        image=args.image,
        pipeline_root=args.pipeline_root,
        data_root=args.data_root,
        serving_dir=args.serving_dir,
        notify_url=args.notify,
        settings=config.Settings(
            keep_versions=args.keep_versions,
            latency_budget_ms=args.latency_budget_ms,
            window_size=args.window or None,
            beam_args=beam_args.command_line(config.VERTEX_BEAM_ARGS, beam_target(args), tuple(args.beam_args)),
        ),
    )
    from pipeline.cloud.compiled_fixes import dag_tasks

    tasks = dag_tasks(kubeflow_runner.compile_pipeline(kfp_config, args.output))
    print(f"Wrote {args.output}: {len(tasks)} tasks, image {args.image}")
    return 0


def _schedule(args: argparse.Namespace) -> int:
    from pipeline.cloud import vertex_schedule

    schedule_config = vertex_schedule.ScheduleConfig(
        pipeline_json=args.pipeline_json, cron=args.cron, project=args.project, region=args.region,
        service_account=args.service_account,
    )
    request = vertex_schedule.build_request(schedule_config)
    if args.dry_run:
        print(vertex_schedule.as_json(request))
        return 0
    try:
        name = vertex_schedule.submit(schedule_config, request)
    except vertex_schedule.NoCredentialsError as err:
        raise ValueError(str(err)) from err
    print(f"Created schedule {name} ({args.cron})")
    return 0


def _quiet_libraries() -> None:
    """For the commands that print a result, not a run's progress: no library notices
    on the console (TensorFlow's C++ and Python logs, deprecation notices on import)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    # google-api-core's about Python 3.10, ...
    warnings.simplefilter("ignore", FutureWarning)
    # Their Python loggers keep a level set before they are imported.
    for name in ("tensorflow", "apache_beam"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _make_data(args: argparse.Namespace) -> int:
    _quiet_libraries()
    from pipeline.data import dataset, synthetic

    if args.rows is None:
        report = dataset.convert(args.csv or dataset.default_csv_path(), args.out or config.DATA_ROOT)
        print(report.summary())
        return 0
    if args.out is None:
        # Synthetic rows never replace the real data unless that folder is named.
        raise ValueError("--rows needs --out: the folder to write the synthetic spans to")
    started = time.perf_counter()
    counts = synthetic.write(synthetic.SyntheticConfig(
        rows=args.rows, out_dir=args.out, spans=args.spans, seed=args.seed, csv_path=args.csv or ""
    ))
    print(f"Wrote {sum(counts.values())} synthetic rows in {len(counts)} spans to {args.out} "
          f"({time.perf_counter() - started:.1f} s); see {os.path.join(args.out, synthetic.README_FILE)}")
    return 0


def _records(args: argparse.Namespace) -> int:
    """`report`, `history` and `lineage`: read the metadata store, change nothing."""
    _quiet_libraries()
    defaults = config.RunConfig()
    run_config = config.RunConfig(
        output_root=args.output_root,
        metadata_mysql=args.metadata_mysql,
        serving_dir=getattr(args, "serving_dir", defaults.serving_dir),
        settings=dataclasses.replace(defaults.settings, model_name=getattr(args, "model_name", config.MODEL_NAME)),
    ).resolved()
    metadata, pipeline_name = run_config.metadata, run_config.settings.pipeline_name
    failures.check_store(metadata, run_config.output_root)
    if not metadata.exists():
        raise ValueError(f"no metadata store at {metadata}: no run wrote to --output-root {args.output_root} yet")
    from pipeline.inspect import lineage

    if args.command == "history":
        print(lineage.history(metadata, pipeline_name, args.limit))
    elif args.command == "lineage":
        print(lineage.lineage(metadata, run_config.model_serving_dir, args.version))
    else:
        print(f"Report: {_write_report(run_config.output_root, metadata, pipeline_name, args.run)}")
    return 0


def _write_report(output_root: str, metadata: config.MetadataConfig, pipeline_name: str, run: Optional[str]) -> str:
    from pipeline.inspect import lineage, report_page, run_details, run_report

    store = run_report.connect(metadata)
    known = lineage.run_ids(store)
    matching = [run_id for run_id in known if run is None or run_id.startswith(run)]
    if not matching:
        raise LookupError(f"no run {run!r} in {metadata}" if run else f"no runs in {metadata}")
    if run is not None and len(matching) > 1 and run not in matching:
        raise LookupError(f"{run!r} names {len(matching)} runs: {', '.join(matching[:5])}; give more of the id")
    run_id = run if run in matching else matching[0]
    details = run_details.read(metadata, pipeline_name, run_id)
    return report_page.write(output_root, details)


def _predict(args: argparse.Namespace) -> int:
    _quiet_libraries()
    from pipeline.ops import predict

    started = time.perf_counter()
    model = predict.run(predict.PredictConfig(
        model=args.model, input_glob=args.input, output_dir=args.output, serving_dir=args.serving_dir,
        model_name=args.model_name, csv=args.csv, key_feature=args.key,
        beam_args=beam_args.command_line(config.local_beam_args(), beam_target(args), tuple(args.beam_args)),
    ))
    print(f"Scored {args.input} with {model} into {args.output} ({time.perf_counter() - started:.1f} s)")
    return 0


def _serving(args: argparse.Namespace) -> int:
    _quiet_libraries()
    from pipeline.ops import serving

    print(serving.command(args.serving_dir, args.model_name, args.action, args.version))
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if hasattr(args, "beam"):
        try:
            args.beam_target = beam_target(args)
        except ValueError as err:
            parser.error(str(err))  # exit 2, the usage line then this one
        if args.command != "compile":
            try:
                beam_args.check_reachable(beam_target(args))
            except ValueError as err:
                print(f"error: {err}", file=sys.stderr)
                return config.ExitCode.ERROR
    # Until a run's own log file is set up (or for good, in the other commands), the log
    # is kept in memory: the console gets results and one line per failure, never a
    # traceback, and a failure's log is written out to a file named on the console.
    captured = logs.capture()
    ending = Ending()
    code = config.ExitCode.ERROR
    try:
        code = _dispatch(args, ending)
    finally:
        if ending.error:
            if ending.logged and not ending.log_path:
                ending.log_path = logs.write_failure_log(
                    captured, logs.failure_log_dir(getattr(args, "output_root", "")), args.command
                )
            ending.say()
        if args.command in ("run", "retrain") and args.notify:
            from pipeline.ops import alerts

            outcome = config.ExitCode(int(code)).name.lower().replace("_", " ")
            alerts.send(args.notify, alerts.run_payload(args.command, int(code), ending.report, ending.error, outcome))
    return code


def _metadata_of(args: argparse.Namespace) -> Optional[config.MetadataConfig]:
    """The metadata store a command uses, to name it in a failure; None for the commands
    that use none."""
    if not hasattr(args, "output_root"):
        return None
    path = os.path.join(os.path.abspath(args.output_root), "metadata.sqlite")
    return config.MetadataConfig(path, getattr(args, "metadata_mysql", None))


def _dispatch(args: argparse.Namespace, ending: Ending) -> int:
    try:
        if args.command in ("run", "retrain"):
            if args.no_speedups:
                os.environ[speedups.ENV] = "0"  # one setting, read by the run and the exit
            return _run(args, ending)
        if args.command == "compile":
            return _compile(args)
        if args.command == "schedule":
            return _schedule(args)
        if args.command == "serving":
            return _serving(args)
        if args.command == "predict":
            return _predict(args)
        if args.command == "beam-services":
            _quiet_libraries()
            from pipeline.cloud import beam_services

            beam_services.serve_forever(args.job_port, args.worker_pool_port)
            return 0
        if args.command in ("report", "history", "lineage"):
            return _records(args)
        return _make_data(args)
    except (ValueError, LookupError) as err:
        # Said by this package (or by argument checks), naming what to do; a store found
        # damaged or locked has a log worth reading.
        logging.exception("%s failed", args.command)
        if isinstance(err, LookupError) and err.args:
            message = str(err.args[0])
        else:
            message = failures.explain(err, _metadata_of(args))
        ending.fail(message, logged=isinstance(err, failures.StoreError))
        return config.ExitCode.ERROR
    except Exception as err:  # the last line of defence: one line naming it, exit 1, the traceback in the log
        logging.exception("%s failed", args.command)
        ending.fail(failures.explain(err, _metadata_of(args)), logged=True)
        return config.ExitCode.ERROR


def console_main() -> None:
    """The `taxi-pipeline` command: `main`, then the process exits with its status."""
    code = main()
    speedups.exit_process(int(code), speedups.enabled())


if __name__ == "__main__":
    console_main()
