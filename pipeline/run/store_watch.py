"""A watch on a MySQL metadata store for the length of a run.

ML Metadata's MySQL client has no read timeout: a server that stops answering mid-run
without closing its sockets (stopped, a network that drops packets) holds the run in a
query forever, and a scheduler's next call finds the output root's lock held. While a
run works, a thread greets the server every `PROBE_SECONDS` (`failures.check_store`,
itself bounded); when it has not answered for `silence_seconds()` the run ends: one
line naming the store and what to do, the log named before it, exit 1. The process ends
as a kill would end it, which every run survives (docs/operations.md): the lock goes
with the process, nothing is pushed but by the Pusher's last rename, and the next run
resumes from what the store recorded.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from typing import Callable, Iterator, Optional

from pipeline import config, failures

# How often the server is greeted while a run works.
PROBE_SECONDS = 10.0
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


def end_process(message: str, log_path: str) -> None:
    """Ends the run as a kill would, after its last lines: what a thread can do while the
    main thread is held in a query that will not return."""
    logging.error("%s", message)
    for handler in logging.getLogger().handlers:
        handler.flush()
    print(f"Full log: {log_path}\nerror: {message}", file=sys.stderr, flush=True)
    os._exit(int(config.ExitCode.ERROR))


@contextlib.contextmanager
def watching(metadata: config.MetadataConfig, on_stall: Callable[[str], None],
             probe_seconds: float = PROBE_SECONDS, silence: Optional[float] = None) -> Iterator[None]:
    """Within the block, `on_stall(message)` is called once when a MySQL store has not
    answered for `silence` seconds (default `silence_seconds()`); a SQLite store needs no watch."""
    if metadata.mysql is None:
        yield
        return
    limit = silence_seconds() if silence is None else silence
    done = threading.Event()

    def watch() -> None:
        silent_since = None
        while not done.wait(probe_seconds):
            try:
                failures.check_store(metadata)
                silent_since = None
            except failures.StoreError as err:
                now = time.monotonic()
                silent_since = silent_since if silent_since is not None else now - failures.STORE_TIMEOUT_SECONDS
                if now - silent_since >= limit and not done.is_set():
                    why = str(err).split("(", 1)[-1].split(")", 1)[0]
                    on_stall(stalled(metadata, now - silent_since, why))
                    return

    thread = threading.Thread(target=watch, name="metadata-store-watch", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
