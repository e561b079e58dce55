"""The watch on the services a run waits on (a MySQL store, Beam's job service and worker
pool): one that stops answering mid-run ends the run with one line naming it, and its
alert; one that answers, or a run that needs none, is left alone."""

import threading
import time

from pipeline import config
from pipeline.outcome import ExitCode
from pipeline.run import watch
from tests.helpers import SilentSocket


class Server(SilentSocket):
    """A TCP server on 127.0.0.1 that greets as MySQL does (`answering`) or, switched off,
    accepts connections and never says a word (a stopped server's kernel still accepts)."""

    def __init__(self, answers: int = -1) -> None:
        self.answering = True
        # Connections greeted before it falls silent for good (-1: while `answering`).
        self.answers = answers
        super().__init__(answer=self._greet)

    def _greet(self, connection) -> bool:
        if self.answers == 0:
            self.answering = False
        self.answers -= 1
        if self.answering:
            connection.sendall(b"\x0a\x00\x00\x00")
        return self.answering


def _store(port: int) -> list:
    return [watch.Service("mysql", f"mysql://127.0.0.1:{port}/mlmd")]


def _for(seconds: float):
    """A `run_ended` for a run that ends after `seconds`."""
    end = time.monotonic() + seconds

    def run_ended(timeout: float) -> bool:
        time.sleep(min(timeout, max(0.0, end - time.monotonic())))
        return time.monotonic() >= end

    return run_ended


def test_a_server_that_stops_answering_is_named_once_silent_long_enough():
    server = Server()
    port = server.port
    try:
        # Greeting: nothing to say, however long the run.
        assert watch.watch(_store(port), _for(1.5), probe_seconds=0.1, silence=1.0) is None
        server.answering = False
        message = watch.watch(_store(port), _for(60), probe_seconds=0.1, silence=1.0)
    finally:
        server.close()
    assert message.startswith(f"the metadata store mysql://127.0.0.1:{port}/mlmd stopped answering mid-run "
                              "(no answer for ")
    assert "no answer within 5 s" in message and "the run resumes from the components it recorded" in message


def test_a_sqlite_store_is_not_watched(tmp_path, monkeypatch):
    def no_process(*args, **kwargs):
        raise AssertionError("a watch process was started for a SQLite store")

    monkeypatch.setattr(watch.subprocess, "Popen", no_process)
    sqlite = config.MetadataConfig(str(tmp_path / "m.sqlite"))
    with watch.watching(sqlite, ("--direct_num_workers=2",), str(tmp_path / "run.log")):
        pass
    assert not (tmp_path / "run.log").exists()


def test_a_watch_whose_run_ended_says_nothing_and_kills_nothing(tmp_path):
    """The watch process, its run ended (its standard input closed) after the server
    failed a greeting and before it was silent long enough: it says nothing and kills
    nothing. (Greeted every 2 s for a silence of 8 s, each greeting failing after 5 s: the
    first failure comes at about 7 s, the kill would come at about 21 s.)"""
    import subprocess
    import sys

    server = SilentSocket()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        watcher = subprocess.Popen(
            [sys.executable, "-m", "pipeline.run.watch", str(sleeper.pid), str(tmp_path / "run.log"), "8", "run",
             f"mysql://{server.address}/mlmd"],
            stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(9)
        assert server.held, "the watch greeted the server"
        watcher.stdin.close()
        assert watcher.wait(timeout=60) == 0 and watcher.stderr.read() == ""
        assert sleeper.poll() is None and not (tmp_path / "run.log").exists()
    finally:
        sleeper.kill()
        server.close()


def test_a_watch_that_ends_a_run_posts_its_alert_naming_the_store(tmp_path, webhook):
    """A killed run cannot post its alert: the watch does, with the URL from its
    environment (never its command line), after the kill."""
    import os
    import subprocess
    import sys

    from pipeline import config

    url, received = webhook
    server = SilentSocket()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        watcher = subprocess.Popen(
            [sys.executable, "-m", "pipeline.run.watch", str(sleeper.pid), str(tmp_path / "run.log"), "0.5",
             "retrain", f"mysql://{server.address}/mlmd"],
            stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, config.NOTIFY_URL_ENV: url, watch.SILENCE_ENV: "0.5"})
        assert sleeper.wait(timeout=60) == -9
        watcher.stdin.close()
        assert watcher.wait(timeout=60) == 0
    finally:
        sleeper.kill()
        server.close()
    (alert,) = received
    assert alert["outcome"] == "stalled" and alert["exit_code"] == ExitCode.KILLED == 137
    assert alert["text"].startswith("taxi-pipeline retrain failed (exit 137, stalled): the metadata store "
                                    "mysql://127.0.0.1:"), alert
    assert url not in watcher.stderr.read()


def test_the_services_a_run_waits_on_are_read_from_its_store_and_beam_options():
    mysql = config.MetadataConfig("", config.MySqlAddress.parse("127.0.0.1:3306/mlmd"))
    portable = ("--runner=PortableRunner", "--job_endpoint=127.0.0.1:8099", "--environment_type=EXTERNAL",
                "--environment_config=127.0.0.1:50000")
    assert [str(s) for s in watch.services(mysql, portable)] == [
        "mysql://127.0.0.1:3306/mlmd", "job-service=127.0.0.1:8099", "worker-pool=127.0.0.1:50000"]
    assert watch.services(config.MetadataConfig("/m.sqlite"), ("--direct_num_workers=2",)) == []
    # Spark's job server, workers in Docker: the job service alone.
    spark = ("--runner=PortableRunner", "--job_endpoint=h:8099", "--environment_type=DOCKER", "--environment_config=i")
    assert [s.kind for s in watch.services(config.MetadataConfig("/m.sqlite"), spark)] == ["job-service"]
    # Beam's other spellings of the same options.
    spelled = ("--runner", "apache_beam.runners.portability.portable_runner.PortableRunner", "--job_endpoint", "h:1")
    assert [str(s) for s in watch.services(config.MetadataConfig("/m.sqlite"), spelled)] == ["job-service=h:1"]
    assert all(watch.Service.parse(str(s)) == s for s in watch.services(mysql, portable))


def _left_alone_then_named(kind: str, answering: str):
    """The watch on a service of `kind` at `answering` (it must say nothing), then on a
    socket that accepts and never answers: (what it says, that socket's address)."""
    with SilentSocket() as silent:
        assert watch.watch([watch.Service(kind, answering)], _for(1.5), probe_seconds=0.1, silence=1.0) is None
        return watch.watch([watch.Service(kind, silent.address)], _for(60), probe_seconds=0.1,
                           silence=1.0), silent.address


def test_a_beam_service_that_stops_answering_is_named_and_one_that_answers_is_not(monkeypatch):
    """A gRPC server greets with its handshake; a socket that accepts and never answers
    (a stopped job service's kernel) does not."""
    from concurrent import futures

    import grpc

    monkeypatch.setattr(watch, "GREETING_SECONDS", 0.5)  # read at each greeting
    answering = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = answering.add_insecure_port("127.0.0.1:0")
    answering.start()
    try:
        message, address = _left_alone_then_named("job-service", f"127.0.0.1:{port}")
    finally:
        answering.stop(None)
    assert message.startswith(f"Beam's job service at {address} stopped answering mid-run (no answer for "), message
    assert "no gRPC handshake within 0.5 s" in message and "taxi-pipeline beam-services" in message


def test_a_worker_pool_is_named_once_it_answered_here_and_stopped(monkeypatch):
    """Spark's pools sit beside its workers, maybe out of this machine's reach: a pool that
    never answered here is no stall; one that answered and went away is."""
    import threading
    from concurrent import futures

    import grpc

    monkeypatch.setattr(watch, "GREETING_SECONDS", 0.5)
    with SilentSocket() as silent:
        unreachable = [watch.Service("worker-pool", silent.address)]
        assert watch.watch(unreachable, _for(3), probe_seconds=0.1, silence=1.0) is None
    pool = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = pool.add_insecure_port("127.0.0.1:0")
    pool.start()
    threading.Timer(1.0, pool.stop, args=(None,)).start()
    message = watch.watch([watch.Service("worker-pool", f"127.0.0.1:{port}")], _for(60), probe_seconds=0.1,
                          silence=1.0)
    assert message.startswith(f"Beam's worker pool at 127.0.0.1:{port} stopped answering mid-run"), message


def test_a_reader_of_a_store_that_stops_answering_is_ended_naming_it(tmp_path):
    """`history` on a MySQL store that greets the command's check, then never answers
    MLMD's own connection: watched as a run is, it ends within the silence allowed, with
    one line naming the store and the command, instead of waiting for good."""
    import os
    import subprocess
    import sys

    server = Server(answers=1)
    port = server.port
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pipeline.cli", "history", "--metadata-mysql", f"127.0.0.1:{port}/mlmd",
             "--output-root", str(tmp_path)],
            env={**os.environ, watch.SILENCE_ENV: "2", config.MYSQL_USER_ENV: "u", config.MYSQL_PASSWORD_ENV: "p"},
            capture_output=True, text=True, timeout=120)
    finally:
        server.close()
    assert done.returncode == -9, done.stdout + done.stderr
    assert time.monotonic() - started < 60
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: the metadata store mysql://127.0.0.1:{port}/mlmd stopped answering while "
                           "`history` ran (no answer for "), last
    assert "check the server, then run again" in last and "Full log" not in done.stderr


def test_flink_s_jobmanager_is_greeted_over_http_and_named_when_it_stops_answering(monkeypatch):
    """Any HTTP answer of its REST address (even a 404) is a greeting; a socket that
    accepts and never answers is not."""
    import http.server

    monkeypatch.setattr(watch, "GREETING_SECONDS", 0.5)
    answering = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=answering.serve_forever, daemon=True).start()
    try:
        message, address = _left_alone_then_named("flink-master", f"127.0.0.1:{answering.server_address[1]}")
    finally:
        answering.shutdown()
    assert message.startswith(f"Flink's JobManager at {address} stopped answering mid-run (no answer for "), message
    assert "no HTTP answer within 0.5 s" in message and "--flink-master" in message


def test_a_flink_run_watches_its_jobmanager_and_an_embedded_one_is_not_watched():
    flink = ("--runner=FlinkRunner", "--flink_master=10.1.2.3:8081", "--environment_type=EXTERNAL")
    store = config.MetadataConfig("m.sqlite")
    assert watch.services(store, flink) == [watch.Service("flink-master", "10.1.2.3:8081")]
    assert watch.services(store, ("--runner=FlinkRunner", "--flink_master=[auto]")) == []
    assert watch.services(store, ("--runner=FlinkRunner",)) == []  # Beam's embedded Flink
    assert watch.Service.parse("flink-master=10.1.2.3:8081") == watch.Service("flink-master", "10.1.2.3:8081")
