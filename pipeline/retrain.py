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
from typing import Dict, List, Optional

from components import spans
from pipeline import config as config_lib
from pipeline import heavy_imports
from pipeline import run_record
from pipeline.run_record import Outcome, RunReport

LOCK_FILE = "retrain.lock"
STATE_FILE = "retrain_state.json"
# A lock held this long by a process we cannot check (another host) is taken as stale.
STALE_LOCK_SECONDS = 12 * 3600
EXIT_LOCKED = 5


class LockHeld(RuntimeError):
    """Another retrain holds the lock (exit 5)."""


def span_numbers(data_root: str) -> List[int]:
    if not os.path.isdir(data_root):
        raise run_record.DataRootError(f"data root {data_root} does not exist or is not a folder")
    return [span for span, _ in spans.numbered(os.listdir(data_root))]


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
            except FileExistsError:
                owner = self._owner()
                if owner is None:
                    continue
                if not self._is_stale(owner):
                    raise LockHeld(
                        f"another retrain (pid {owner.get('pid')} on {owner.get('host')}, started "
                        f"{time.ctime(float(owner.get('started', 0)))}) holds {self.path}"
                    )
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


def _load_state(output_root: str) -> Dict[str, object]:
    path = os.path.join(output_root, STATE_FILE)
    if not os.path.exists(path):
        return {}
    with open(path) as handle:
        return json.load(handle)


def _save_state(output_root: str, state: Dict[str, object]) -> None:
    path = os.path.join(output_root, STATE_FILE)
    with open(path + ".tmp", "w") as handle:
        json.dump(state, handle, indent=2)
    os.replace(path + ".tmp", path)


def retrain(run_config: config_lib.RunConfig, window_size: int, force: bool = False) -> RunReport:
    """Runs the pipeline on the newest `window_size` spans, unless the newest was trained on."""
    spans.window_train_splits(window_size)  # refuses a window of fewer than 2 spans
    available = span_numbers(run_config.data_root)
    if len(available) < 2:
        raise run_record.DataRootError(f"data root {run_config.data_root} needs at least two spans, has {available}")
    # Until enough spans have landed, the window is all of them. The SpanWindow node
    # chooses the same spans again when the pipeline runs.
    size = min(window_size, len(available))
    if size < window_size:
        logging.info("only %d spans so far: a window of %d instead of %d", size, size, window_size)
    window = [span for _, span in spans.window(available, size)]
    os.makedirs(run_config.output_root, exist_ok=True)
    with RunLock(run_config.output_root) as lock:
        state = _load_state(run_config.output_root)
        if state.get("trained_through_span") == window[-1] and not force:
            report = RunReport.from_json(state["report"])
            report.outcome = Outcome.UP_TO_DATE if report.outcome is Outcome.PUSHED else report.outcome
            report.reused_previous_run = True
            report.note = f"span {window[-1]} was already trained on; nothing to do"
            return report
        windowed = dataclasses.replace(run_config, window_size=size)
        plan = run_record.plan(windowed)
        report = heavy_imports.local_runner().run(windowed, force=force, plan=plan)
        if lock.recovered_from is not None:
            report.note = f"recovered a stale lock left by {lock.recovered_from}"
        if report.outcome in (Outcome.PUSHED, Outcome.NOT_BLESSED, Outcome.UP_TO_DATE):
            newest = report.spans[-1] if report.spans else window[-1]
            _save_state(run_config.output_root, {"trained_through_span": newest, "report": report.to_json()})
        return report
