"""A watch on a MySQL metadata store for the length of a run.

ML Metadata's MySQL client has no read timeout, and holds Python's GIL while it waits:
a server that stops answering mid-run without closing its sockets (stopped, a network
that drops packets) holds the run in a query forever, every thread of it with it, and a
scheduler's next call finds the output root's lock held. So the watch is a process of
its own: while a run works it greets the server every `PROBE_SECONDS`
(`failures.check_store`, itself bounded); when the server has not answered for
`silence_seconds()`, it writes the run's last lines (the log named, then what broke and
what to do) and kills the run. The run ends as a kill ends it (137 in a shell), which
every run survives (docs/operations.md): the lock goes with the process, nothing is
pushed but by the Pusher's last rename, and the next run resumes from what the store
recorded. A run given an alert webhook would never post it, killed: the watch posts it.

    python -m pipeline.run.store_watch PID HOST:PORT/DB LOG_PATH SILENCE_SECONDS COMMAND

watches for PID until its standard input closes (the run's end); the webhook's URL, if
any, comes in its environment (`config.NOTIFY_URL_ENV`), never on its command line.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from typing import Iterator, Optional

from pipeline import config, failures

# How often the server is greeted while a run works.
PROBE_SECONDS = 10.0
# The exit status a shell gives a killed run, which the alert names.
KILLED = 128 + signal.SIGKILL
# How long the server may stay silent before the run ends: two minutes, far beyond a
# server under load (its greeting comes before any query runs), and settable for tests.
SILENCE_SECONDS = 120.0
SILENCE_ENV = "TAXI_STORE_SILENCE_SECONDS"


def silence_seconds() -> float:
    return float(os.environ.get(SILENCE_ENV) or SILENCE_SECONDS)


def stalled(metadata: config.MetadataConfig, seconds: float, why: str) -> str:
    return (f"the metadata store {metadata} stopped answering mid-run (no answer for {seconds:.0f} s; {why}): "
            "check the server, then run again; the run resumes from the components it recorded. "
            + failures.NOTHING_CHANGED)


def watch(metadata: config.MetadataConfig, run_ended, probe_seconds: float = PROBE_SECONDS,
          silence: Optional[float] = None) -> Optional[str]:
    """Greets the store every `probe_seconds` until `run_ended(timeout)` says the run
    ended (None) or the store stayed silent for `silence` seconds (the message to say)."""
    limit = silence_seconds() if silence is None else silence
    silent_since = None
    while not run_ended(probe_seconds):
        try:
            failures.check_store(metadata)
            silent_since = None
        except failures.StoreError as err:
            now = time.monotonic()
            silent_since = silent_since if silent_since is not None else now
            if now - silent_since >= limit:
                why = str(err).split("(", 1)[-1].split(")", 1)[0]
                return stalled(metadata, now - silent_since, why)
    return None


@contextlib.contextmanager
def watching(metadata: config.MetadataConfig, log_path: str, command: str = "run",
             notify_url: str = "") -> Iterator[None]:
    """Within the block, a MySQL store is watched by a process of its own, which ends this
    process, saying why (and alerting `notify_url`), when the store stops answering; a
    SQLite store needs no watch."""
    if metadata.mysql is None:
        yield
        return
    environment = {name: value for name, value in os.environ.items() if name != config.NOTIFY_URL_ENV}
    if notify_url:
        environment[config.NOTIFY_URL_ENV] = notify_url
    watcher = subprocess.Popen(
        [sys.executable, "-m", __name__, str(os.getpid()), str(metadata.mysql), log_path, str(silence_seconds()),
         command],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env=environment,
    )
    try:
        yield
    finally:
        watcher.stdin.close()  # the run's end: the watch ends
        with contextlib.suppress(subprocess.TimeoutExpired):
            watcher.wait(timeout=failures.STORE_TIMEOUT_SECONDS + 1)


def main(argv) -> int:
    pid, address, log_path, silence, command = int(argv[1]), argv[2], argv[3], float(argv[4]), argv[5]
    metadata = config.MetadataConfig("", config.MySqlAddress.parse(address.removeprefix("mysql://")))

    def run_ended(timeout: float) -> bool:
        readable, _, _ = select.select([sys.stdin], [], [], timeout)
        return bool(readable) and not sys.stdin.buffer.read1(1)

    message = watch(metadata, run_ended, silence=silence)
    if message is None or run_ended(0):  # the run ended while the last greeting waited
        return 0
    with contextlib.suppress(OSError), open(log_path, "a") as log:
        log.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} ERROR store_watch: {message}\n")
    print(f"Full log: {log_path}\nerror: {message}", file=sys.stderr, flush=True)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    url = os.environ.get(config.NOTIFY_URL_ENV, "")
    if url:
        from pipeline.ops import alerts

        alerts.send(url, alerts.run_payload(command, KILLED, None, message, "stalled"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
