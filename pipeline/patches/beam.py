"""Patches to Apache Beam: Python that the in-memory DirectRunner pays again and again in
one local run, for answers that cannot change, and the command its `multi_processing`
workers start with. What each patch changes and why: `patches`.

When Beam changes under them,
tests/pipeline/patches/test_beam.py::test_every_patched_target_exists_with_the_shape_the_patch_expects
fails for a target that moved or changed its signature, and the other tests there for a
patch that no longer gives Beam's own answer (the same specs, option views, signatures,
pickled bytes) or no longer routes the workers' command. What each saves:
docs/performance.md#patches-to-beam.
"""

from __future__ import annotations

import bz2
import collections
import functools
import sys
import threading
import types
import weakref
from typing import Callable, List, Tuple

from pipeline.patches.machinery import Patch

# Beam's state samplers' period (Beam's own default is 200 ms; see `patches`).
SAMPLING_PERIOD_MS = 2

# The command the DirectRunner starts its `multi_processing` workers with, and this
# package's instead (`pipeline.run.beam_worker`).
_BEAM_WORKER = "%s -m apache_beam.runners.worker.sdk_worker_main"
_WORKER_WITH_SPEEDUPS = "%s -m pipeline.run.beam_worker"


def patches() -> List[Patch]:
    """`(owner, attribute, new value from the old one)` of each change to Beam.

    - `worker_handlers.STATE_CACHE_SIZE_MB`: the in-memory worker always builds a 100 MB
      state cache, and sizing each side input for it dominates Transform's and the
      Evaluator's Beam time (https://github.com/apache/beam/issues/30360).
    - `userstate.get_dofn_specs`: derives a DoFn's state and timer specs by inspecting
      every method's signature; Beam asks again when the ParDo is built, validated,
      translated, visited and run. The specs cannot change once the DoFn exists.
    - `PipelineOptions.view_as`: builds an argument parser and re-parses the flags on
      every call, twice per transform applied. The views of one options object share
      one store of values, so the same view handed out again reads and writes exactly
      what a new one would.
    - `get_signature` (as `core` and `decorators` call it): `inspect.signature` of a
      DoFn's bound methods, asked again for every copy of the DoFn Beam unpickles
      (building, translating, each stage's operations). A bound method's signature is
      its function's without the first parameter, whatever the instance: remembered by
      function.
    - `StateSampler.__init__`: each bundle's state sampler is a thread that sleeps up to
      200 ms between samples, and the bundle ends by joining it, so most bundles wait
      out the rest of a sleep. Sampled every `SAMPLING_PERIOD_MS` instead; the samples
      only feed Beam's own timing counters (the thread wakes without the GIL).
    - `bz2` as Beam's two picklers call it: `RememberingBz2`.
    - `SubprocessSDKEnvironment.from_command_string`: the DirectRunner's
      `multi_processing` workers start as `pipeline.run.beam_worker`, Beam's own worker
      with the patches that act on their work (`pipeline.patches.in_workers`), instead of
      Beam's `sdk_worker_main`; any other command is left as it is.
    """
    from apache_beam.internal import cloudpickle_pickler, dill_pickler
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.fn_api_runner import worker_handlers
    from apache_beam.runners.worker import statesampler
    from apache_beam.transforms import core, environments, userstate
    from apache_beam.typehints import decorators

    return [
        (worker_handlers, "STATE_CACHE_SIZE_MB", lambda old: 0),
        (userstate, "get_dofn_specs", _memoized),
        (PipelineOptions, "view_as", _memoized),
        (statesampler.StateSampler, "__init__", _sampling_every(SAMPLING_PERIOD_MS)),
        (core, "get_signature", _method_signatures_remembered),
        (decorators, "get_signature", _method_signatures_remembered),
        (cloudpickle_pickler, "bz2", lambda old: RememberingBz2()),
        (dill_pickler, "bz2", lambda old: RememberingBz2()),
        (
            environments.SubprocessSDKEnvironment,
            "from_command_string",
            lambda old: classmethod(_workers_with_speedups(old.__func__)),
        ),
    ]


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

    return memoized


def _workers_with_speedups(original: Callable) -> Callable:
    @functools.wraps(original)
    def from_command_string(cls, command_string):
        if command_string == _BEAM_WORKER % sys.executable:
            command_string = _WORKER_WITH_SPEEDUPS % sys.executable
        return original(cls, command_string)

    return from_command_string


class RememberingBz2:
    """bz2's `compress` and `decompress`, each answer remembered by its input, for Beam's
    pickler (`patches`): the same bytes, byte for byte, as bz2's, so anything that
    reads them elsewhere reads them as before.

    Beam compresses each pickled function with bz2 at level 9 and decompresses it where it
    runs; in one local run it pickles the same DoFns and CombineFns again and again (when a
    ParDo is built, to check that it pickles; into the pipeline's proto; for each bundle's
    operations), each time at bz2's cost (docs/performance.md#patches-to-beam). At most
    `LIMIT_BYTES` of answers are kept (the oldest go first); a payload is a few kilobytes."""

    LIMIT_BYTES = 64 << 20

    def __init__(self):
        self._lock = threading.Lock()
        self._answers: "collections.OrderedDict[Tuple[str, bytes, int], bytes]" = collections.OrderedDict()
        self._size = 0

    def _remembered(self, key: Tuple[str, bytes, int], compute: Callable[[], bytes]) -> bytes:
        with self._lock:
            found = self._answers.get(key)
            if found is not None:
                self._answers.move_to_end(key)
                return found
        found = compute()
        with self._lock:
            if key not in self._answers:
                self._answers[key] = found
                self._size += len(key[1]) + len(found)
            while self._size > self.LIMIT_BYTES and self._answers:
                (_, old, _), answer = self._answers.popitem(last=False)
                self._size -= len(old) + len(answer)
        return found

    def compress(self, data: bytes, compresslevel: int = 9) -> bytes:
        data = bytes(data)
        compressed = self._remembered(("c", data, compresslevel), lambda: bz2.compress(data, compresslevel))
        if len(compressed) + len(data) <= self.LIMIT_BYTES:  # its decompression is known too
            self._remembered(("d", compressed, 0), lambda: data)
        return compressed

    def decompress(self, data: bytes) -> bytes:
        data = bytes(data)
        return self._remembered(("d", data, 0), lambda: bz2.decompress(data))


def _method_signatures_remembered(original: Callable) -> Callable:
    remembered: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

    @functools.wraps(original)
    def get_signature(func):
        function = getattr(func, "__func__", None)
        if not (isinstance(func, types.MethodType) and isinstance(function, types.FunctionType)):
            return original(func)
        found = remembered.get(function)
        if found is None:
            found = remembered[function] = original(func)
        return found

    return get_signature


def _sampling_every(period_ms: int) -> Callable[[Callable], Callable]:
    """A replacement for `StateSampler.__init__` that samples every `period_ms`."""

    def make(original: Callable) -> Callable:
        @functools.wraps(original)
        def init(self, prefix, counter_factory, sampling_period_ms=period_ms):
            original(self, prefix, counter_factory, sampling_period_ms=sampling_period_ms)

        return init

    return make
