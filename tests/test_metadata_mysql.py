"""MLMD in MySQL (here MariaDB, which the test starts on 127.0.0.1): runs from two output
roots, as from two hosts, share one store; SQLite stays the default; `gc` of one root
leaves the other roots' runs alone."""

import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import time
from typing import List

import pytest
from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2

from pipeline import config
from pipeline.run import watch
from tests import pages
from tests.helpers import SLICE_SPANS, Workspace, assert_one_clear_line, free_ports, run_until
from tests.mlmd_builder import DELETED, LIVE, MetadataBuilder

pytestmark = pytest.mark.slow

USER, PASSWORD, DATABASE = "mlmd", "mlmd-secret", "taxi_mlmd"
ACCOUNT = {config.MYSQL_USER_ENV: USER, config.MYSQL_PASSWORD_ENV: PASSWORD}
# gc's test builds its store by hand, in a database of its own: MySQL compares type names
# without case, so its "examples" type would be TFX's "Examples" in a shared database.
GC_DATABASE = "taxi_mlmd_gc"
START_TIMEOUT_SECONDS = 60


def _tool(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")
    assert path, f"{name} is needed: `make test` installs Debian's mariadb-server"
    return path


@dataclasses.dataclass
class MariaDb:
    port: int
    process: subprocess.Popen


@contextlib.contextmanager
def mariadb(root):
    """A MariaDB server of the test's own under `root`, on 127.0.0.1, with an account for MLMD."""
    data, sock = root / "data", root / "mysqld.sock"
    install = subprocess.run(
        [_tool("mariadb-install-db"), "--no-defaults", f"--datadir={data}", "--user=root",
         "--auth-root-authentication-method=normal", "--skip-test-db"],
        capture_output=True, text=True, timeout=120,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    (port,) = free_ports()
    server = subprocess.Popen(
        [_tool("mariadbd"), "--no-defaults", f"--datadir={data}", "--user=root", f"--port={port}",
         "--bind-address=127.0.0.1", f"--socket={sock}", f"--pid-file={root / 'mysqld.pid'}",
         "--skip-name-resolve", "--innodb-buffer-pool-size=32M"],
        stdout=subprocess.DEVNULL, stderr=open(root / "server.log", "w"),
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            ready = subprocess.run(
                [_tool("mariadb"), "--no-defaults", f"--socket={sock}", "-uroot", "-e",
                 f"CREATE USER IF NOT EXISTS '{USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}'; "
                 f"GRANT ALL ON *.* TO '{USER}'@'127.0.0.1';"],
                capture_output=True, text=True, timeout=30,
            )
            if ready.returncode == 0:
                break
            assert server.poll() is None and time.monotonic() < deadline, (root / "server.log").read_text()
            time.sleep(0.5)
        yield MariaDb(port, server)
    finally:
        if server.poll() is None:
            server.terminate()
            server.wait(timeout=60)


@pytest.fixture(scope="module")
def mysql(tmp_path_factory):
    with mariadb(tmp_path_factory.mktemp("mariadb")) as server:
        yield server


def _store(port: int, database: str = DATABASE) -> metadata_store.MetadataStore:
    connection = metadata_store_pb2.ConnectionConfig()
    connection.mysql.host, connection.mysql.port, connection.mysql.database = "127.0.0.1", port, database
    connection.mysql.user, connection.mysql.password = USER, PASSWORD
    return metadata_store.MetadataStore(connection)


def _run_until_statistics(cli_argv, ws, address: str, then, env=None) -> subprocess.CompletedProcess:
    """`run` on the MySQL store at `address`; `then()` once StatisticsGen started (the run
    under way, with executions recorded): how the process ended."""
    return run_until(cli_argv("run", *ws.locations(), "--metadata-mysql", address), "StatisticsGen", then,
                     {**ACCOUNT, **(env or {})})


@dataclasses.dataclass
class Stalled:
    """A run the module's server stopped answering mid-run, the alerts its watch posted,
    and the next run, the server answering again: the first run a store records whole."""

    workspace: Workspace
    address: str
    stalled: subprocess.CompletedProcess
    alerts: List[dict]
    # The serving folder's versions once the stalled run ended.
    versions: List[str]
    again: subprocess.CompletedProcess


@pytest.fixture(scope="module")
def stalled(mysql, tmp_path_factory, copy_spans, cli_argv, taxi_pipeline) -> Stalled:
    ws = Workspace(tmp_path_factory.mktemp("stalled") / "ws")
    copy_spans(ws.data, SLICE_SPANS)
    address = f"127.0.0.1:{mysql.port}/{DATABASE}"
    with contextlib.contextmanager(pages.serve_webhook)() as (url, alerts):
        try:
            result = _run_until_statistics(
                cli_argv, ws, address, lambda: mysql.process.send_signal(signal.SIGSTOP),
                {watch.SILENCE_ENV: "10", config.NOTIFY_URL_ENV: url})
        finally:
            mysql.process.send_signal(signal.SIGCONT)
        versions = ws.versions()
        again = taxi_pipeline("run", *ws.locations(), "--metadata-mysql", address, env=ACCOUNT)
    return Stalled(ws, address, result, list(alerts), versions, again)


def test_runs_from_two_output_roots_share_one_mysql_store(mysql, stalled, taxi_pipeline, last_run, tmp_path):
    ws, address, first = stalled.workspace, stalled.address, stalled.again
    account = ACCOUNT
    assert first.returncode == 0, first.stdout + first.stderr
    assert not ws.metadata.exists()  # nothing in SQLite
    logs = [path.read_text() for path in (ws.out / "logs").glob("run-*.log")]
    assert len(logs) == 2 and all("mysql" in log and PASSWORD not in log for log in logs)  # TFX logs the connection
    store = _store(mysql.port)
    nodes = {context.name.split(".", 1)[1] for context in store.get_contexts_by_type("node")}
    assert {"ImportExampleGen", "Trainer", "Evaluator", "ServingCheck", "Pusher"} <= nodes
    # The stalled run's and the one that pushed.
    runs = [context.name for context in store.get_contexts_by_type("pipeline_run")]
    run = last_run(ws.out)["run_id"]
    assert len(runs) == 2 and run in runs, (runs, run)

    # Another host: its own output root, the same store. It sees the first run's history
    # and lineage.
    other = tmp_path / "other-host"
    history = taxi_pipeline("history", "--output-root", str(other), "--metadata-mysql", address, env=account)
    assert history.returncode == 0, history.stderr
    assert run in history.stdout and " pushed " in history.stdout
    # The served model's quality page, from the shared store alone.
    page = taxi_pipeline("history", "--page", "--output-root", str(other), "--metadata-mysql", address, env=account)
    assert page.returncode == 0, page.stderr
    text = (other / "history.html").read_text()
    assert run in text and "1 run evaluated a candidate" in " ".join(text.split())
    lineage = taxi_pipeline("lineage", ws.versions()[0], "--output-root", str(other), "--metadata-mysql", address,
                            "--serving-dir", str(ws.serving), env=account)
    assert lineage.returncode == 0 and f"of run {run}" in lineage.stdout, lineage.stderr

    # Without the account: a message naming the variables, and nothing run.
    anonymous = taxi_pipeline("history", "--output-root", str(other), "--metadata-mysql", address,
                              env={"TAXI_MLMD_USER": ""})
    assert anonymous.returncode == 1 and "TAXI_MLMD_USER and TAXI_MLMD_PASSWORD" in anonymous.stderr
    bad = taxi_pipeline("history", "--metadata-mysql", "localhost/taxi", env=account)
    assert bad.returncode == 2 and "HOST:PORT/DATABASE" in bad.stderr


def test_a_server_that_goes_away_mid_run_is_named_and_nothing_is_pushed(
    tmp_path, slice_workspace, cli_argv, taxi_pipeline
):
    ws = slice_workspace
    with mariadb(tmp_path / "db") as server:
        address = f"127.0.0.1:{server.port}/{DATABASE}"

        def kill() -> None:
            server.process.kill()
            server.process.wait(timeout=60)

        result = _run_until_statistics(cli_argv, ws, address, kill)
    line = assert_one_clear_line(result, 1, f"the metadata store mysql://{address} cannot be used (")
    assert "start the server or fix --metadata-mysql" in line
    assert not ws.versions() and not (ws.out / "last_run.json").exists()


def test_a_server_that_stops_answering_mid_run_ends_it_and_the_next_run_recovers(stalled):
    """A stopped server still accepts connections (its kernel does) and never answers: MLMD
    alone would wait in its query for good, the output root's lock held."""
    result, address = stalled.stalled, stalled.address
    # Ended as a kill ends it (137 in a shell): MLMD holds the interpreter while it waits.
    last = assert_one_clear_line(result, -signal.SIGKILL,
                                 f"the metadata store mysql://{address} stopped answering mid-run (no answer for ")
    seconds = int(last.split("(no answer for ", 1)[1].split(" s", 1)[0])
    assert seconds >= 10, last
    assert result.stderr.strip().splitlines()[-2].startswith("Full log: "), result.stderr
    assert not stalled.versions
    # The killed run could not alert: its watch did.
    (alert,) = stalled.alerts
    assert alert["outcome"] == "stalled" and alert["exit_code"] == 137 and alert["error"] == last[len("error: "):]
    # The lock went with the process: the next run, the server back, runs and pushes.
    assert stalled.again.returncode == 0, stalled.again.stdout + stalled.again.stderr
    assert len(stalled.workspace.versions()) == 1


def test_gc_on_a_shared_store_counts_and_removes_only_its_own_roots_runs(mysql, tmp_path, monkeypatch):
    monkeypatch.setenv("TAXI_MLMD_USER", USER)
    monkeypatch.setenv("TAXI_MLMD_PASSWORD", PASSWORD)
    address = config.MySqlAddress.parse(f"127.0.0.1:{mysql.port}/{GC_DATABASE}")
    here, there = (
        MetadataBuilder(_store(mysql.port, GC_DATABASE), config.RunConfig(
            output_root=str(tmp_path / name / "out"), serving_dir=str(tmp_path / name / "serving"),
            metadata_mysql=address))
        for name in ("here", "there"))
    old = here.train("20300101-000000-000000-1-here")
    new = here.train("20300102-000000-000000-1-here")
    # The other root's runs are newer: they must not count among this root's newest.
    others = [there.train(f"2030010{day}-000000-000000-1-there") for day in (3, 4)]
    found = here.collect(keep_runs=1)
    assert found.removed_runs == ["20300101-000000-000000-1-here"]
    assert all(here.state(a) == DELETED and not os.path.exists(here.uri(a)) for a in old.values())
    assert all(here.state(a) == LIVE for a in new.values())
    assert all(there.state(a) == LIVE and os.path.exists(there.uri(a)) for made in others for a in made.values())
