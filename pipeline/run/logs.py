"""Console and file logging of a command: one progress line per component on the console,
every TF/Beam/TFX log line in `<output root>/logs/` (and on the console with --verbose),
and the quiet console of the commands that print a result.

The progress lines come from the orchestrators' own log messages, the only signal TFX
1.16 gives while a node runs; `test_logs.py` checks that TFX still logs them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import logging.handlers
import os
import re
import sys
import time
import warnings
from typing import List, Optional, TextIO

from components.model.trainer.settings import EPOCH_PROGRESS

# LocalDagRunner's (`local_dag_runner.py`), BeamDagRunner's (`beam_dag_runner.py`) and the
# launcher's (`portable/launcher.py`) messages that mark a component's progress.
RUNNING = ("Component %s is running.", "node %s is running.")
FINISHED = ("Component %s is finished.", "node %s is finished.")
CACHED = "A cached execution %d is used."
# A node whose inputs a condition left unmet (the data gate refused the data): not run.
SKIPPED = "Skipping execution for %s"
# Echoed, indented, while a component runs: the Trainer's epochs.
ECHOED = (EPOCH_PROGRESS,)


@dataclasses.dataclass
class Progress:
    """The components of this process's run: the one running, those finished, in order."""

    running: Optional[str] = None
    finished: List[str] = dataclasses.field(default_factory=list)


# What an interrupted run says it had done (`pipeline.interrupts`).
PROGRESS = Progress()


class ProgressHandler(logging.Handler):
    """Keeps `PROGRESS`, and prints one line per component as it finishes, with its wall
    time, or "cached" or "skipped" (no line with `stream` None)."""

    def __init__(self, stream: Optional[TextIO] = sys.stdout):
        super().__init__(logging.INFO)
        self._stream = stream
        self._started = time.perf_counter()
        self._component: Optional[str] = None
        self._component_started = 0.0
        self._how = ""  # "cached" or "skipped", said instead of the component's time

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg in RUNNING:
            self._component, self._component_started, self._how = record.args[0], time.perf_counter(), ""
            PROGRESS.running = self._component
        elif record.msg == CACHED:
            self._how = "cached"
        elif record.msg == SKIPPED:
            self._how = "skipped"
        elif record.msg in ECHOED and self._component:
            self._write(f"{'':11s}{self._component}: {record.getMessage()}\n")
        elif record.msg in FINISHED and self._component:
            now = time.perf_counter()
            how = self._how or f"{now - self._component_started:5.1f} s"
            if self._how != "skipped":
                PROGRESS.finished.append(self._component)
            PROGRESS.running = None
            self._write(f"[{now - self._started:6.1f} s] {self._component:28s} {how}\n")

    def _write(self, text: str) -> None:
        if self._stream is not None:
            self._stream.write(text)
            self._stream.flush()


class RedactingFormatter(logging.Formatter):
    """Never writes a password: TFX logs the MLMD connection config (a MySQL password
    with it, see `--metadata-mysql`) when a run starts."""

    _PASSWORD = re.compile(r"""(password["']?\s*[:=]\s*)("[^"]*"|'[^']*'|\S+)""", re.IGNORECASE)

    def format(self, record: logging.LogRecord) -> str:
        return self._PASSWORD.sub(r'\1"***"', super().format(record))


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Where the commands that keep no output root (predict, serving, compile, make-data, ...)
# write the log of a failure.
STATE_DIR_ENV = "XDG_STATE_HOME"


class Captured(logging.handlers.BufferingHandler):
    """The log records of a command that writes no log file unless it fails: the last
    `capacity` of them, in memory, written out by `write_failure_log`."""

    def shouldFlush(self, record: logging.LogRecord) -> bool:  # noqa: N802 (logging's name)
        if len(self.buffer) >= self.capacity:
            del self.buffer[0]
        return False


def capture(capacity: int = 10_000) -> Captured:
    """Keeps the root logger's records in memory instead of on the console."""
    handler = Captured(capacity)
    handler.setFormatter(RedactingFormatter(LOG_FORMAT))
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)
    return handler


def failure_log_dir(output_root: str = "") -> str:
    """`<output root>/logs` when that output root exists, else the user's state folder."""
    if output_root and os.path.isdir(output_root):
        return os.path.join(os.path.abspath(output_root), "logs")
    state = os.environ.get(STATE_DIR_ENV) or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "taxi-pipeline", "logs")


def write_failure_log(handler: Captured, log_dir: str, command: str) -> str:
    """Writes the captured records to a new file in `log_dir`, or in the user's state
    folder when that cannot be written (a full or read-only output root); its path, or ""
    when neither can (the console line must still come)."""
    name = f"{command}-{datetime.datetime.now():%Y%m%d-%H%M%S}-{os.getpid()}.log"
    for folder in dict.fromkeys((log_dir, failure_log_dir())):
        path = os.path.join(folder, name)
        try:
            os.makedirs(folder, exist_ok=True)
            with open(path, "w", encoding="utf-8") as out:
                for record in handler.buffer:
                    out.write(handler.format(record) + "\n")
        except OSError:
            continue
        return path
    return ""


class RunLogHandler(logging.FileHandler):
    """The run's log file. When it cannot be written (its disk full, say), the records
    go on in a log of the same name in the user's state folder, never to the console (the
    standard handler prints each failed record's traceback there); `current_path`
    names the file that holds the latest records."""

    def __init__(self, path: str):
        super().__init__(path)
        self._moving = False

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        if self._moving:
            return
        self._moving = True
        try:
            fallback = os.path.join(failure_log_dir(""), os.path.basename(self.baseFilename))
            if fallback != self.baseFilename:
                os.makedirs(os.path.dirname(fallback), exist_ok=True)
                stream = open(fallback, "a", encoding=self.encoding)  # noqa: SIM115 (kept open, as the handler's)
                with contextlib.suppress(OSError):
                    self.stream.close()
                self.stream, self.baseFilename = stream, fallback
                logging.StreamHandler.emit(self, record)
        except OSError:
            pass  # nowhere left to write: the record is dropped, the console line still comes
        finally:
            self._moving = False


def current_path(default: str) -> str:
    """The file the run's log is written to now (see RunLogHandler), else `default`."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, RunLogHandler):
            return handler.baseFilename
    return default


def configure(log_dir: str, verbose: bool) -> str:
    """Full logs go to a file (and the console with `verbose`); the console gets progress.

    Returns the log file's path.
    """
    from absl import logging as absl_logging

    os.makedirs(log_dir, exist_ok=True)
    log_path = os.path.join(log_dir, f"run-{datetime.datetime.now():%Y%m%d-%H%M%S}-{os.getpid()}.log")
    # Opened before the handlers it replaces are removed: a log file that cannot be
    # written fails here, and the failure is still captured.
    file_handler = RunLogHandler(log_path)
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.setLevel(logging.INFO)
    absl_logging.set_verbosity(absl_logging.INFO)
    logging.captureWarnings(True)
    # TensorFlow's logger writes to stderr itself; route it through the root handlers.
    tf_logger = logging.getLogger("tensorflow")
    for handler in list(tf_logger.handlers):
        tf_logger.removeHandler(handler)
    tf_logger.propagate = True
    file_handler.setFormatter(RedactingFormatter(LOG_FORMAT))
    root.addHandler(file_handler)
    root.addHandler(ProgressHandler(None if verbose else sys.stdout))
    if verbose:
        root.addHandler(logging.StreamHandler(sys.stderr))
    return log_path


def import_tensorflow(log_path: str, verbose: bool) -> None:
    """Imports TensorFlow with what its native libraries print while they load sent to
    the log file, unless `verbose`. TF 2.21 (tfx-1.21) prints those lines (oneDNN, no CUDA
    driver) through absl to the process's stderr before `TF_CPP_MIN_LOG_LEVEL` applies;
    TF 2.16 (tfx-1.16) prints nothing there. Later native logs follow the variable."""
    if verbose or "tensorflow" in sys.modules:
        import tensorflow  # noqa: F401

        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(log_path, "ab") as log:
            os.dup2(log.fileno(), 2)
        import tensorflow  # noqa: F401
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def quiet_libraries() -> None:
    """For the commands that print a result, not a run's progress: no library notices
    on the console (TensorFlow's C++ and Python logs, deprecation notices on import)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    # google-api-core's about Python 3.10, ...
    warnings.simplefilter("ignore", FutureWarning)
    # Their Python loggers keep a level set before they are imported.
    for name in ("tensorflow", "apache_beam"):
        logging.getLogger(name).setLevel(logging.ERROR)
