"""Library patches: every change this project makes to a library's internals, one module
per library (a patch to a library lives in that library's module, nowhere else): `beam`,
`tfx`, `tfxio` (tfx_bsl's), `tft`, `tfdv`, `tfma`, with `equi_width` and `metric_updates`, the
two replacements of TFDV's and TFMA's code, beside them, and `stdlib`, the standard
library's, for the heavy imports only (`pipeline.run.process.frozen_imports`); `machinery`
applies and undoes them.

They remove per-run Python overhead; a run makes the same decisions and the same model
with and without them (compared artifact by artifact by `pipeline.inspect.parity`, in the
tests and at a million rows in docs/speedups-parity.md), and the same numbers except where
a library's result follows how the examples were batched (see `tfxio`): the last bits of
TFDV's and TFMA's sums, the values TFDV reads off its quantile sketch (within the
sketch's error), the order TFDV lists features in. They act only in the process that runs
the pipeline locally (`every_patch`, applied by `pipeline.run.process.local_runner`) and in
the Beam worker processes it starts (`in_workers`, by `pipeline.run.beam_worker`):
components in their own containers (Vertex AI, Dataflow workers) get the libraries as they
are, but for `defer_imports`, which changes no code that runs, only when a module a
library imports and no task uses is loaded: every `taxi-pipeline` command and the compiled
tasks' `pipeline.cloud.task` make it; and but for `stdlib`'s, which a compiled task's
heavy import has too (it changes how often the installed packages are read, not what is
read). Off with `TAXI_PIPELINE_SPEEDUPS=0`
(`machinery.ENV`) or `taxi-pipeline run --no-speedups` (which leaves `defer_imports` on).
What each saves: docs/performance.md#the-library-patches.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Callable, Dict, Iterator, List

from pipeline.patches import beam, machinery, tfdv, tfma, tft, tfx, tfxio


def every_patch() -> List[machinery.Patch]:
    """The patches of the process that runs the pipeline: every library's."""
    return beam.patches() + tfx.patches() + tfxio.patches() + tft.patches() + tfdv.patches() + tfma.patches()


def for_statistics_in_memory() -> List[machinery.Patch]:
    """The patches of `every_patch` that act on TFDV's in-memory statistics
    (`components.custom.span_statistics.statistics_in_memory`): what a process that
    computes them for the run must apply to compute the run's own
    (`pipeline.run.statistics_ahead`)."""
    return tfdv.patches()


def defer_imports() -> None:
    """The modules a library imports and no run calls (`tfx.deferred_modules`,
    `tfma.DEFERRED_MODULES`, `tfdv.DEFERRED_MODULES`, `beam.DEFERRED_MODULES`, Beam's
    Google Cloud IO block: `beam.deferred_io_block`) load when first used (`machinery.defer`,
    `machinery.defer_guarded`), and Beam's IPython check does not load IPython
    (`beam.ipython_check_without_import`); nothing where the environment turns the
    speed-ups off (`machinery.ENV`)."""
    if not machinery.enabled():
        return
    machinery.defer(tfx.deferred_modules() + tfdv.DEFERRED_MODULES + beam.DEFERRED_MODULES)
    tfma.defer_unused()
    beam.deferred_io_block()
    beam.ipython_check_without_import()


def _worker_libraries() -> Dict[str, Callable[[], List[machinery.Patch]]]:
    """The patches of the work done inside Beam's workers, by the library they change:
    TFDV's (StatisticsGen, the data gate) and TFMA's (the Evaluator)."""
    return {"tensorflow_data_validation": tfdv.patches, "tensorflow_model_analysis": tfma.patches}


@contextlib.contextmanager
def in_workers() -> Iterator[None]:
    """Within the block (a worker process's life), if the patches are on (the workers
    inherit the run's environment): Beam's, and each of `_worker_libraries`' right after
    the worker first imports it, so that an Evaluator's worker does not import TFDV for
    nothing nor a StatisticsGen's TFMA (docs/performance.md#patches-to-beam)."""
    if not machinery.enabled():
        yield
        return
    finder = machinery.PatchedOnImport(_worker_libraries())
    sys.meta_path.insert(0, finder)
    try:
        with machinery.patched(beam.patches()):
            yield
    finally:
        sys.meta_path.remove(finder)
