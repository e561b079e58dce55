"""The failure catalogue (docs/operations.md, "When a command fails"), its rows about the
metadata store, the schema, what does not exist and alerts (disks and data are in
test_failures_disk.py). Each through the command line in a subprocess: its exit status,
its last line (what broke, where, what to do; no traceback, no bytes, no SQL), and that
nothing already good changed: the served versions' files, `models.config`, the metadata
store and the last run's record."""

from __future__ import annotations

import os
import sqlite3
import time

import pytest

from pipeline import config
from tests.helpers import SilentSocket, assert_one_clear_line, free_ports, full_log

pytestmark = pytest.mark.slow


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


@pytest.fixture
def silent_server():
    """The port of a TCP server on 127.0.0.1 that accepts connections and never says a word."""
    with SilentSocket() as server:
        yield server.port


@pytest.mark.parametrize("server", ["refusing", "silent"])
def test_an_unreachable_mysql_store_costs_seconds(copy_of_finished_run, taxi_pipeline, silent_server, server):
    ws = copy_of_finished_run
    before = ws.good_state()
    port = silent_server if server == "silent" else free_ports()[0]
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


# -- The contract ----------------------------------------------------------------------


def test_a_schema_missing_or_unparseable_stops_the_run_before_it_starts(copy_of_finished_run, project_copy):
    ws = copy_of_finished_run
    before = ws.good_state()
    schema = project_copy.path / "components" / "model" / "schema" / "schema.pbtxt"
    text = schema.read_text()
    edited = text[:text.index("feature {")].count("\n") + 1  # the line the edit breaks
    schema.write_text(text.replace("feature {", "feature {{", 1))
    broken = project_copy("run", *ws.locations())
    line = assert_one_clear_line(broken, 1, f"the schema {schema} does not parse: ")
    assert f"{edited}:10 : 'feature {{{{': Expected identifier" in line and "fix that line (or undo the edit)" in line
    schema.unlink()
    missing = project_copy("run", *ws.locations())
    assert_one_clear_line(missing, 1, f"the schema {schema} cannot be read (No such file or directory): restore it")
    assert ws.good_state() == before


# -- What does not exist ------------------------------------------------------------------


def test_commands_given_what_does_not_exist_name_it(copy_of_finished_run, taxi_pipeline, tmp_path):
    ws = copy_of_finished_run
    before = ws.good_state()
    serving = ("--serving-dir", str(ws.serving))
    records = ("--output-root", str(ws.out))
    cases = [
        (("predict", "--model", "5", "--input", str(ws.data / "span-16" / "*"), "--output", str(tmp_path / "p"),
          *serving), "--model must be 'serving' or a version in "),
        (("predict", "--input", str(tmp_path / "nowhere" / "*.gz"), "--output", str(tmp_path / "p"), *serving),
         f"--input {tmp_path / 'nowhere' / '*.gz'}: its folder {tmp_path / 'nowhere'} does not exist"),
        (("serving", "pin", "5", *serving), "version 5 is not in "),
        (("serving", "rollback", "--serving-dir", str(tmp_path)),
         f"no serving folder {tmp_path / 'big_tip'}: nothing was pushed there yet"),
        (("lineage", "5", *records, *serving), f"no push of version 5 to {ws.model_dir} is recorded"),
        (("report", "nosuchrun", *records), "no run 'nosuchrun' in "),
        (("history", "--output-root", str(tmp_path / "never-ran")), f"--output-root {tmp_path / 'never-ran'} does not"),
        (("make-data", "--source-csv", str(tmp_path / "missing.csv"), "--out", str(tmp_path / "made")),
         f"{tmp_path / 'missing.csv'} does not exist"),
        (("compile", "--image", "i", "--pipeline-root", "gs://b/root", "--data-root", "gs://b/data",
          "--serving-dir", "gs://b/serving", "--output", str(tmp_path / "no" / "dir" / "pipeline.json")),
         f"--output {tmp_path / 'no' / 'dir' / 'pipeline.json'}: its folder {tmp_path / 'no' / 'dir'} does not exist"),
    ]
    for command, expected in cases:
        assert_one_clear_line(taxi_pipeline(*command), 1, expected)
    assert ws.good_state() == before


# -- Alerts ---------------------------------------------------------------------------------


def test_a_webhook_that_hangs_or_refuses_costs_seconds_and_no_exit_status(copy_of_finished_run, taxi_pipeline,
                                                                          silent_server):
    ws = copy_of_finished_run
    before = ws.good_state()
    # The URL from a file, then from the environment (no command line holds it): logs
    # name its scheme and host, never its path, where a webhook's credential is.
    url_file = ws.root / "webhook-url"
    for port, why, given in ((silent_server, "did not answer within 5 s", "file"),
                             (free_ports()[0], "could not be reached", "env")):
        url = f"http://127.0.0.1:{port}/hook-s3cr3t"
        url_file.write_text(url + "\n")
        started = time.monotonic()
        result = (taxi_pipeline("run", *ws.locations(), "--notify-file", str(url_file)) if given == "file"
                  else taxi_pipeline("run", *ws.locations(), env={config.NOTIFY_URL_ENV: url}))
        seconds = time.monotonic() - started
        assert result.returncode == 0, result.stderr
        assert "Up to date; serving " in result.stdout
        assert seconds < 15, seconds  # nothing to run: start-up, and at most 5 s for the webhook
        logs = "".join(path.read_text() for path in (ws.out / "logs").glob("run-*.log"))
        assert f"could not notify http://127.0.0.1:{port}/…: the webhook {why}" in logs
        assert "s3cr3t" not in logs + result.stdout + result.stderr
        assert ws.good_state() == before
