"""MLMD in MySQL (here MariaDB, which the test starts on 127.0.0.1): runs from two output
roots, as from two hosts, share one store; SQLite stays the default."""

import shutil
import socket
import subprocess
import time

import pytest
from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2

pytestmark = pytest.mark.slow

USER, PASSWORD, DATABASE = "mlmd", "mlmd-secret", "taxi_mlmd"
START_TIMEOUT_SECONDS = 60


def _tool(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")
    assert path, f"{name} is needed: `make test` installs Debian's mariadb-server"
    return path


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def mysql(tmp_path_factory):
    """A MariaDB server of the test's own, on 127.0.0.1, with an account for MLMD."""
    root = tmp_path_factory.mktemp("mariadb")
    data, sock = root / "data", root / "mysqld.sock"
    install = subprocess.run(
        [_tool("mariadb-install-db"), "--no-defaults", f"--datadir={data}", "--user=root",
         "--auth-root-authentication-method=normal", "--skip-test-db"],
        capture_output=True, text=True, timeout=120,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    port = _free_port()
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
        yield port
    finally:
        server.terminate()
        server.wait(timeout=60)


def _store(port: int) -> metadata_store.MetadataStore:
    config = metadata_store_pb2.ConnectionConfig()
    config.mysql.host, config.mysql.port, config.mysql.database = "127.0.0.1", port, DATABASE
    config.mysql.user, config.mysql.password = USER, PASSWORD
    return metadata_store.MetadataStore(config)


def test_runs_from_two_output_roots_share_one_mysql_store(mysql, slice_workspace, taxi_pipeline, tmp_path):
    ws = slice_workspace
    account = {"TAXI_MLMD_USER": USER, "TAXI_MLMD_PASSWORD": PASSWORD}
    address = f"127.0.0.1:{mysql}/{DATABASE}"
    first = taxi_pipeline("run", *ws.locations(), "--metadata-mysql", address, env=account)
    assert first.returncode == 0, first.stdout + first.stderr
    assert not ws.metadata.exists()  # nothing in SQLite
    (log,) = (ws.out / "logs").glob("run-*.log")
    assert "mysql" in log.read_text() and PASSWORD not in log.read_text()  # TFX logs the connection
    store = _store(mysql)
    nodes = {context.name.split(".", 1)[1] for context in store.get_contexts_by_type("node")}
    assert {"ImportExampleGen", "Trainer", "Evaluator", "ServingCheck", "Pusher"} <= nodes
    (run,) = [context.name for context in store.get_contexts_by_type("pipeline_run")]

    # Another host: its own output root, the same store. It sees the first run's history
    # and lineage.
    other = tmp_path / "other-host"
    history = taxi_pipeline("history", "--output-root", str(other), "--metadata-mysql", address, env=account)
    assert history.returncode == 0, history.stderr
    assert run in history.stdout and " pushed " in history.stdout
    lineage = taxi_pipeline("lineage", ws.versions()[0], "--output-root", str(other), "--metadata-mysql", address,
                            "--serving-dir", str(ws.serving), env=account)
    assert lineage.returncode == 0 and f"of run {run}" in lineage.stdout, lineage.stderr

    # Without the account: a message naming the variables, and nothing run.
    anonymous = taxi_pipeline("history", "--output-root", str(other), "--metadata-mysql", address,
                              env={"TAXI_MLMD_USER": ""})
    assert anonymous.returncode == 1 and "TAXI_MLMD_USER and TAXI_MLMD_PASSWORD" in anonymous.stderr
    bad = taxi_pipeline("history", "--metadata-mysql", "localhost/taxi", env=account)
    assert bad.returncode == 2 and "HOST:PORT/DATABASE" in bad.stderr
