"""Patches to TFX: work handed on as soon as a node has run (`when_done`), no archive
of TFX built for Beam workers that never read it, and no import of what the pipeline never
runs until it runs (`deferred_modules`, bound by `pipeline.patches.defer_imports`). What
each patch changes and why: `patches`.

The serving check's probe, started once the data gate let the run through, is handed the
model this way as soon as the Trainer has written it (`pipeline.run.local_runner`): it
loads it and replays its warmup requests while the Evaluator runs, on the core the
Evaluator leaves idle.

When TFX changes under them,
tests/pipeline/patches/test_tfx.py::test_the_launcher_patch_targets_tfx_s_publishing_of_a_run_node_only
fails for a launcher whose publishing method moved, changed its signature, or is called
elsewhere than once after the executor ran, and
tests/pipeline/patches/test_tfx.py::test_tfx_archives_itself_only_for_workers_beyond_this_environment
builds a Beam executor through TFX's own code, with the patch and without, and
tests/pipeline/patches/test_tfx.py::test_the_deferred_modules_are_imported_by_tfx_and_load_on_first_use_only
imports the local runner with `pipeline.patches.defer_imports`, then traces a function
with autograph, which asks every module for its `__file__`. What each saves:
docs/performance.md#patches-to-tfx.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import Callable, Dict, Iterator, List, Tuple

from pipeline.patches.machinery import Patch

# TFX modules that every run imports and never runs (`deferred_modules`): the
# InfraValidator's Kubernetes runner, which imports the Kubernetes client; and on TFX
# before 1.17, `tfx.components` itself, the package: LocalDagRunner's input resolution
# imports the Evaluator's constants from it, and its `__init__` imports every component,
# the Tuner's with Keras Tuner and, through it, Keras 3 on that Keras 2 stack. The
# pipeline imports each component from its own module, which leaves that `__init__`
# unrun. TFX 1.21's `__init__` also sets TFMA's config classes on TFMA's module (its
# Evaluator component reads `tfma.EvalConfig`); the versions between were not checked, so
# from 1.17 on it runs.
DEFERRED_MODULES = ("tfx.components.infra_validator.model_server_runners.kubernetes_runner",)
DEFERRED_PACKAGE, PACKAGE_DEFERRED_BEFORE = "tfx.components", (1, 17)


def deferred_modules() -> Tuple[str, ...]:
    """The modules of TFX a run defers on this stack (`DEFERRED_MODULES`), the package first."""
    from components import compat

    package = (DEFERRED_PACKAGE,) if compat.TFX_VERSION < PACKAGE_DEFERRED_BEFORE else ()
    return package + DEFERRED_MODULES

# Work for once a node has run (`when_done`): node id -> callables of its outputs.
_when_done: Dict[str, List[Callable[[dict], object]]] = {}


def patches() -> List[Patch]:
    """`(owner, attribute, new value from the old one)` of each change to TFX.

    - `Launcher._publish_successful_execution`: LocalDagRunner (and BeamDagRunner) launch
      one node after another and say nothing in between; once a node's executor has run
      and its outputs are published, the work `when_done` left for that node is done with
      those outputs, before the next node starts. (A node whose outputs came from the
      cache publishes through another path: its outputs were written by an earlier run.)
    - `dependency_utils.make_beam_dependency_flags`: given no package, setup file or
      image for Beam's workers (this package installed from a wheel rather than from
      source), TFX copies itself into a new temporary folder and builds an archive of it
      before every Beam component, and leaves both in the temporary folder. With a
      runner that keeps Beam's workers here (`pipeline.beam.options.runs_here`) they never read it.
    """
    from tfx.orchestration.portable import launcher
    from tfx.utils import dependency_utils

    return [
        (launcher.Launcher, "_publish_successful_execution", _calling_back),
        (dependency_utils, "make_beam_dependency_flags", _archive_for_remote_workers_only),
    ]


@contextlib.contextmanager
def when_done(node_id: str, work: Callable[[dict], object]) -> Iterator[None]:
    """Within the block, `work(outputs)` runs as soon as node `node_id` of a local run
    has run and published its outputs (not when they came from the cache), if the
    patches are on (`patches`): for work ahead of a later node, which must not
    depend on it. Errors in `work` are logged, never raised."""
    _when_done.setdefault(node_id, []).append(work)
    try:
        yield
    finally:
        works = _when_done[node_id]
        works.remove(work)
        if not works:
            del _when_done[node_id]


def _calling_back(original: Callable) -> Callable:
    @functools.wraps(original)
    def publish(self, execution_id, contexts, output_dict, executor_output):
        original(self, execution_id, contexts, output_dict, executor_output)
        node_id = self._pipeline_node.node_info.id
        for work in list(_when_done.get(node_id, ())):
            try:
                work(output_dict)
            except Exception:  # work ahead of time: the node that needs it does it itself
                logging.exception("work after node %s failed", node_id)

    return publish


def _archive_for_remote_workers_only(original: Callable) -> Callable:
    @functools.wraps(original)
    def make_beam_dependency_flags(beam_pipeline_args):
        from pipeline.beam import options as beam_options

        if beam_options.runs_here(beam_pipeline_args):
            return list(beam_pipeline_args)
        return original(beam_pipeline_args)

    return make_beam_dependency_flags
