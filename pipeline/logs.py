"""Console and file logging of a run: one progress line per component on the console,
every TF/Beam/TFX log line in `<output root>/logs/` (and on the console with --verbose).

The progress lines come from the orchestrators' own log messages, the only signal TFX
1.16 gives while a node runs; `test_logs.py` checks that TFX still logs them.
"""

from __future__ import annotations

import datetime
import logging
import os
import re
import sys
import time
from typing import Optional

from components.trainer.settings import EPOCH_PROGRESS

# LocalDagRunner's (`local_dag_runner.py`), BeamDagRunner's (`beam_dag_runner.py`) and the
# launcher's (`portable/launcher.py`) messages that mark a component's progress.
RUNNING = ("Component %s is running.", "node %s is running.")
FINISHED = ("Component %s is finished.", "node %s is finished.")
CACHED = "A cached execution %d is used."
# Echoed, indented, while a component runs: the Trainer's epochs.
ECHOED = (EPOCH_PROGRESS,)


class ProgressHandler(logging.Handler):
    """Prints one line per component as it finishes, with its wall time."""

    def __init__(self, stream=sys.stdout):
        super().__init__(logging.INFO)
        self._stream = stream
        self._started = time.perf_counter()
        self._component: Optional[str] = None
        self._component_started = 0.0
        self._cached = False

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg in RUNNING:
            self._component, self._component_started, self._cached = record.args[0], time.perf_counter(), False
        elif record.msg == CACHED:
            self._cached = True
        elif record.msg in ECHOED and self._component:
            self._stream.write(f"{'':11s}{self._component}: {record.getMessage()}\n")
            self._stream.flush()
        elif record.msg in FINISHED and self._component:
            now = time.perf_counter()
            how = "cached" if self._cached else f"{now - self._component_started:5.1f} s"
            self._stream.write(f"[{now - self._started:6.1f} s] {self._component:28s} {how}\n")
            self._stream.flush()


class RedactingFormatter(logging.Formatter):
    """Never writes a password: TFX logs the MLMD connection config (a MySQL password
    with it, see `--metadata-mysql`) when a run starts."""

    _PASSWORD = re.compile(r"""(password["']?\s*[:=]\s*)("[^"]*"|'[^']*'|\S+)""", re.IGNORECASE)

    def format(self, record: logging.LogRecord) -> str:
        return self._PASSWORD.sub(r'\1"***"', super().format(record))


def configure(log_dir: str, verbose: bool) -> str:
    """Full logs go to a file (and the console with `verbose`); the console gets progress.

    Returns the log file's path.
    """
    from absl import logging as absl_logging

    os.makedirs(log_dir, exist_ok=True)
    log_path = os.path.join(log_dir, f"run-{datetime.datetime.now():%Y%m%d-%H%M%S}-{os.getpid()}.log")
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
    file_handler = logging.FileHandler(log_path)
    file_handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(file_handler)
    root.addHandler(logging.StreamHandler(sys.stderr) if verbose else ProgressHandler())
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
