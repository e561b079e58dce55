"""The command line's shared options: where the metadata store and the serving folder
are, the serving check's budget, and where the Beam work runs (`--beam`). Each command's
own options are defined with its body (`pipeline/*/commands.py`)."""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Dict, List

from components import setting
from components.model.trainer.settings import ExportConfig
from components.support import files
from pipeline import cloud_storage, config
from pipeline.beam import options as beam_options

# The characters that make a path a glob pattern.
GLOB_CHARACTERS = "*?["


def at_least(minimum: float, kind: type = int):
    """An argparse type: a number of `kind` no smaller than `minimum`."""
    def parse(text: str):
        value = kind(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its "invalid ... value" message
    return parse


positive = at_least(1)


def add_setting(group, field: dataclasses.Field) -> None:
    """The flag of one setting (`components.setting`): its name, type, default and help
    from its declaration."""
    if isinstance(field.default, bool):
        group.add_argument(setting.flag(field), action=argparse.BooleanOptionalAction, default=field.default,
                           help=field.metadata["help"])
        return
    kind = type(field.default)
    minimum = field.metadata["minimum"]
    if field.metadata.get("choices"):
        group.add_argument(setting.flag(field), choices=field.metadata["choices"], default=field.default,
                           help=f"{field.metadata['help']} (default: %(default)s)")
        return
    group.add_argument(setting.flag(field), type=kind if minimum is None else at_least(minimum, kind),
                       default=field.default, metavar={int: "N", float: "NUMBER"}.get(kind, "NAME"),
                       help=f"{field.metadata['help']} (default: %(default)s)")


def add_settings(command: argparse.ArgumentParser) -> None:
    """Every setting of `config.Settings` and of its sections (the Trainer's, the export's,
    the blessing's) as a flag: for the commands that build the DAG (`run`, `retrain`,
    `compile`)."""
    group = command.add_argument_group(
        "what the pipeline does", "the same flags locally and in `compile`, where the job's JSON holds them; "
                                  "declared in pipeline/config.py (Settings, EvaluationConfig) and "
                                  "components/model/trainer/settings.py")
    for cls in _setting_classes():
        for field in setting.declared(cls):
            add_setting(group, field)


def _sections() -> Dict[str, type]:
    """The sections of `config.Settings` (its fields whose default is a dataclass), by name."""
    return {field.name: type(field.default) for field in dataclasses.fields(config.Settings)
            if dataclasses.is_dataclass(field.default)}


def _setting_classes() -> List[type]:
    """`config.Settings` and the dataclasses of its sections."""
    return [config.Settings, *_sections().values()]


def _given(args: argparse.Namespace, cls: type) -> dict:
    return {field.name: getattr(args, field.name) for field in setting.declared(cls) if hasattr(args, field.name)}


def add_window(command: argparse.ArgumentParser, *, every_span: bool) -> None:
    """`--window N`: train on the newest N spans; `every_span`: 0 may also be given, for
    every span (`compile`; `retrain` exists to train on the newest)."""
    command.add_argument("--window", type=_window if every_span else at_least(2), default=config.WINDOW_SIZE,
                         metavar="N", help="train on the newest N spans (at least 2), chosen on each run, the newest "
                                           "evaluated on" + ("; 0: every span, hash-split train:eval" if every_span
                                                             else "") + " (default: %(default)s)")


def _window(text: str) -> int:
    value = int(text)
    if value == 1 or value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (every span) or at least 2 spans, got {value}")
    return value


def add_notify(command: argparse.ArgumentParser, *, refused: bool = False) -> None:
    """`--notify` and `--notify-file`; `refused`: `--notify` is declared only to be refused
    with what to do (`compile`, whose JSON would hold the URL)."""
    command.add_argument("--notify", default=None, metavar="URL", help=argparse.SUPPRESS if refused else (
        "POST a JSON summary to this Slack-compatible webhook when the command ends, whatever the outcome (a "
        "failure to notify never changes the exit status); the URL is a credential: prefer --notify-file or "
        f"{config.NOTIFY_URL_ENV}, which keep it out of shell history and ps"))
    if refused:
        return
    command.add_argument("--notify-file", default=None, metavar="PATH",
                         help=f"--notify's URL, read from this file's first line (default: ${config.NOTIFY_URL_ENV})")


def add_dry_run(command: argparse.ArgumentParser, shows: str) -> None:
    command.add_argument("--dry-run", action="store_true", help=f"change nothing: {shows}")


class UsageError(ValueError):
    """A command line that is wrong in a way argparse cannot see (exit `ExitCode.USAGE`)."""


def notify_url(args: argparse.Namespace) -> str:
    """The alert webhook's URL: `--notify`, else `--notify-file`'s first line, else the
    environment's `NOTIFY_URL_ENV`; "" for none. Refused where it is read when an alert
    could not be posted to it (`alerts.url_problem`), naming where it came from and never
    quoting it: UsageError for the options, ValueError for the environment."""
    from pipeline import alerts

    url = _notify_url(args)
    wrong = alerts.url_problem(url) if url else None
    if not wrong:
        return url
    told = "the alert webhook's URL {} is not one an alert can be posted to ({}); it is not shown here: {}"
    if args.notify:
        raise UsageError(told.format("given to --notify", wrong, "give the webhook's URL as its service shows it"))
    if args.notify_file:
        raise UsageError(told.format(f"on the first line of --notify-file {args.notify_file}", wrong,
                                     "write the webhook's URL alone on that line"))
    raise ValueError(told.format(f"in {config.NOTIFY_URL_ENV}", wrong,
                                 f"set {config.NOTIFY_URL_ENV} to the webhook's URL alone (or unset it)"))


def _notify_url(args: argparse.Namespace) -> str:
    if args.notify:
        return args.notify
    path = args.notify_file
    if path:
        if not os.path.isfile(path):
            raise ValueError(f"--notify-file {path} does not exist on this machine: give a file whose first line "
                             "is the webhook URL")
        with open(path, encoding="utf-8", errors="replace") as handle:
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
        settings=dataclasses.replace(defaults.settings, export=dataclasses.replace(
            defaults.settings.export, model_name=getattr(args, "model_name", config.MODEL_NAME))),
    ).resolved()


def _mysql_address(text: str) -> config.MySqlAddress:
    try:
        return config.MySqlAddress.parse(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


def add_metadata_options(command: argparse.ArgumentParser, optional: str = "") -> None:
    """`--output-root` and `--metadata-mysql`; `optional`: neither has a default, and this
    says what giving one does."""
    command.add_argument("--output-root", default=None if optional else config.OUTPUT_ROOT,
                         help=optional or "pipeline root, MLMD and logs")
    command.add_argument("--metadata-mysql", type=_mysql_address, default=None, metavar="HOST:PORT/DB",
                         help=f"keep MLMD in this MySQL/MariaDB database instead of the output root's SQLite file "
                              f"(account from {config.MYSQL_USER_ENV} and {config.MYSQL_PASSWORD_ENV})")


def add_data_root(command: argparse.ArgumentParser, *, remote: bool = False) -> None:
    """`--data-root`; `remote`: required, a location every task of a compiled job reaches."""
    _add_location(command, "--data-root", config.DATA_ROOT, "folder of span-<N>/ folders of GZIP TFRecords",
                  f"gs://BUCKET/... or its Cloud Storage FUSE path {config.FUSE_ROOT}BUCKET/..." if remote else "")


def add_serving_dir(command: argparse.ArgumentParser, *, remote: bool = False) -> None:
    """`--serving-dir`; `remote` as for `add_data_root`, on Cloud Storage itself (see
    `config.KubeflowConfig`)."""
    _add_location(command, "--serving-dir", config.SERVING_DIR,
                  "where blessed models are pushed, a folder per model name", "gs://BUCKET/..." if remote else "")


def _add_location(command: argparse.ArgumentParser, flag: str, default: str, what: str, remote: str) -> None:
    """`remote`: where a compiled job's value may be (the flag is then required), or "" for a local command."""
    where = remote or f"a local folder or gs://... (default: {default})"
    command.add_argument(flag, required=bool(remote), default=None if remote else default, help=f"{what}: {where}")


def add_serving_location(command: argparse.ArgumentParser) -> None:
    """For the commands that read what was pushed: `--serving-dir` and `--model-name`."""
    add_serving_dir(command)
    add_setting(command, _field(ExportConfig, "model_name"))


def _field(cls: type, name: str) -> dataclasses.Field:
    return next(field for field in dataclasses.fields(cls) if field.name == name)


def add_model_version(command: argparse.ArgumentParser) -> None:
    command.add_argument("--model", type=_model_version, default=SERVING, metavar="serving|VERSION",
                         help=f"'{SERVING}': the version TF Serving serves (a pin included), or a version number "
                              f"('{OLD_SERVING}' is read as '{SERVING}')")


SERVING, OLD_SERVING = "serving", "latest"


def _model_version(text: str) -> str:
    if text == OLD_SERVING:
        return SERVING
    if text != SERVING and not text.isdigit():
        raise argparse.ArgumentTypeError(f"must be '{SERVING}' or a version number, got {text!r}")
    return text


def add_beam_options(command: argparse.ArgumentParser, default_help: str) -> None:
    beam = command.add_argument_group(
        "where the Beam work runs", "see pipeline/beam/options.py; options after `--` are passed to Beam last, and win"
    )
    beam.add_argument("--beam", choices=beam_options.KINDS, default="direct",
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
    command.add_argument("beam_args", nargs="*", metavar="BEAM_ARG",
                         help="more Beam options, after `--` (e.g. Dataflow's); they come last, and win")


def beam_target(args: argparse.Namespace) -> beam_options.BeamTarget:
    """The `--beam` flags as a BeamTarget, or ValueError naming what is missing."""
    if getattr(args, "beam_target", None) is not None:
        return args.beam_target
    target = beam_options.target_from(
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
    `compile`): every flag of `add_settings`, the Beam options, and `more`."""
    sections = {name: cls(**_given(args, cls)) for name, cls in _sections().items()}
    return config.Settings(**_given(args, config.Settings), **sections,
                           beam_args=beam_command_line(args, local_beam_args), **more)


def beam_command_line(args: argparse.Namespace, local: tuple) -> tuple:
    """The Beam options a command's work runs with: `local` (this process's), turned by
    `--beam` into another target's, then the options given after `--`."""
    return beam_options.command_line(local, beam_target(args), tuple(args.beam_args))


def require(path: str, option: str, what_to_do: str) -> None:
    """A path the user named (or its default) that must exist: ValueError naming the
    option, the path and what to do when it does not, never an answer as if it were empty."""
    if not files.exists(path):
        raise ValueError(f"{option} {path} does not exist: {what_to_do}")


def require_writable_folder(path: str, option: str) -> None:
    """A local folder a command will write to, checked before the work (and before
    TensorFlow loads) with the words the write would fail with at its end: a file where
    the folder is wanted, a parent that is a file, or no right to write where the folder
    is or would be made. ValueError naming the option, the path and what to do.
    A remote folder's bucket must answer within seconds (`cloud_storage.require_answer`);
    what it holds is checked by the first write."""
    if files.is_remote(path):
        cloud_storage.require_answer(path, option)
        return
    path = os.path.abspath(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"{option} {path} is a file, not a folder: point {option} at a folder (it is made when "
                         "missing), or move the file away")
    existing = path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ValueError(f"{option} {path} cannot be made: {existing} is a file, not a folder: point {option} "
                         "elsewhere, or move the file away")
    if os.statvfs(existing).f_flag & os.ST_RDONLY:
        raise ValueError(f"{option} {path} is on a read-only file system: mount it writable or point {option} at "
                         "another folder, then run again")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"no permission to write {existing} ({option} {path}): give this user write access, or "
                         f"point {option} at another folder, then run again")


def matching(pattern: str, option: str) -> List[str]:
    """The files a glob `pattern` matches, sorted (none: an empty list), once the folder
    it looks in is found to exist; a path without a pattern must exist itself."""
    first = min((pattern.index(c) for c in GLOB_CHARACTERS if c in pattern), default=None)
    if first is None:
        require(pattern, option, "check the path")
    else:
        folder = os.path.dirname(pattern[:first]) or "."
        if not files.exists(folder):
            raise ValueError(f"{option} {pattern}: its folder {folder} does not exist: check the path")
    import tensorflow as tf  # after the checks: a mistyped path is answered without loading it

    return sorted(tf.io.gfile.glob(pattern))


def require_output_root(args: argparse.Namespace) -> bool:
    """For the commands that read a run's records: the output root must exist unless MLMD
    is in MySQL; whether its metadata store exists (False: no run wrote there yet)."""
    if getattr(args, "metadata_mysql", None):
        return True
    require(args.output_root, "--output-root", "name the output root a run wrote to (`run --output-root`)")
    return files.exists(os.path.join(args.output_root, config.METADATA_FILE))


def require_serving_dir(args: argparse.Namespace) -> None:
    require(args.serving_dir, "--serving-dir", "name the folder runs push to (`run --serving-dir`)")
