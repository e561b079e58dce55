"""The failure catalogue (docs/operations.md, "When a command fails"), each row through
the command line in a subprocess: its exit status, its last line (what broke, where, what
to do; no traceback, no bytes, no SQL), and that nothing already good changed: the served
versions' files, `models.config`, the metadata store and the last run's record."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest

from pipeline import config
from tests.conftest import RUN_TIMEOUT_SECONDS

pytestmark = pytest.mark.slow


def last_line(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    return lines[-1] if lines else ""


def assert_one_clear_line(result: subprocess.CompletedProcess, code: int, starts: str) -> str:
    """The exit status, and a last line that starts with `starts` and carries no traceback."""
    assert result.returncode == code, result.stdout + result.stderr
    line = last_line(result)
    assert line.startswith(f"error: {starts}"), result.stderr
    assert "Traceback" not in result.stderr + result.stdout and "b'" not in line and "CREATE TABLE" not in line
    return line


def full_log(result: subprocess.CompletedProcess) -> str:
    """The text of the log file the failure named (its traceback is there)."""
    (named,) = [line for line in result.stderr.splitlines() if line.startswith("Full log: ")]
    return Path(named[len("Full log: "):]).read_text()


@contextlib.contextmanager
def tmpfs(path: Path, size_kb: int, read_only: bool = False, fill_from: Path | None = None):
    """A small file system mounted at `path` (a full disk, a read-only one), holding a copy
    of `fill_from`; skips the test where this user cannot mount."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(path)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}): run the suite as root")
    try:
        if fill_from is not None:
            shutil.copytree(fill_from, path, dirs_exist_ok=True)
        if read_only:
            subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True)
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


# -- The metadata store ------------------------------------------------------------------


def _damage(ws):
    ws.metadata.write_bytes(os.urandom(64 * 1024))


def _remove(ws):
    ws.metadata.unlink()


STORE_PROBLEMS = {
    "damaged": (_damage, "the metadata store {store} is damaged (not a readable SQLite database): restore it"),
    "missing": (_remove, "the metadata store {store} is missing, though this output root recorded runs"),
}


@pytest.mark.parametrize("problem", sorted(STORE_PROBLEMS))
def test_a_damaged_or_missing_sqlite_store_stops_every_command_naming_it(copy_of_finished_run, taxi_pipeline,
                                                                         problem):
    ws = copy_of_finished_run
    spoil, expected = STORE_PROBLEMS[problem]
    spoil(ws)
    before = ws.good_state()
    version = ws.versions()[-1]
    for command in (("run", *ws.locations()), ("retrain", *ws.locations()), ("history", "--output-root", str(ws.out)),
                    ("report", "--output-root", str(ws.out)),
                    ("lineage", version, "--output-root", str(ws.out), "--serving-dir", str(ws.serving))):
        result = taxi_pipeline(*command)
        line = assert_one_clear_line(result, 1, expected.format(store=ws.metadata))
        assert "Nothing that was serving changed." in line
        assert "Traceback" in full_log(result)
        assert ws.good_state() == before, command


def test_a_locked_sqlite_store_costs_seconds_and_says_who_to_ask(copy_of_finished_run, taxi_pipeline):
    ws = copy_of_finished_run
    before = ws.good_state()
    holder = sqlite3.connect(ws.metadata, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # a sqlite3 shell or a backup in the middle of a transaction
    try:
        started = time.monotonic()
        result = taxi_pipeline("run", *ws.locations())
        seconds = time.monotonic() - started
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert_one_clear_line(result, 1, f"the metadata store {ws.metadata} is locked by another program")
    assert seconds < 30, seconds  # 5 s of waiting, the rest start-up
    assert ws.good_state() == before
    assert taxi_pipeline("run", *ws.locations()).returncode == 0  # free again: up to date


@pytest.fixture
def silent_server():
    """A TCP server on 127.0.0.1 that accepts connections and never says a word."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held = []

    def accept():
        with contextlib.suppress(OSError):
            while True:
                held.append(server.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1]
    server.close()
    for connection in held:
        connection.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("server", ["refusing", "silent"])
def test_an_unreachable_mysql_store_costs_seconds(copy_of_finished_run, taxi_pipeline, silent_server, server):
    ws = copy_of_finished_run
    before = ws.good_state()
    port = silent_server if server == "silent" else _free_port()
    account = {config.MYSQL_USER_ENV: "mlmd", config.MYSQL_PASSWORD_ENV: "secret"}
    address = f"127.0.0.1:{port}/mlmd"
    why = "no answer within 5 s" if server == "silent" else "Connection refused"
    for command in (("run", *ws.locations()), ("history", "--output-root", str(ws.out))):
        started = time.monotonic()
        result = taxi_pipeline(*command, "--metadata-mysql", address, env=account)
        assert time.monotonic() - started < 30
        line = assert_one_clear_line(result, 1, f"the metadata store mysql://{address} cannot be used ({why})")
        assert "start the server or fix --metadata-mysql" in line and "secret" not in result.stderr
    assert ws.good_state() == before


# -- Disks: full, read-only, the temporary folder ----------------------------------------------


def test_a_full_serving_folder_keeps_every_served_version_whole(copy_of_finished_run, taxi_pipeline, tmp_path):
    ws = copy_of_finished_run
    used_kb = sum(p.stat().st_size for p in ws.serving.rglob("*") if p.is_file()) // 1024
    with tmpfs(tmp_path / "small-disk", used_kb + 256, fill_from=ws.serving) as serving:
        locations = ["--data-root", str(ws.data), "--output-root", str(ws.out), "--serving-dir", str(serving)]
        served = {str(p.relative_to(serving)): p.read_bytes() for p in serving.rglob("*") if p.is_file()}
        # Nothing changed but --force: the run trains and blesses again; the copy cannot fit.
        result = taxi_pipeline("run", *locations, "--force")
        line = assert_one_clear_line(result, 1, f"no space left on the device writing {serving}/big_tip/.staging-")
        assert "free space under the output root, the serving folder and the temporary folder" in line
        assert {str(p.relative_to(serving)): p.read_bytes() for p in serving.rglob("*") if p.is_file()} == served
        assert not list((serving / "big_tip").glob(".staging-*"))  # the partial copy is gone


def test_a_read_only_output_root_or_serving_folder_is_named(copy_of_finished_run, taxi_pipeline, tmp_path):
    ws = copy_of_finished_run
    with tmpfs(tmp_path / "read-only", 64 * 1024, read_only=True, fill_from=ws.out) as out:
        before = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}
        result = taxi_pipeline("run", "--data-root", str(ws.data), "--output-root", str(out),
                               "--serving-dir", str(ws.serving), env={"XDG_STATE_HOME": str(tmp_path / "state")})
        line = assert_one_clear_line(result, 1, f"{out}/logs/run-")
        assert "is on a read-only file system: mount it writable or point the command at another folder" in line
        assert "Full log: " + str(tmp_path / "state") in result.stderr, line  # the log went where it could
        assert {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    with tmpfs(tmp_path / "read-only-serving", 64 * 1024, read_only=True, fill_from=ws.serving) as serving:
        before = {str(p.relative_to(serving)): p.read_bytes() for p in serving.rglob("*") if p.is_file()}
        pinned = taxi_pipeline("serving", "pin", ws.versions()[0], "--serving-dir", str(serving))
        line = assert_one_clear_line(pinned, 1, f"{serving}/big_tip/.push.lock is on a read-only file system")
        assert {str(p.relative_to(serving)): p.read_bytes() for p in serving.rglob("*") if p.is_file()} == before


def test_a_full_temporary_folder_is_not_needed(copy_of_finished_run, taxi_pipeline, tmp_path):
    """Every temporary file of a run and of `predict` lives under the output root or
    beside the output folder, not in TMPDIR."""
    ws = copy_of_finished_run
    with tmpfs(tmp_path / "tmp", 64) as tmp:
        (tmp / "filler").write_bytes(b"\0" * (64 * 1024 - 4096))
        env = {"TMPDIR": str(tmp)}
        scored = taxi_pipeline("predict", "--input", str(ws.data / "span-16" / "*"), "--output",
                               str(tmp_path / "scores"), "--serving-dir", str(ws.serving), env=env)
        assert scored.returncode == 0, scored.stderr
        assert taxi_pipeline("run", *ws.locations(), env=env).returncode == 0


# -- Data and contract ------------------------------------------------------------------------


def test_a_data_root_that_disappears_mid_run_is_named(copy_of_finished_run, cli_argv, tmp_path):
    ws = copy_of_finished_run
    shutil.copytree(ws.data / "span-16", ws.data / "span-17")  # new data: the run ingests it
    before = ws.good_state()
    process = subprocess.Popen(cli_argv("run", *ws.locations()), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        for line in process.stdout:
            if "ImportExampleGen" in line:  # ingested: later steps read the data root again
                shutil.rmtree(ws.data)
                break
        stdout, stderr = process.communicate(timeout=RUN_TIMEOUT_SECONDS)
    finally:
        process.kill()
    result = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    line = assert_one_clear_line(result, 1, f"data root {ws.data} does not exist or is not a folder (moved, deleted")
    assert "Traceback" in full_log(result)
    after = ws.good_state()
    assert {k: v for k, v in after.items() if "metadata" not in k and "last_run" not in k} == {
        k: v for k, v in before.items() if "metadata" not in k and "last_run" not in k}
    assert after[str((ws.out / "last_run.json").relative_to(ws.root))] == before[
        str((ws.out / "last_run.json").relative_to(ws.root))]


def test_a_schema_missing_or_unparseable_stops_the_run_before_it_starts(copy_of_finished_run, project_copy):
    ws = copy_of_finished_run
    before = ws.good_state()
    schema = project_copy.path / "components" / "schema" / "schema.pbtxt"
    schema.write_text(schema.read_text().replace("feature {", "feature {{", 1))
    broken = project_copy("run", *ws.locations())
    line = assert_one_clear_line(broken, 1, f"the schema {schema} does not parse: ")
    assert "6:10 : 'feature {{': Expected identifier" in line and "fix that line (or undo the edit)" in line
    schema.unlink()
    missing = project_copy("run", *ws.locations())
    assert_one_clear_line(missing, 1, f"the schema {schema} cannot be read (No such file or directory): restore it")
    assert ws.good_state() == before


# -- predict, serving, lineage, report, compile, make-data ---------------------------------


def _truncated_copy(source_dir: Path, target: Path) -> None:
    (source,) = list(source_dir.iterdir())
    target.write_bytes(source.read_bytes()[:3000])  # cut between records: readers stop there silently


def test_predict_names_the_truncated_input_and_writes_nothing(copy_of_finished_run, taxi_pipeline, tmp_path):
    ws = copy_of_finished_run
    inputs = tmp_path / "in"
    inputs.mkdir()
    shutil.copy(next((ws.data / "span-15").iterdir()), inputs / "a.tfrecord.gz")
    _truncated_copy(ws.data / "span-16", inputs / "b.tfrecord.gz")
    before = ws.good_state()
    result = taxi_pipeline("predict", "--input", str(inputs / "*"), "--output", str(tmp_path / "scores"),
                           "--serving-dir", str(ws.serving))
    assert_one_clear_line(result, 1, f"input file {inputs / 'b.tfrecord.gz'} is truncated: its GZIP stream ends "
                                     "before its end marker (after 50 whole records): copy it again")
    assert not (tmp_path / "scores").exists() and not list(tmp_path.glob("scores*"))
    assert ws.good_state() == before


def test_a_truncated_span_file_is_rejected_naming_it(copy_of_finished_run, taxi_pipeline):
    ws = copy_of_finished_run
    (ws.data / "span-17").mkdir()
    _truncated_copy(ws.data / "span-16", ws.data / "span-17" / "trips.tfrecord.gz")
    served = {k: v for k, v in ws.good_state().items() if k.startswith("serving")}
    result = taxi_pipeline("run", *ws.locations())
    assert_one_clear_line(result, 4, f"data rejected: {ws.data / 'span-17' / 'trips.tfrecord.gz'} is truncated")
    assert {k: v for k, v in ws.good_state().items() if k.startswith("serving")} == served


def test_commands_given_what_does_not_exist_name_it(copy_of_finished_run, taxi_pipeline, tmp_path):
    ws = copy_of_finished_run
    before = ws.good_state()
    serving = ("--serving-dir", str(ws.serving))
    records = ("--output-root", str(ws.out))
    cases = [
        (("predict", "--model", "5", "--input", str(ws.data / "span-16" / "*"), "--output", str(tmp_path / "p"),
          *serving), "--model must be 'latest' or a version in "),
        (("predict", "--input", str(tmp_path / "none-*.gz"), "--output", str(tmp_path / "p"), *serving),
         f"no files match --input {tmp_path / 'none-*.gz'}"),
        (("serving", "pin", "5", *serving), "version 5 is not in "),
        (("serving", "rollback", "--serving-dir", str(tmp_path / "nowhere")),
         f"no serving folder {tmp_path / 'nowhere' / 'big_tip'}: nothing was pushed there yet"),
        (("lineage", "5", *records, *serving), f"no push of version 5 to {ws.model_dir} is recorded"),
        (("report", "nosuchrun", *records), "no run 'nosuchrun' in "),
        (("history", "--output-root", str(tmp_path / "never-ran")), "no metadata store at "),
        (("make-data", "--csv", str(tmp_path / "missing.csv"), "--out", str(tmp_path / "made")),
         f"{tmp_path / 'missing.csv'} does not exist"),
        (("compile", "--image", "i", "--pipeline-root", "gs://b/root", "--data-root", "gs://b/data",
          "--serving-dir", "gs://b/serving", "--output", str(tmp_path / "no" / "dir" / "pipeline.json")),
         f"{tmp_path / 'no' / 'dir' / 'pipeline.json'} does not exist"),
    ]
    for command, expected in cases:
        assert_one_clear_line(taxi_pipeline(*command), 1, expected)
    assert ws.good_state() == before


# -- Alerts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("webhook", ["silent", "refusing"])
def test_a_webhook_that_hangs_or_refuses_costs_seconds_and_no_exit_status(copy_of_finished_run, taxi_pipeline,
                                                                          silent_server, webhook):
    ws = copy_of_finished_run
    assert taxi_pipeline("run", *ws.locations()).returncode == 0  # the copy's own paths recorded
    before = ws.good_state()
    port = silent_server if webhook == "silent" else _free_port()
    started = time.monotonic()
    result = taxi_pipeline("run", *ws.locations(), "--notify", f"http://127.0.0.1:{port}/hook")
    seconds = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert "Up to date; serving " in result.stdout
    assert seconds < 15, seconds  # nothing to run: start-up, and at most 5 s for the webhook
    logs = "".join(path.read_text() for path in (ws.out / "logs").glob("run-*.log"))
    why = "did not answer within 5 s" if webhook == "silent" else "could not be reached"
    assert f"could not notify http://127.0.0.1:{port}/hook: the webhook {why}" in logs
    assert ws.good_state() == before
