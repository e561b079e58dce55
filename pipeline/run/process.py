"""The life of a process that runs the pipeline, from its heavy imports to its end.

- `frozen_imports`: the heavy imports (TensorFlow's, then `local_runner`'s: TFX, Beam, TFMA
  and TFDV) with the cyclic GC paused, then `gc.freeze()`: the long-lived objects they
  create (modules, classes, protos) are not rescanned by every later full collection.
- `local_runner`: within the run, the library patches (`pipeline.patches`), and the
  collector's first threshold at 10,000 allocations instead of 700 (`GC_THRESHOLDS`).
- `exit_process`: the process ends with `os._exit` once every output is written and
  closed, instead of tearing down an interpreter with TensorFlow and Beam loaded.
  The compiled pipeline's tasks end the same way (`pipeline.cloud.task`).
- `after_exit`: at a terminal, the run's page is drawn after the exit status is known, by
  a detached child: the prompt comes back while a placeholder page that reloads itself
  stands in for it for a few seconds. Piped or redirected output (a scheduler, a script,
  a test) gets the command's end only when the page is written.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import logging
import os
import signal
import sys
import warnings
from types import ModuleType
from typing import Callable, Iterator, List

from pipeline import patches
from pipeline.patches import machinery, stdlib

LOCAL_RUNNER = "pipeline.run.local_runner"
# The cyclic GC's thresholds during a run (Python's are 700, 10, 10; see `collecting_less_often`).
GC_THRESHOLDS = (10_000, 10, 10)
# The longest the detached child of `exit_process` may take before SIGALRM ends it.
DETACHED_SECONDS = 300

# Work for after the exit status is known (`after_exit`), done by `exit_process`, and
# whether this process ends through it (`ends_with_exit_process`).
_after_exit: List[Callable[[], object]] = []
_ends_here = [False]


@contextlib.contextmanager
def frozen_imports(on: bool = True) -> Iterator[None]:
    """Within the block, when `on`, the cyclic GC paused and the standard library's patches
    for imports (`pipeline.patches.stdlib`); on leaving, `gc.freeze()`. An import of
    TensorFlow alone creates objects enough for hundreds of collections, each of which
    rescans all it created so far: a quarter of the import's time."""
    if not on:
        yield
        return
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        with machinery.patched(stdlib.patches()):
            yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


def import_frozen(name: str, on: bool = True) -> ModuleType:
    """Imports `name` within `frozen_imports(on)`."""
    with frozen_imports(on):
        return importlib.import_module(name)


@contextlib.contextmanager
def local_runner(on: bool) -> Iterator[ModuleType]:
    """`pipeline.run.local_runner`, and within the block the library patches when `on`.

    The patches and the collector's thresholds are undone on leaving, so
    nothing outside the run sees them.
    """
    if not on:
        yield importlib.import_module(LOCAL_RUNNER)
        return
    patches.defer_imports()
    module = import_frozen(LOCAL_RUNNER)
    with machinery.patched(patches.every_patch()), collecting_less_often():
        yield module


@contextlib.contextmanager
def collecting_less_often() -> Iterator[None]:
    """The cyclic GC's thresholds at `GC_THRESHOLDS` within the block.

    At Python's (700, 10, 10) a run makes full collections again and again, each
    scanning everything the nodes left alive (TF graphs, Beam pipelines); at these, a
    short run makes none and a long one far fewer, for a little more peak memory
    (docs/performance.md#the-runs-process).
    """
    before = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def ends_with_exit_process() -> None:
    """Says this process ends through `exit_process` (the command line's entry point)."""
    _ends_here[0] = True


def can_detach() -> bool:
    """Whether work may be left to `after_exit`'s detached child: the process ends
    through `exit_process`, the patches are on and a person waits at a terminal."""
    return _ends_here[0] and machinery.enabled() and hasattr(os, "fork") and sys.stdout.isatty()


def after_exit(work: Callable[[], object]) -> None:
    """`work` runs once the exit status is known (`exit_process`): in a detached child
    when `can_detach`, else before the process ends. It must catch its own errors."""
    _after_exit.append(work)


def _detached(work: List[Callable[[], object]]) -> bool:
    """Forks a child that does `work` with no terminal, then ends; False if it could not."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork of a threaded process
        try:
            pid = os.fork()
        except OSError:
            return False
    if pid:
        return True
    try:  # the child: its own session, no terminal, a bounded life
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        signal.alarm(DETACHED_SECONDS)
        for job in work:
            job()
    finally:
        logging.shutdown()
        os._exit(0)


def exit_process(code: int, on: bool) -> None:
    """Ends the process with `code`: at once when `on`, every output being written and
    closed; work left by `after_exit` is done first, or by a detached child (`can_detach`)."""
    work, _after_exit[:] = list(_after_exit), []
    sys.stdout.flush()
    sys.stderr.flush()
    if work and not (can_detach() and _detached(work)):
        for job in work:
            job()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    if on:
        remove_generated_sources()
        os._exit(code)
    sys.exit(code)


# The names AutoGraph gives the modules it generates (and their files) when it converts a
# Python function for a `tf.function`: Transform's and the Trainer's, a few per run.
GENERATED_PREFIX = "__autograph_generated_file"


def remove_generated_sources() -> None:
    """Removes the source files of the modules AutoGraph generated in this process, and
    their cached bytecode, from the temporary folder: the one thing that the exit handlers
    `os._exit` skips would have cleaned up (a year of hourly runs would leave 30,000
    files there)."""
    folders = set()
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None) if name.startswith(GENERATED_PREFIX) else None
        if path and os.path.basename(path).startswith(GENERATED_PREFIX):
            # With the bytecode Python may have cached beside it (`__pycache__/`).
            for generated in (path, getattr(module, "__cached__", None)):
                if generated:
                    with contextlib.suppress(OSError):
                        os.remove(generated)
                        folders.add(os.path.dirname(generated))
    for folder in folders:
        if os.path.basename(folder) == "__pycache__":
            with contextlib.suppress(OSError):  # not empty: another process's files
                os.rmdir(folder)
