"""`run`, `retrain` and `gc`: their options, and the body `run` and `retrain` share
(resolve the config, take the output root's lock, check the store and the schema, run or
reuse, report; `retrain` then applies the retention of `pipeline.run.retention`)."""

from __future__ import annotations

import argparse
import datetime
import functools
import logging
import os
import time
from typing import Sequence

from components import compat
from components.support import registry, spans
from pipeline import config, failures, options
from pipeline.beam import options as beam_options
from pipeline.outcome import Ending, ExitCode, Outcome, RunReport
from pipeline.patches import machinery
from pipeline.run import lock, logs, preflight, process, relocation, retrain, run_state, statistics_ahead


def add_run(commands: argparse._SubParsersAction) -> None:
    _add_local_options(commands.add_parser("run", help="run the pipeline end to end on this machine"))


def add_retrain(commands: argparse._SubParsersAction) -> None:
    command = commands.add_parser(
        "retrain", help="for schedulers: train on the newest spans if a new span landed, else do nothing"
    )
    options.add_window(command, every_span=False)
    _add_retention_options(command)
    command.add_argument("--keep-everything", action="store_true",
                         help="no retention after the run: keep every run's artifacts (see `gc`)")
    _add_local_options(command)


def add_gc(commands: argparse._SubParsersAction) -> None:
    command = commands.add_parser(
        "gc", help="remove the artifacts, pages and logs of old runs that nothing served or reused needs "
                   "(MLMD lineage)"
    )
    _add_retention_options(command)
    options.add_dry_run(command, "list what would be removed and its size")
    options.add_metadata_options(command)
    options.add_serving_location(command)
    command.set_defaults(handler=collect, quiet=True)


def _add_retention_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--keep-runs", type=options.positive, default=config.KEEP_RUNS,
                         help="newest runs kept whole; runs behind served versions and the next warm start are "
                              "kept too, whatever their age")


def collect(args: argparse.Namespace, ending: Ending) -> int:
    """`gc`: under the output root's lock, remove what nothing needs (`pipeline.run.retention`)."""
    has_store = options.require_output_root(args)
    resolved = options.located(args)
    # A store missing from an output root that recorded runs is not an empty root.
    failures.check_store(resolved.metadata, resolved.output_root)
    if not (has_store and resolved.metadata.exists()):
        print(f"Nothing to collect: no run wrote to --output-root {args.output_root} yet "
              f"(it holds no {config.METADATA_FILE}).")
        return ExitCode.OK
    try:
        with lock.RunLock(resolved.output_root, "gc"):
            failures.check_store(resolved.metadata, resolved.output_root, writable=not args.dry_run)
            # Before anything is removed: a copy's records would name the original's files.
            # (A dry run changes nothing, and lists what the records name.)
            if not args.dry_run:
                _relocate(resolved, pushes=False)
            from pipeline.run import retention

            found = retention.collect(resolved, args.keep_runs, dry_run=args.dry_run)
    except lock.LockHeld as err:
        ending.fail(str(err))
        return ExitCode.LOCKED
    except relocation.MovedSharedStoreError as err:
        ending.fail(str(err))
        return ExitCode.ERROR
    if args.dry_run:
        listed = [f"  {path}" for path in found.paths]
        print("\n".join(["Would delete:", *listed]) if listed else "Nothing to delete.")
    print(found.summary(args.dry_run))
    return ExitCode.OK


def _add_local_options(command: argparse.ArgumentParser) -> None:
    options.add_data_root(command)
    options.add_metadata_options(command)
    options.add_serving_dir(command)
    command.add_argument("--force", action="store_true", help="run even when nothing changed since the last run")
    command.add_argument("--verbose", action="store_true", help="full TensorFlow/Beam/TFX logs on the console")
    command.add_argument("--orchestrator", choices=config.ORCHESTRATORS, default=config.ORCHESTRATORS[0],
                         help="local: LocalDagRunner, one node after another; beam: BeamDagRunner, "
                              "each node a step of one Beam pipeline")
    command.add_argument("--no-speedups", action="store_true",
                         help=f"run without the library speed-ups of pipeline/patches/ (also {machinery.ENV}=0)")
    options.add_notify(command)
    options.add_settings(command)
    options.add_beam_options(command, "Beam's in-memory engine in this process")
    command.set_defaults(handler=run)


def _set_process_environment(args: argparse.Namespace) -> None:
    """What this process and those it starts read from the environment."""
    if args.no_speedups:
        os.environ[machinery.ENV] = "0"  # one setting, read by the run and the exit
    if not args.verbose:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        # For the processes the run starts (Beam's workers): their Python warnings would
        # go straight to the console; their log records reach the run's log file.
        os.environ.setdefault("PYTHONWARNINGS", "ignore")


def run_config(args: argparse.Namespace) -> config.RunConfig:
    """The resolved config of a `run` or `retrain` command line."""
    return config.RunConfig(
        data_root=args.data_root,
        output_root=args.output_root,
        serving_dir=args.serving_dir,
        metadata_mysql=args.metadata_mysql,
        settings=options.settings(args, beam_options.local_beam_args()),
    ).resolved()


def run(args: argparse.Namespace, ending: Ending) -> int:
    """`run` and `retrain`: resolve the config, run, report; exit status by outcome."""
    started = time.perf_counter()
    _set_process_environment(args)
    # The config first (it refuses a remote output root before anything is written there),
    # then logging: importing TensorFlow, TFX and their dependencies already logs and warns.
    resolved = run_config(args)
    # Where the run writes, checked before the work: found at the push, a serving folder
    # that is a file would cost the whole run.
    options.require_writable_folder(resolved.serving_dir, "--serving-dir")
    options.require_writable_folder(resolved.output_root, "--output-root")
    log_path = logs.configure(os.path.join(resolved.output_root, "logs"), args.verbose)
    ending.log_path = log_path
    logging.info("Stack %s", compat.describe())

    run_pipeline = functools.partial(_run_pipeline, args, log_path)
    retained = ""
    try:
        with lock.RunLock(resolved.output_root, args.command):
            failures.check_store(resolved.metadata, resolved.output_root, writable=True)
            _relocate(resolved)
            preflight.check_schema(config.schema_file())
            if args.command == "retrain":
                report = retrain.retrain(resolved, args.window, run_pipeline, force=args.force)
                if not (args.keep_everything or report.acknowledged):
                    retained = _retain(resolved, args.keep_runs)
            else:
                plan = run_state.plan(resolved)
                # An unchanged re-run is decided without importing TensorFlow or TFX.
                reuse = plan.previous is not None and not args.force
                report = plan.previous if reuse else run_pipeline(resolved, plan)
    except (spans.DataRootError, spans.WindowError, relocation.MovedSharedStoreError) as err:
        logging.exception("%s failed", args.command)
        ending.fail(str(err))
        return ExitCode.ERROR
    except preflight.BadDataError as err:
        logging.exception("%s: data rejected", args.command)
        ending.fail(f"data rejected: {err}")
        ending.report = _rejected_before_the_run(resolved, str(err), started)
        print("Data rejected; nothing was trained or pushed.")
        if ending.report.page:
            print(f"Report: {ending.report.page}")
        return ExitCode.DATA_REJECTED
    except lock.LockHeld as err:
        ending.fail(str(err))
        return ExitCode.LOCKED
    report.seconds = time.perf_counter() - started
    ending.report = report
    print(summary(report, log_path))
    if retained:
        print(retained)
    return report.exit_code


def _run_pipeline(args: argparse.Namespace, log_path: str, run_with: config.RunConfig,
                  plan: run_state.RunPlan) -> RunReport:
    """One run of the pipeline in this process: the data gate's statistics started in a
    process of their own, the heavy imports, the record check beside TFX's, the run."""
    with statistics_ahead.started(run_with) as ahead:  # its imports beside this process's
        with process.frozen_imports(machinery.enabled()):
            logs.import_tensorflow(log_path, args.verbose)
        record_check = preflight.start_check(plan.files)  # beside TFX's imports
        with process.local_runner(machinery.enabled()) as local_runner:
            return local_runner.run(run_with, plan, orchestrator=args.orchestrator, recover=not args.force,
                                    page_later=process.can_detach(), record_check=record_check,
                                    command=args.command, notify_url=args.notify or "", ahead=ahead)


def _relocate(resolved: config.RunConfig, pushes: bool = True) -> None:
    """The records of a moved or copied output root made to point here, said on the console."""
    for line in relocation.relocate(resolved, pushes):
        logging.warning("%s", line)
        print(line)


def _retain(resolved: config.RunConfig, keep_runs: int) -> str:
    """Retention after a retrain that ran, and its line for the console: a failure is
    said, and never changes the run's exit status (its decision stands; `gc` can retry)."""
    from pipeline.run import retention

    try:
        found = retention.collect(resolved, keep_runs)
    except Exception as err:  # the run's outcome stands whatever retention does
        logging.exception("retention after the run failed")
        return (f"warning: retention failed ({failures.explain(err, resolved.metadata)}); "
                "the run's result stands; run `taxi-pipeline gc` to retry")
    logging.info("%s", found.summary(dry_run=False))
    if not found.removed_runs:
        return ""
    return (f"Retention: removed {len(found.removed_runs)} old run(s) ({retention.size_text(found.bytes)}); "
            f"kept {len(found.kept_runs)} (taxi-pipeline gc --dry-run says why)")


def _rejected_before_the_run(resolved: config.RunConfig, reason: str, started: float) -> RunReport:
    """The report of a run the record check stopped before the pipeline started (nothing
    in MLMD), with its page."""
    from pipeline.run import local_runner

    report = RunReport(
        outcome=Outcome.DATA_REJECTED, anomalies=[reason], stack=compat.describe(),
        run_id=local_runner.new_run_id("rejected"),
        finished=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        seconds=time.perf_counter() - started,
    )
    report.page = local_runner.write_page(resolved, report, recorded=False)
    return report


def _ranges(numbers: Sequence[int]) -> str:
    """`1-4, 7, 9-10` for [1, 2, 3, 4, 7, 9, 10]."""
    groups: list = []
    for number in sorted(numbers):
        if groups and number == groups[-1][1] + 1:
            groups[-1][1] = number
        else:
            groups.append([number, number])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in groups)


_OUTCOME_LINES = {
    Outcome.PUSHED: "Pushed a new model version: {report.pushed_version_dir}{pinned}",
    Outcome.UP_TO_DATE: "Up to date; serving {report.pushed_version_dir}",
    Outcome.NOT_BLESSED: "Model trained but NOT blessed ({missed}); {kept}.",
    Outcome.SERVING_CHECK_FAILED: "Model blessed but it FAILED the serving check ({report.serving_check}); {kept}.",
    Outcome.DATA_REJECTED: "Data rejected; nothing was trained or pushed.",
    Outcome.AWAITING_APPROVAL: "Model passed every check and awaits approval: {report.pushed_version_dir} "
                               "(`taxi-pipeline serving approve {version}`, or `serving reject {version} --note WHY`); "
                               "{kept}.",
    Outcome.REJECTED: "A person rejected the model of these inputs; nothing was trained.",
    Outcome.SHADOW_REFUSED: "Model passed the serving check but the shadow check REFUSED it ({report.shadow_check}); "
                            "{kept}.",
}


def _outcome_line(report: RunReport) -> str:
    """The outcome's line: what serves now, said as the run found it."""
    pinned = (f"; version {report.pinned_to} keeps serving, pinned (`taxi-pipeline serving unpin` serves the newest)"
              if report.pinned_to else "")
    missed = "; ".join(report.missed) or "the run's page says which threshold it missed"
    return _OUTCOME_LINES[report.outcome].format(report=report, version=report.pushed_version or "VERSION",
                                                 kept=report.kept_serving, pinned=pinned, missed=missed)


def summary(report: RunReport, log_path: str) -> str:
    """What the console shows when a run ended: spans, checks, metrics, the outcome, where
    the log and the page are."""
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
    # What a run started from: a run that reused an earlier one's decision started nothing
    # (the earlier run's page says what it started from).
    if report.baseline and not report.reused_previous_run:
        lines.append("Baseline (warm start and comparison): " + (
            "none, no version served when the run started" if report.baseline == registry.NOTHING_SERVES
            else f"version {report.baseline}, which served when the run started"))
    if report.warm_start and not report.reused_previous_run:
        lines.append(f"Warm start: {report.warm_start}")
    if report.anomalies:
        lines.append("Data rejected by the schema contract:")
        lines += [f"  {line}" for line in report.anomalies]
    if report.eval_metrics:
        metrics = ", ".join(
            f"{k}={v:.0f}" if k == "example_count" else f"{k}={v:.4f}" for k, v in sorted(report.eval_metrics.items())
        )
        lines.append(f"Eval metrics (overall): {metrics}")
    if report.stack:
        lines.append(f"Stack {report.stack}")
    if report.held:
        lines.append(f"Held for approval: {report.held}")
    lines.append(f"{_outcome_line(report)} ({report.seconds:.1f} s, exit {int(report.exit_code)})")
    lines.append(f"Full log: {log_path}")
    if report.page:
        lines.append(f"Report: {report.page}")
    return "\n".join(lines)
