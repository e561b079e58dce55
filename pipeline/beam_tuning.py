"""Tuning of the Beam SDK for the Beam components LocalDagRunner runs in this process.

Each change removes per-run Python overhead that does not depend on the data; the
results of every Beam pipeline stay the same. They are applied by `local_runner.run`
only: components running in their own containers (Vertex AI, Dataflow workers) get
the SDK as it is.
"""

from __future__ import annotations

import functools
import weakref
from typing import Callable


def disable_in_memory_state_cache() -> None:
    """Applies `--max_cache_memory_usage_mb=0` to the in-process DirectRunner too.

    The in-memory worker ignores that option and always builds a 100 MB state cache
    (`STATE_CACHE_SIZE_MB`); sizing each side input for it costs Transform and the
    Evaluator ~10 s per run here (https://github.com/apache/beam/issues/30360).
    """
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    worker_handlers.STATE_CACHE_SIZE_MB = 0


def _memoized(original: Callable) -> Callable:
    """`original(obj, *args)` computed once per `obj` (held weakly, compared by Python's
    equality, which is identity for the DoFns and options objects this is used on) and `args`."""
    cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

    @functools.wraps(original)
    def memoized(obj, *args):
        try:
            results = cache.setdefault(obj, {})
        except TypeError:  # not weakly referenceable or not hashable: not cached
            return original(obj, *args)
        if args not in results:
            results[args] = original(obj, *args)
        return results[args]

    memoized.memoized = True
    return memoized


def memoize_dofn_specs() -> None:
    """Computes each DoFn's state and timer specs once instead of ~5 times.

    Beam derives them (`userstate.get_dofn_specs`) by inspecting the signature of
    every method of the DoFn, and asks again when the ParDo is built, validated,
    translated, visited by the DirectRunner and run: ~5,500 times a pipeline run,
    ~3 s of pure Python on this machine. The specs come from the DoFn's method
    signatures, which do not change once the object exists.
    """
    from apache_beam.transforms import userstate

    if not getattr(userstate.get_dofn_specs, "memoized", False):
        userstate.get_dofn_specs = _memoized(userstate.get_dofn_specs)


def memoize_option_views() -> None:
    """Builds each view of a pipeline's options once instead of on every transform applied.

    `PipelineOptions.view_as(cls)` builds an argument parser for `cls` and parses the
    pipeline's flags again on every call; Beam calls it twice for each transform it
    applies: ~3,000 times a run, ~1.5 s here. The views of one options object share
    one store of values (`_all_options`), so handing out the same view again reads and
    writes exactly what a new one would.
    """
    from apache_beam.options.pipeline_options import PipelineOptions

    if not getattr(PipelineOptions.view_as, "memoized", False):
        PipelineOptions.view_as = _memoized(PipelineOptions.view_as)


def apply() -> None:
    disable_in_memory_state_cache()
    memoize_dofn_specs()
    memoize_option_views()
