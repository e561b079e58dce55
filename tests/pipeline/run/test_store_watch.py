"""The watch on a MySQL metadata store: a server that stops answering mid-run ends the
run with one line naming it; one that answers, or a SQLite store, is left alone."""

import contextlib
import socket
import threading
import time

from pipeline import config
from pipeline.run import store_watch


class Server:
    """A TCP server on 127.0.0.1 that greets as MySQL does (`answering`) or, switched
    off, accepts connections and never says a word (a stopped server's kernel still accepts)."""

    def __init__(self) -> None:
        self.answering = True
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(16)
        self.held = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                connection = self.socket.accept()[0]
                if self.answering:
                    connection.sendall(b"\x0a\x00\x00\x00")
                    connection.close()
                else:
                    self.held.append(connection)

    def close(self) -> None:
        self.socket.close()
        for connection in self.held:
            connection.close()


def _store(port: int) -> config.MetadataConfig:
    return config.MetadataConfig("", config.MySqlAddress.parse(f"127.0.0.1:{port}/mlmd"))


def test_a_server_that_stops_answering_ends_the_run_naming_it():
    server, stalls = Server(), []
    port = server.socket.getsockname()[1]
    try:
        with store_watch.watching(_store(port), stalls.append,
                                  probe_seconds=0.1, silence=1.0):
            time.sleep(1.5)
            assert stalls == []  # greeting: no stall, however long the run
            server.answering = False
            deadline = time.monotonic() + 20
            while not stalls and time.monotonic() < deadline:
                time.sleep(0.1)
    finally:
        server.close()
    (message,) = stalls
    assert message.startswith(f"the metadata store mysql://127.0.0.1:{port}/mlmd stopped answering mid-run "
                              "(no answer for ")
    assert "no answer within 5 s" in message and "the run resumes from the components it recorded" in message


def test_a_sqlite_store_and_a_finished_run_are_not_watched(tmp_path):
    stalls = []
    before = threading.active_count()
    with store_watch.watching(config.MetadataConfig(str(tmp_path / "m.sqlite")), stalls.append, probe_seconds=0.01):
        assert threading.active_count() == before
    server = Server()
    server.answering = False
    try:
        with store_watch.watching(_store(server.socket.getsockname()[1]), stalls.append, probe_seconds=0.05,
                                  silence=0.1):
            pass  # the run ended before the first probe: nothing to say
        time.sleep(0.3)
    finally:
        server.close()
    assert stalls == []
