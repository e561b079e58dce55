"""The command line's shared options: where the metadata store and the serving folder
are, the serving check's budget, and where the Beam work runs (`--beam`). Each command's
own options are defined with its body (`pipeline/*/commands.py`)."""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import List

from components.support import spans
from pipeline import beam_args, config

# The characters that make a path a glob pattern.
GLOB_CHARACTERS = "*?["


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_latency_budget(command: argparse.ArgumentParser) -> None:
    command.add_argument("--latency-budget-ms", type=float, default=config.Settings().latency_budget_ms,
                         help="the serving check's p99 budget for a single-example request; over it, the model "
                              "is not pushed (exit 6)")


def add_notify(command: argparse.ArgumentParser) -> None:
    command.add_argument("--notify", default=None, metavar="URL",
                         help="POST a JSON summary to this Slack-compatible webhook when the command ends, "
                              "whatever the outcome (a failure to notify never changes the exit status); the URL "
                              f"is a credential: prefer --notify-file or {config.NOTIFY_URL_ENV}, which keep it "
                              "out of shell history and ps")
    command.add_argument("--notify-file", default=None, metavar="PATH",
                         help=f"--notify's URL, read from this file's first line (default: ${config.NOTIFY_URL_ENV})")


def notify_url(args: argparse.Namespace) -> str:
    """The alert webhook's URL: `--notify`, else `--notify-file`'s first line, else the
    environment's `NOTIFY_URL_ENV`; "" for none. ValueError, not quoting it, when it is
    not an http(s) URL."""
    url = _notify_url(args)
    if url and not url.startswith(("https://", "http://")):
        raise ValueError("the alert webhook's URL (--notify, --notify-file or "
                         f"{config.NOTIFY_URL_ENV}) must start with https:// or http://; it is not shown here")
    return url


def _notify_url(args: argparse.Namespace) -> str:
    if args.notify:
        return args.notify
    path = args.notify_file
    if path:
        if not os.path.isfile(path):
            raise ValueError(f"--notify-file {path} does not exist on this machine: give a file whose first line "
                             "is the webhook URL")
        with open(path) as handle:
            url = handle.readline().strip()
        if not url:
            raise ValueError(f"--notify-file {path} is empty: write the webhook URL on its first line")
        return url
    return os.environ.get(config.NOTIFY_URL_ENV, "").strip()


def located(args: argparse.Namespace) -> config.RunConfig:
    """The output root, metadata store and serving folder a command's options name, resolved."""
    defaults = config.RunConfig()
    return config.RunConfig(
        output_root=args.output_root,
        metadata_mysql=args.metadata_mysql,
        serving_dir=getattr(args, "serving_dir", defaults.serving_dir),
        settings=dataclasses.replace(defaults.settings, model_name=getattr(args, "model_name", config.MODEL_NAME)),
    ).resolved()


def _mysql_address(text: str) -> config.MySqlAddress:
    try:
        return config.MySqlAddress.parse(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


def add_metadata_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--output-root", default=config.OUTPUT_ROOT, help="pipeline root, MLMD and logs")
    command.add_argument("--metadata-mysql", type=_mysql_address, default=None, metavar="HOST:PORT/DB",
                         help=f"keep MLMD in this MySQL/MariaDB database instead of the output root's SQLite file "
                              f"(account from {config.MYSQL_USER_ENV} and {config.MYSQL_PASSWORD_ENV})")


def add_serving_location(command: argparse.ArgumentParser) -> None:
    command.add_argument("--serving-dir", default=config.SERVING_DIR, help="where blessed models are pushed")
    command.add_argument("--model-name", default=config.MODEL_NAME, help="the model's folder under --serving-dir")


def add_beam_options(command: argparse.ArgumentParser, default_help: str) -> None:
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


def settings(args: argparse.Namespace, local_beam_args: tuple, **more) -> config.Settings:
    """The pipeline's settings from a command line that builds the DAG (`run`, `retrain`,
    `compile`): the versions kept, the serving check's budget, the Beam options, and `more`."""
    return config.Settings(
        keep_versions=args.keep_versions,
        latency_budget_ms=args.latency_budget_ms,
        beam_args=beam_command_line(args, local_beam_args),
        **more,
    )


def beam_command_line(args: argparse.Namespace, local: tuple) -> tuple:
    """The Beam options a command's work runs with: `local` (this process's), turned by
    `--beam` into another target's, then the options given after `--`."""
    return beam_args.command_line(local, beam_target(args), tuple(args.beam_args))


def exists(path: str) -> bool:
    """Whether `path` (local or gs://) exists."""
    if spans.is_remote(path):
        import tensorflow as tf

        return tf.io.gfile.exists(path)
    return os.path.exists(path)


def require(path: str, option: str, what_to_do: str) -> None:
    """A path the user named (or its default) that must exist: ValueError naming the
    option, the path and what to do when it does not, never an answer as if it were empty."""
    if not exists(path):
        raise ValueError(f"{option} {path} does not exist: {what_to_do}")


def matching(pattern: str, option: str) -> List[str]:
    """The files a glob `pattern` matches, sorted (none: an empty list), once the folder
    it looks in is found to exist; a path without a pattern must exist itself."""
    import tensorflow as tf

    first = min((pattern.index(c) for c in GLOB_CHARACTERS if c in pattern), default=None)
    if first is None:
        require(pattern, option, "check the path")
    else:
        folder = os.path.dirname(pattern[:first]) or "."
        if not exists(folder):
            raise ValueError(f"{option} {pattern}: its folder {folder} does not exist: check the path")
    return sorted(tf.io.gfile.glob(pattern))


def require_output_root(args: argparse.Namespace) -> bool:
    """For the commands that read a run's records: the output root must exist unless MLMD
    is in MySQL; whether its metadata store exists (False: no run wrote there yet)."""
    if getattr(args, "metadata_mysql", None):
        return True
    require(args.output_root, "--output-root", "name the output root a run wrote to (`run --output-root`)")
    return exists(os.path.join(args.output_root, config.METADATA_FILE))


def require_serving_dir(args: argparse.Namespace) -> None:
    require(args.serving_dir, "--serving-dir", "name the folder runs push to (`run --serving-dir`)")
