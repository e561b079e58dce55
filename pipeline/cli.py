"""`taxi-pipeline`: the command line of the pipeline.

    taxi-pipeline run        the pipeline end to end on this machine (LocalDagRunner, or
                             BeamDagRunner with --orchestrator beam); does nothing when
                             nothing changed since the last run
    taxi-pipeline retrain    for schedulers: train on the newest --window spans when a new
                             span landed, else do nothing
    taxi-pipeline compile    write the PipelineJob JSON for Kubeflow Pipelines v2 / Vertex AI
                             (with --target kubeflow, the pipeline spec YAML for Kubeflow Pipelines)
    taxi-pipeline schedule   create a Vertex AI schedule that runs the compiled JSON
    taxi-pipeline make-data  rebuild data/ from the CSV shipped in the tfx wheel, or write
                             synthetic data of any size (--rows N --out DIR)
    taxi-pipeline report     re-render a past run's HTML page from the metadata store
    taxi-pipeline history    the recent runs: when, spans, outcome, metrics, pushed version
    taxi-pipeline lineage    where a served model version came from: data, executions, evaluation
    taxi-pipeline predict    batch scoring of tf.Example TFRecords with a pushed model (Beam)
    taxi-pipeline monitor    logged serving traffic against the training data of the version
                             that served it (TFDV skew and schema checks); exit 4 on a finding
    taxi-pipeline serving    list | card [VERSION] | rollback [VERSION] | pin VERSION | unpin: which version
                             TF Serving serves (its models.config), never deleting one;
                             approve VERSION | reject VERSION --note WHY: a person's decision
                             on a version awaiting approval
    taxi-pipeline gc         remove what no kept run, served version or next run needs:
                             old runs' artifacts, pages and logs (MLMD lineage)
    taxi-pipeline beam-services  Beam's job service and a worker pool on this machine, for
                             `--beam portable` (run, retrain and predict take `--beam`)

Exit status: `pipeline.outcome.ExitCode`, and README's "Exit status" table.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from typing import ContextManager, Optional, Sequence

from pipeline import cloud_storage, config, failures, interrupts, options, patches
from pipeline.beam import services as beam_services
from pipeline.cloud import commands as cloud_commands
from pipeline.data import commands as data_commands
from pipeline.inspect import commands as inspect_commands
from pipeline.ops import commands as ops_commands
from pipeline.outcome import Ending, ExitCode
from pipeline.patches import machinery
from pipeline.run import commands as run_commands
from pipeline.run import logs, process

# The subcommands, in the order `--help` lists them; each module holds their options and bodies.
SUBCOMMANDS = (
    run_commands.add_run, run_commands.add_retrain, cloud_commands.add_compile, cloud_commands.add_schedule,
    inspect_commands.add_report, inspect_commands.add_history, inspect_commands.add_lineage,
    ops_commands.add_predict, ops_commands.add_monitor, cloud_commands.add_beam_services, ops_commands.add_serving,
    data_commands.add_make_data, run_commands.add_gc,
)


def parser() -> argparse.ArgumentParser:
    command_line = argparse.ArgumentParser(prog="taxi-pipeline", description=__doc__.split("\n\n")[0])
    commands = command_line.add_subparsers(dest="command", required=True)
    for add in SUBCOMMANDS:
        add(commands)
    return command_line


def main(argv: Optional[Sequence[str]] = None) -> int:
    command_line = parser()
    args = command_line.parse_args(argv)
    if hasattr(args, "beam"):
        try:
            args.beam_target = options.beam_target(args)
        except ValueError as err:
            command_line.error(str(err))  # ExitCode.USAGE, the usage line then this one
        if args.command != "compile":
            try:
                beam_services.check_reachable(args.beam_target)
            except ValueError as err:
                print(f"error: {err}", file=sys.stderr)
                return ExitCode.ERROR
    # Until a run's own log file is set up (or for good, in the other commands), the log
    # is kept in memory: the console gets results and one line per failure, never a
    # traceback, and a failure's log is written out to a file named on the console.
    captured = logs.capture()
    ending = Ending()
    code = ExitCode.ERROR
    try:
        code = _dispatch(args, ending)
    finally:
        if ending.error:
            if ending.logged and not ending.log_path:
                ending.log_path = logs.write_failure_log(
                    captured, logs.failure_log_dir(getattr(args, "output_root", "")), args.command
                )
            elif ending.log_path:
                ending.log_path = logs.current_path(ending.log_path)
            ending.say()
        if args.command in ("run", "retrain") and args.notify:
            from pipeline import alerts

            outcome = ExitCode(int(code)).name.lower().replace("_", " ")
            alerts.send(args.notify, alerts.run_payload(args.command, int(code), ending.report, ending.error, outcome))
    return code


def _metadata_of(args: argparse.Namespace) -> Optional[config.MetadataConfig]:
    """The metadata store a command uses, to name it in a failure; None for the commands
    that use none."""
    if getattr(args, "output_root", None) is None:  # none, or an optional one not given
        return None
    path = os.path.join(os.path.abspath(args.output_root), config.METADATA_FILE)
    return config.MetadataConfig(path, getattr(args, "metadata_mysql", None))


def _watched(args: argparse.Namespace) -> ContextManager:
    """A MySQL store that stops answering would hold a command in a query for good (MLMD's
    client has no read timeout): the commands that read or write one are watched as a run
    is (`pipeline/run/watch.py`), `run` and `retrain` by their own watch, which also
    greets Beam's services."""
    mysql = getattr(args, "metadata_mysql", None)
    if mysql is None:
        return contextlib.nullcontext()
    from pipeline.run import watch

    if args.command in watch.RUNS:
        return contextlib.nullcontext()
    return watch.watching(config.MetadataConfig("", mysql), (), "", args.command, getattr(args, "notify", "") or "")


def _dispatch(args: argparse.Namespace, ending: Ending) -> int:
    interrupts.begin()
    try:
        if getattr(args, "quiet", False):
            logs.quiet_libraries()
        if hasattr(args, "notify") and args.command != "compile":
            # `compile` refuses a URL (pipeline.cloud.commands): the JSON would hold it.
            given, args.notify = args.notify, None  # a URL refused is never posted to
            args.notify = options.notify_url(argparse.Namespace(**{**vars(args), "notify": given}))
        with _watched(args):
            return args.handler(args, ending)
    except (KeyboardInterrupt, interrupts.Terminated) as err:
        return _interrupted(err, args, ending)
    except options.UsageError as err:
        print(f"taxi-pipeline {args.command}: error: {err}", file=sys.stderr)
        return ExitCode.USAGE
    except Exception as err:
        if interrupts.raised() is not None:  # the signal, come out of a library as an error of its own
            return _interrupted(interrupts.raised(), args, ending)
        logging.exception("%s failed", args.command)
        if isinstance(err, LookupError) and err.args:
            message = str(err.args[0])
        else:
            message = failures.explain(err, _metadata_of(args))
        # A ValueError or LookupError is said by this package (or by argument checks), naming
        # what to do; its log is worth reading for a store found damaged or locked. Anything
        # else meets the last line of defence: one line naming it, the traceback in the log.
        foreseen = isinstance(err, (ValueError, LookupError))
        ending.fail(message, logged=isinstance(err, failures.StoreError) or not foreseen)
        return ExitCode.ERROR


def _interrupted(interrupt: BaseException, args: argparse.Namespace, ending: Ending) -> int:
    """A command a signal ended: the line that says where, its exit status, the traceback
    (of whatever the signal surfaced as) in the log."""
    interrupts.ignore()
    logging.warning("%s was interrupted", args.command, exc_info=True)
    ending.fail(interrupts.message(interrupt, args.command, logs.PROGRESS.running, logs.PROGRESS.finished),
                logged=True)
    return interrupts.exit_code(interrupt)


def console_main() -> None:
    """The `taxi-pipeline` command: `main`, then the process exits with its status."""
    process.ends_with_exit_process()
    patches.defer_imports()
    interrupts.raise_on_signals()
    cloud_storage.bound()
    try:
        code = main()
    except (KeyboardInterrupt, interrupts.Terminated) as err:  # outside a command's body: checks, the alert
        interrupts.ignore()
        print(f"error: {interrupts.message(err, sys.argv[1] if len(sys.argv) > 1 else 'taxi-pipeline')}",
              file=sys.stderr)
        code = interrupts.exit_code(err)
    process.exit_process(int(code), machinery.enabled())


if __name__ == "__main__":
    console_main()
