"""Tuning of the Beam SDK for the Beam components LocalDagRunner runs in this process.

Both changes remove per-run Python overhead that does not depend on the data; the
results of every Beam pipeline stay the same. They are applied by `local_runner.run`
only: components running in their own containers (Vertex AI, Dataflow workers) get
the SDK as it is.
"""

from __future__ import annotations

import functools
import weakref
from typing import Callable, Tuple


def disable_in_memory_state_cache() -> None:
    """Applies `--max_cache_memory_usage_mb=0` to the in-process DirectRunner too.

    The in-memory worker ignores that option and always builds a 100 MB state cache
    (`STATE_CACHE_SIZE_MB`); sizing each side input for it costs Transform and the
    Evaluator ~10 s per run here (https://github.com/apache/beam/issues/30360).
    """
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    worker_handlers.STATE_CACHE_SIZE_MB = 0


def _memoized(original: Callable) -> Callable:
    """`original(dofn)` computed once per DoFn object (by identity, weakly held)."""
    cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

    @functools.wraps(original)
    def get_dofn_specs(dofn) -> Tuple[set, set]:
        try:
            return cache[dofn]
        except KeyError:
            pass
        except TypeError:  # not weakly referenceable or not hashable: not cached
            return original(dofn)
        specs = original(dofn)
        cache[dofn] = specs
        return specs

    return get_dofn_specs


def memoize_dofn_specs() -> None:
    """Computes each DoFn's state and timer specs once instead of ~5 times.

    Beam derives them (`userstate.get_dofn_specs`) by inspecting the signature of
    every method of the DoFn, and asks again when the ParDo is built, validated,
    translated, visited by the DirectRunner and run: ~5,500 times a pipeline run,
    ~3 s of pure Python on this machine. The specs come from the DoFn's method
    signatures, which do not change once the object exists.
    """
    from apache_beam.transforms import userstate

    if not hasattr(userstate.get_dofn_specs, "__wrapped__"):
        userstate.get_dofn_specs = _memoized(userstate.get_dofn_specs)


def apply() -> None:
    disable_in_memory_state_cache()
    memoize_dofn_specs()
