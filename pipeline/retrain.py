"""`taxi-pipeline retrain`: the scheduled entry point (cron, systemd timer, CronJob).

It trains on a rolling window of the newest spans when a span has landed that was not
trained on yet, and does nothing otherwise. A lock file keeps two runs from overlapping;
a lock left by a killed run is recognized and recovered.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import time
from typing import Callable, Dict, Optional

from components import spans
from pipeline import config, run_state
from pipeline.run_state import RunReport

LOCK_FILE = "retrain.lock"
# A lock held this long by a process we cannot check (another host) is taken as stale.
STALE_LOCK_SECONDS = 12 * 3600


class LockHeld(RuntimeError):
    """Another retrain holds the lock (exit `ExitCode.LOCKED`)."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunLock:
    """An exclusive lock file holding the owner's pid, host and start time."""

    def __init__(self, folder: str):
        self.path = os.path.join(folder, LOCK_FILE)
        self.recovered_from: Optional[Dict[str, object]] = None

    def _owner(self) -> Optional[Dict[str, object]]:
        try:
            with open(self.path) as handle:
                return json.load(handle)
        except FileNotFoundError:
            return None
        except ValueError:
            return {}  # half-written by a run killed while taking the lock

    def _is_stale(self, owner: Dict[str, object]) -> bool:
        if not owner:
            return True
        if owner.get("host") == socket.gethostname():
            return not _pid_alive(int(owner.get("pid", -1)))
        return time.time() - float(owner.get("started", 0)) > STALE_LOCK_SECONDS

    def __enter__(self) -> "RunLock":
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        for _ in range(2):
            try:
                handle = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError as err:
                owner = self._owner()
                if owner is None:
                    continue
                if not self._is_stale(owner):
                    raise LockHeld(
                        f"another retrain (pid {owner.get('pid')} on {owner.get('host')}, started "
                        f"{time.ctime(float(owner.get('started', 0)))}) holds {self.path}"
                    ) from err
                logging.warning("recovering a stale lock %s left by %s", self.path, owner)
                self.recovered_from = owner
                os.remove(self.path)
                continue
            with os.fdopen(handle, "w") as out:
                json.dump({"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}, out)
            return self
        raise LockHeld(f"could not take {self.path}")

    def __exit__(self, *exc_info) -> None:
        os.remove(self.path)


def retrain(
    run_config: config.RunConfig,
    window_size: int,
    run: Callable[[config.RunConfig, run_state.RunPlan], RunReport],
    force: bool = False,
) -> RunReport:
    """Runs the pipeline on the newest `window_size` spans, unless the newest was trained on.

    `run(config, plan)` runs the pipeline (see `pipeline.local_runner.run`); it is only
    called, and TensorFlow only imported, when there is something to do.
    """
    spans.window_train_splits(window_size)  # refuses a window of fewer than 2 spans
    available = spans.span_numbers(run_config.data_root)
    if len(available) < 2:
        raise spans.DataRootError(f"data root {run_config.data_root} needs at least two spans, has {available}")
    # Until enough spans have landed, the window is all of them. The SpanWindow node
    # chooses the same spans again when the pipeline runs.
    size = min(window_size, len(available))
    if size < window_size:
        logging.info("only %d spans so far: a window of %d instead of %d", size, size, window_size)
    newest = available[-1]
    os.makedirs(run_config.output_root, exist_ok=True)
    with RunLock(run_config.output_root) as lock:
        done = None if force else run_state.window_done(run_config.output_root, newest)
        if done is not None:
            return done
        windowed = dataclasses.replace(
            run_config, settings=dataclasses.replace(run_config.settings, window_size=size)
        )
        plan = run_state.plan(windowed)
        report = plan.previous if plan.previous is not None and not force else run(windowed, plan)
        if lock.recovered_from is not None:
            report.note = f"recovered a stale lock left by {lock.recovered_from}"
        return report
