"""The command line: bad data roots fail fast, before anything heavy is loaded, with a
clear message; every subcommand is named where a user looks for it."""

import argparse
import os
import re
from typing import Dict, Set

import pytest


@pytest.mark.parametrize("command", ["run", "retrain"])
def test_missing_data_root_exits_1_naming_it(workspace, taxi_pipeline, command):
    result = taxi_pipeline(command, *workspace.locations(workspace.root / "nowhere"))
    assert result.returncode == 1
    assert "nowhere does not exist" in result.stderr
    assert not workspace.serving.exists()


def test_data_root_without_spans_exits_1(workspace, taxi_pipeline):
    (workspace.root / "empty" / "notes").mkdir(parents=True)
    result = taxi_pipeline("run", *workspace.locations(workspace.root / "empty"))
    assert result.returncode == 1
    assert "holds no span files" in result.stderr


def test_empty_span_file_is_rejected_with_exit_4_naming_the_file(workspace, taxi_pipeline):
    (workspace.data / "span-1").mkdir(parents=True)
    (workspace.data / "span-1" / "trips.tfrecord.gz").write_bytes(b"")
    result = taxi_pipeline("run", *workspace.locations())
    assert result.returncode == 4
    assert "trips.tfrecord.gz" in result.stderr
    assert not workspace.metadata.exists()


def _subcommand_help() -> Dict[str, str]:
    """Each subcommand `pipeline.cli.parser()` registers, read from the parser itself, with
    the help text `--help` lists it with ("" for one registered without help)."""
    from pipeline import cli

    (subcommands,) = [action for action in cli.parser()._subparsers._group_actions
                      if isinstance(action, argparse._SubParsersAction)]
    helps = {listed.dest: listed.help for listed in subcommands._choices_actions}
    return {name: helps.get(name) or "" for name in subcommands.choices}


def _listed_in_help(text: str) -> Dict[str, str]:
    """The subcommands `--help` lists, a line each (its help text wrapped below it)."""
    listed: Dict[str, str] = {}
    name = None
    for line in text.splitlines():
        entry = re.match(r"    (\S+)(?: +(.*))?$", line)
        if entry:
            name = entry[1]
            listed[name] = entry[2] or ""
        elif name and line.startswith(" " * 5):
            listed[name] += " " + line.strip()
        else:
            name = None
    return listed


def _in_readme_table(readme: str) -> Set[str]:
    """The commands of README's "The commands at a glance" table: each row's first word."""
    section = readme.split("## The commands at a glance", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([a-z][a-z-]*)", section, re.MULTILINE))


def test_every_subcommand_is_named_in_the_module_doc_the_help_and_the_readme(taxi_pipeline, repo):
    """Every subcommand the parser registers has help text, a line of its own in
    `taxi-pipeline --help` with that text, a line in cli.py's module doc and a row in
    README's table; and none of those names a subcommand that is not registered."""
    from pipeline import cli

    registered = _subcommand_help()
    assert not [name for name, text in registered.items() if not text.strip()], "registered without help text"
    result = taxi_pipeline("--help")
    assert result.returncode == 0
    listed = _listed_in_help(result.stdout)
    assert listed.keys() == registered.keys(), result.stdout
    for name, text in registered.items():  # wrapped anywhere, a hyphen's included
        assert "".join(listed[name].split()) == "".join(text.split()), (name, listed[name])
    for name in registered:
        assert f"taxi-pipeline {name} " in cli.__doc__, name
    assert set(re.findall(r"^    taxi-pipeline (\S+) ", cli.__doc__, re.MULTILINE)) == registered.keys()
    in_readme = _in_readme_table((repo / "README.md").read_text())
    assert in_readme == registered.keys(), f"README's table lists {sorted(in_readme)}"


def test_a_remote_output_root_is_refused_naming_why(workspace, copy_spans, taxi_pipeline):
    copy_spans(workspace.data, (16,))
    result = taxi_pipeline("run", "--data-root", str(workspace.data), "--output-root", "gs://bucket/out",
                           "--serving-dir", str(workspace.serving))
    assert result.returncode == 1
    assert "output root must be a local folder" in result.stderr


@pytest.mark.parametrize("where", ["data", "out"])
def test_a_path_with_glob_characters_is_refused_before_anything_is_written(workspace, copy_spans, taxi_pipeline, where):
    data, out = workspace.data, workspace.out
    if where == "data":
        data = workspace.root / "taxi [prod]"
    else:
        out = workspace.root / "out [run 2]"
    copy_spans(data, (15, 16))
    result = taxi_pipeline("run", "--data-root", str(data), "--output-root", str(out),
                           "--serving-dir", str(workspace.serving))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "[ ] in its path" in result.stderr and "glob" in result.stderr
    assert not (out / "metadata.sqlite").exists() and not (workspace.root / "out [run 2]").exists()


def test_a_folder_named_like_a_span_that_is_not_one_is_refused(workspace, copy_spans, taxi_pipeline):
    copy_spans(workspace.data, (16,))
    (workspace.data / "span-old").mkdir()
    result = taxi_pipeline("run", *workspace.locations())
    assert result.returncode == 4
    assert "span-old" in result.stderr and "Rename or move it" in result.stderr


def test_synthetic_rows_are_never_written_to_data_unless_named(taxi_pipeline, repo):
    before = sorted(os.listdir(repo / "data"))
    result = taxi_pipeline("make-data", "--rows", "100")
    assert result.returncode == 1
    assert "--rows needs --out" in result.stderr
    assert sorted(os.listdir(repo / "data")) == before


def test_running_out_of_memory_or_disk_names_the_limit(monkeypatch, capsys):
    import errno

    from pipeline import cli
    from pipeline.data import commands

    def out_of_disk(args, ending):
        raise OSError(errno.ENOSPC, "No space left on device", "/out/pipeline_root/Trainer")

    monkeypatch.setattr(commands, "make_data", out_of_disk)
    assert cli.main(["make-data"]) == 1
    assert "no space left on the device writing /out/pipeline_root/Trainer" in capsys.readouterr().err

    def out_of_memory(args, ending):
        raise MemoryError()

    monkeypatch.setattr(commands, "make_data", out_of_memory)
    assert cli.main(["make-data"]) == 1
    assert "out of memory" in capsys.readouterr().err


@pytest.mark.parametrize("pasted", [" ", "\t", "\u00e9"], ids=["blank", "control", "non-ascii"])
def test_a_badly_pasted_webhook_url_stops_the_command_before_any_work_and_is_never_echoed(
        slice_workspace, taxi_pipeline, pasted):
    ws = slice_workspace
    url = f"https://hooks.example.com/services/T0/s3cr{pasted}3t"
    (ws.root / "webhook").write_text(url + "\n", encoding="utf-8")
    given = taxi_pipeline("run", *ws.locations(), "--notify", url)
    from_file = taxi_pipeline("retrain", *ws.locations(), "--notify-file", str(ws.root / "webhook"))
    from_env = taxi_pipeline("run", *ws.locations(), env={"TAXI_NOTIFY_URL": url})
    assert given.returncode == from_file.returncode == 2
    assert given.stderr.strip().splitlines()[-1].startswith(
        "taxi-pipeline run: error: the alert webhook's URL given to --notify is not one an alert can be posted to")
    assert f"on the first line of --notify-file {ws.root / 'webhook'} is not" in from_file.stderr.splitlines()[-1]
    assert from_env.returncode == 1
    assert from_env.stderr.strip().splitlines()[-1].startswith(
        "error: the alert webhook's URL in TAXI_NOTIFY_URL is not one an alert can be posted to (it holds a")
    logs = [path.read_text() for path in ws.root.rglob("*.log")]
    for told in (given.stdout, given.stderr, from_file.stdout, from_file.stderr, from_env.stdout, from_env.stderr,
                 *logs):
        assert "s3cr" not in told and "Traceback" not in told
    assert not ws.out.exists() or not list(ws.out.rglob("metadata.sqlite"))  # nothing ran


def test_a_signal_a_library_turned_into_an_error_of_its_own_ends_the_command_as_the_signal():
    """Ctrl-C that lands while TensorFlow's C++ code has called back into Python can come
    out of that code as a bare TypeError (under a Keras layer's constructor): the command
    still ends on the signal, with its line and exit status. A TypeError with no signal
    behind it stays a failure."""
    import signal
    import sys

    from pipeline import cli, interrupts
    from pipeline.outcome import Ending, ExitCode

    def turned(args, ending):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            signal.sigtimedwait([], 0)  # let the handler run
        except KeyboardInterrupt:
            raise TypeError from None  # what pybind11 made of it

    def broken(args, ending):
        raise TypeError("not a signal")

    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    finders = list(sys.meta_path)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    interrupts.raise_on_signals()
    try:
        interrupted, failed = Ending(), Ending()
        assert cli._dispatch(argparse.Namespace(command="predict", handler=turned), interrupted) == \
            ExitCode.INTERRUPTED
        assert interrupted.error.startswith("predict was interrupted by Ctrl-C (SIGINT)"), interrupted.error
        assert cli._dispatch(argparse.Namespace(command="predict", handler=broken), failed) == ExitCode.ERROR
        assert "interrupted" not in failed.error and "TypeError" in failed.error, failed.error
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        sys.meta_path[:] = finders
