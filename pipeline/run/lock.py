"""One lock per output root, taken by every command that writes it or the serving folder
(`run` and `retrain`): two runs never overlap on the same MLMD, pipeline root and pushes.

It is an `fcntl.flock` on `<output root>/run.lock`. The kernel releases it when its
holder exits, however it exits (SIGKILL, a crash, a restarted container), so a lock can
never be left stale, and a reused pid means nothing. The file also holds one line for
people: which command holds it, its pid, host and start time. The file itself stays
between runs: deleting it could let two processes lock two different files.
"""

from __future__ import annotations

import datetime
import fcntl
import os
import socket
from typing import Optional

LOCK_FILE = "run.lock"


class LockHeld(RuntimeError):
    """Another run holds the output root (exit `pipeline.outcome.ExitCode.LOCKED`)."""


class RunLock:
    """`with RunLock(output_root, "run"):` holds the output root, or raises LockHeld."""

    def __init__(self, output_root: str, command: str):
        self.path = os.path.join(output_root, LOCK_FILE)
        self._command = command
        self._fd: Optional[int] = None

    def __enter__(self) -> "RunLock":
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            holder = os.pread(fd, 1000, 0).decode(errors="replace").strip() or "a process starting up"
            os.close(fd)
            raise LockHeld(f"another run holds {self.path} ({holder}); try again when it has finished") from err
        started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{self._command}: pid {os.getpid()} on {socket.gethostname()} since {started}\n".encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, *exc_info) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)  # releases the lock
            self._fd = None
