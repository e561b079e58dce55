"""Loading TensorFlow, TFX, Beam, TFMA and TFDV once a run is known to be needed."""

from __future__ import annotations

import gc
import importlib
from types import ModuleType

LOCAL_RUNNER = "pipeline.local_runner"


def local_runner() -> ModuleType:
    """`pipeline.local_runner`, imported with Python's cyclic GC paused, then frozen.

    The import creates ~1.2 million objects (modules, classes, functions, protos) that
    live as long as the process. With the GC running, the import alone triggers about
    nine full collections over them, and each full collection during the run scans
    them again: ~4 s of a cold run on this machine. None of them is garbage, so the GC
    is paused while they load and `gc.freeze()` then moves them out of every later
    collection. Objects created afterwards are collected as usual.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return importlib.import_module(LOCAL_RUNNER)
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()
