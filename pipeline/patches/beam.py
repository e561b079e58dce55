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
import inspect
import sys
import threading
import types
import weakref
from typing import Callable, Dict, List, Optional, Tuple

from pipeline.patches import machinery
from pipeline.patches.machinery import Patch

# The command the DirectRunner starts its `multi_processing` workers with, and this
# package's instead (`pipeline.run.beam_worker`).
_BEAM_WORKER = "%s -m apache_beam.runners.worker.sdk_worker_main"
_WORKER_WITH_SPEEDUPS = "%s -m pipeline.run.beam_worker"


# Beam's `apache_beam/io/__init__.py` ends with its Google Cloud integrations in a block
# it passes over without them (`except ImportError`): BigQuery's and Pub/Sub's transforms,
# `gcsio` and the cross-language transforms, imported with every `import apache_beam`
# (0.23 s of `import apache_beam` alone; in a run, where TensorFlow and TFX import much of
# the same, 103 modules and about 0.1 s) and called by no local run. `deferred_io_block`
# defers them (`machinery.defer_guarded`): the block's first module, and `load_io_block`
# runs the block as Beam's code does.
IO_PACKAGE = "apache_beam.io"
IO_BLOCK_STAR_IMPORTS = ("apache_beam.io.gcp.bigquery", "apache_beam.io.gcp.pubsub")
IO_BLOCK_LAST_STAR_IMPORT = "apache_beam.transforms.xlang.io"


# The Pub/Sub client: Beam's `iobase.Write` imports Beam's Pub/Sub module to ask whether a
# sink is its Pub/Sub sink, the first time any pipeline writes files (Transform's first
# write), and that module imports the client (0.2 s here, its gRPC stubs and a scan of the
# installed packages), which only Beam's Pub/Sub transforms call. Deferred: it loads when
# a name of it is first asked for (`machinery.defer`).
DEFERRED_MODULES = ("google.cloud.pubsub",)


def load_io_block(io: types.ModuleType) -> None:
    """The block of `apache_beam/io/__init__.py` it stands for, run into `io` in Beam's
    order: two `import *`, `from apache_beam.io.gcp import gcsio`, a third `import *`;
    what an `ImportError` stops leaves the rest unbound, as in Beam's block."""
    try:
        machinery.star_import(io, IO_BLOCK_STAR_IMPORTS)
        from apache_beam.io.gcp import gcsio

        io.gcsio = gcsio
        machinery.star_import(io, (IO_BLOCK_LAST_STAR_IMPORT,))
    except ImportError:
        return


def deferred_io_block() -> None:
    """Beam's Google Cloud IO block imported when `apache_beam.io` is first asked for one
    of its names (see `IO_PACKAGE`)."""
    machinery.defer_guarded(IO_PACKAGE, IO_BLOCK_STAR_IMPORTS[0], load_io_block)


def patches() -> List[Patch]:
    """`(owner, attribute, new value from the old one)` of each change to Beam.

    - `worker_handlers.STATE_CACHE_SIZE_MB`: the in-memory worker always builds a 100 MB
      state cache, and sizing each side input for it dominates Transform's and the
      Evaluator's Beam time (https://github.com/apache/beam/issues/30360).
    - `userstate.get_dofn_specs`: derives a DoFn's state and timer specs by inspecting
      every method's signature; Beam asks again when the ParDo is built, validated,
      translated, visited and run. The specs cannot change once the DoFn exists.
    - `PipelineOptions.view_as`: builds an argument parser and re-parses the flags on
      every call, twice per transform applied. The views of one options object share one
      store of values: the same view handed out again reads and writes what a new one would.
    - `get_signature` (as `core` and `decorators` call it): `inspect.signature` of a
      DoFn's bound methods, asked again for every copy Beam unpickles (building,
      translating, each stage's operations); a bound method's is its function's less the
      first parameter, whatever the instance: remembered by function.
    - `StateSampler.start` and `stop`: without the sampling thread
      (`_started_without_a_thread`).
    - `bz2` as Beam's two picklers call it: `RememberingBz2`.
    - `_find_imported_submodules` of the cloudpickle Beam's pickler uses: a walk of all
      of `sys.modules` for each module a pickled lambda's globals hold; answered from an
      index (`SubmoduleIndex`), the same modules in the same order.
    - `core._check_fn_use_yield_and_return`: the source of a DoFn's `process` read each time
      a ParDo is built; answered once per function and class (`_answered_once_per_dofn_class`).
    - `pickler` as `bundle_processor` and `operations` name it: `HandedOverDoFns`, the
      DoFn of each ParDo a bundle runs handed to its operation without the pickling
      round trip Beam makes of it.
    - `SubprocessSDKEnvironment.from_command_string`: the DirectRunner's
      `multi_processing` workers start as `pipeline.run.beam_worker`, Beam's own worker
      with the patches that act on their work (`pipeline.patches.in_workers`), instead of
      Beam's `sdk_worker_main`; any other command is left as it is.
    """
    from apache_beam.internal import cloudpickle_pickler, dill_pickler
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.fn_api_runner import worker_handlers
    from apache_beam.runners.worker import bundle_processor, operations, statesampler
    from apache_beam.transforms import core, environments, userstate
    from apache_beam.typehints import decorators

    handed_over = HandedOverDoFns(bundle_processor.pickler)
    return [
        (worker_handlers, "STATE_CACHE_SIZE_MB", lambda old: 0),
        (userstate, "get_dofn_specs", _memoized),
        (PipelineOptions, "view_as", _memoized),
        (statesampler.StateSampler, "start", lambda old: _started_without_a_thread),
        (statesampler.StateSampler, "stop", lambda old: _stopped_without_a_thread),
        (core, "get_signature", _method_signatures_remembered),
        (decorators, "get_signature", _method_signatures_remembered),
        (cloudpickle_pickler, "bz2", lambda old: RememberingBz2()),
        (submodule_scan_owner(), "_find_imported_submodules", lambda old: SubmoduleIndex().find),
        (core, "_check_fn_use_yield_and_return", _answered_once_per_dofn_class),
        (dill_pickler, "bz2", lambda old: RememberingBz2()),
        (bundle_processor, "pickler", lambda old: handed_over),
        (operations, "pickler", lambda old: handed_over),
        (
            environments.SubprocessSDKEnvironment,
            "from_command_string",
            lambda old: classmethod(_workers_with_speedups(old.__func__)),
        ),
    ]


# Where Beam's `is_in_ipython` is called by the name each module binds.
IPYTHON_CHECK_CALLERS = ("apache_beam.utils.interactive_utils", "apache_beam.pipeline")


def ipython_check_patches() -> List[Patch]:
    """Beam's `is_in_ipython` as `IPYTHON_CHECK_CALLERS` call it, answered without importing
    IPython where it has not run (`_not_in_ipython_before_it_ran`)."""
    return [(sys.modules[name], "is_in_ipython", _not_in_ipython_before_it_ran) for name in IPYTHON_CHECK_CALLERS]


def ipython_check_without_import() -> None:
    """`ipython_check_patches` applied for the process's life as each caller is imported:
    part of `pipeline.patches.defer_imports`, which leaves IPython unrun. Not a speed-up
    only: Beam calls the check inside a bare `except`, so IPython's deferred import run
    there would swallow a SIGTERM that lands in it (the signal is raised at the import's
    next import, `pipeline.interrupts`)."""
    for name in IPYTHON_CHECK_CALLERS:
        machinery.after_import(name, _answer_without_import)


def _answer_without_import(module: types.ModuleType) -> None:
    if not getattr(module.is_in_ipython, "answers_without_import", False):
        machinery.apply([(module, "is_in_ipython", _not_in_ipython_before_it_ran)])


def _not_in_ipython_before_it_ran(original: Callable[[], bool]) -> Callable[[], bool]:
    """Beam's `is_in_ipython`, asked at the end of every pipeline's run and for every
    transform applied, imports IPython to ask whether this is an IPython session. A session
    imports IPython before any code of its own, so where IPython has not run (never
    imported, or bound by `pipeline.patches.defer_imports` and not yet used) the answer is
    no, given without importing it; elsewhere it is Beam's."""
    if getattr(original, "answers_without_import", False):
        return original

    @functools.wraps(original)
    def is_in_ipython() -> bool:
        ipython = sys.modules.get("IPython")
        if ipython is None or type(ipython) is machinery.DeferredModule:
            return False
        return original()

    is_in_ipython.answers_without_import = True
    return is_in_ipython


def submodule_scan_owner() -> types.ModuleType:
    """The module whose `_find_imported_submodules` Beam's pickler calls: where the
    cloudpickle it uses defines its pickler (cloudpickle 2's `cloudpickle_fast`, the one
    module of Beam's copy)."""
    from apache_beam.internal import cloudpickle_pickler

    return sys.modules[cloudpickle_pickler.cloudpickle.CloudPickler.__module__]


class SubmoduleIndex:
    """cloudpickle's `_find_imported_submodules(code, top_level_dependencies)` (cloudpickle's
    own on Beam 2.59, Beam's copy of it on 2.77), which for every function pickled by value
    (a lambda, a closure) walked the whole of `sys.modules` once per module among the
    function's globals, thousands of names, for each of Beam's and TFMA's lambdas: the
    loaded submodules of each package among a function's globals whose dotted names the
    function's code can spell, in `sys.modules`' order, from an index of `sys.modules`'
    names by each of their parent packages. The index is kept while `sys.modules` holds
    the same names in the same order (compared as a list, at C speed) and made again
    when it does not. A key of `sys.modules` that is not a string is passed over (only
    older pytest puts one there, None, which cloudpickle passes over too)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._names: List[object] = []
        self._under: Dict[str, List[str]] = {}

    def _index(self) -> Dict[str, List[str]]:
        """The index, brought up to `sys.modules`; the caller holds the lock."""
        names = list(sys.modules)
        if names == self._names:
            return self._under
        # Imports add names at the end: index only those. Otherwise index anew.
        if names[:len(self._names)] == self._names:
            added = names[len(self._names):]
        else:
            self._under, added = {}, names
        for name in added:
            if not isinstance(name, str):  # older pytest puts None in sys.modules
                continue
            parts = name.split(".")
            for end in range(1, len(parts)):
                self._under.setdefault(".".join(parts[:end]), []).append(name)
        self._names = names
        return self._under

    def find(self, code: types.CodeType, top_level_dependencies) -> List[types.ModuleType]:
        packages = [dependency for dependency in top_level_dependencies
                    if isinstance(dependency, types.ModuleType) and getattr(dependency, "__package__", None)]
        if not packages:
            return []
        names = set(code.co_names)
        with self._lock:
            under = self._index()
            found = [name for package in packages for name in under.get(package.__name__, ())
                     if not set(name[len(package.__name__) + 1:].split(".")) - names]
        return [sys.modules[name] for name in found]


def _remembered_by(key_of: Callable[[object], object]) -> Callable[[Callable], Callable]:
    """A replacement for a function of one argument that remembers its answer by
    `key_of(argument)`: `(held weakly, compared by equality)`, or None for an argument the
    function answers each time."""

    def make(original: Callable) -> Callable:
        answers: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

        @functools.wraps(original)
        def remembered(argument):
            key = key_of(argument)
            if key is None:
                return original(argument)
            held, compared = key
            found = answers.setdefault(held, {})
            if compared not in found:
                found[compared] = original(argument)
            return found[compared]

        return remembered

    return make


def _process_and_class(fn: object) -> object:
    """A bound `process`'s function as its source is read (`inspect.unwrap`: a decorator's
    wrapper reads the wrapped function's), and its instance's class, which Beam 2.77's
    check names in a warning; None for anything else."""
    function = getattr(fn, "__func__", fn)
    if not isinstance(function, types.FunctionType):
        return None
    return inspect.unwrap(function), type(getattr(fn, "__self__", None))


def _function_of_method(func: object) -> object:
    function = getattr(func, "__func__", None)
    if isinstance(func, types.MethodType) and isinstance(function, types.FunctionType):
        return function, None
    return None


# Beam's check of a DoFn's `process` that both yields and returns reads its source
# (`inspect.getsourcelines`) each time a ParDo of it is built: the answer follows from the
# source, and Beam 2.77's warning about a `return None` from the class (so it is logged
# once per class, where Beam logged it for each ParDo built).
_answered_once_per_dofn_class = _remembered_by(_process_and_class)
# A bound method's signature is its function's without the first parameter, whatever the
# instance.
_method_signatures_remembered = _remembered_by(_function_of_method)


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


class Rewindowed(bytes):
    """What `HandedOverDoFns.dumps` gives for a ParDo's DoFn data with its windowing set:
    the bytes of the data as the pipeline pickled it (windowing not set), with the
    windowing to set, and the objects of the one unpickling the bundle processor made,
    for the first reader (then None)."""

    windowing: object
    objects: Optional[tuple]


class HandedOverDoFns:
    """Beam's pickler as the bundle processor and the operations use it, less a round trip.

    To build a ParDo's operation for a bundle, Beam unpickles the DoFn's data (DoFn, its
    arguments, side input tags, windowing) from the pipeline's proto; where its windowing
    is not set, it pickles the data again with the windowing set (cloudpickle, then bz2
    at level 9), and the operation unpickles that twice (when it is made, and at its
    `setup`). Here that second pickling gives a `Rewindowed` instead: the first reader
    gets the objects the bundle processor unpickled and no longer uses, each later reader
    a new unpickling of the pipeline's bytes; both with the windowing set. What every
    reader gets is what Beam's round trip gives, but for the windowing, which is the very
    object the bundle processor set where Beam's gives a copy of it (Beam's windowings are
    values, shared by every user of one windowing strategy).

    Any other pickling and unpickling is Beam's own. Only data Beam has just unpickled here
    (the last unpickling on this thread, a tuple with no windowing) is recognized, by the
    identity of its parts."""

    def __init__(self, pickler: types.ModuleType):
        self._pickler = pickler
        self._last = threading.local()

    def __getattr__(self, name: str) -> object:
        return getattr(self._pickler, name)

    def loads(self, encoded, *args, **kwargs):
        if isinstance(encoded, Rewindowed):
            objects, encoded.objects = encoded.objects, None
            if objects is None:
                objects = self._pickler.loads(bytes(encoded), *args, **kwargs)[:-1]
            return objects + (encoded.windowing,)
        data = self._pickler.loads(encoded, *args, **kwargs)
        without_windowing = isinstance(encoded, bytes) and type(data) is tuple and len(data) > 1 and data[-1] is None
        self._last.unpickled = (encoded, data) if without_windowing else None
        return data

    def dumps(self, obj, *args, **kwargs):
        from apache_beam.transforms.core import Windowing

        unpickled, self._last.unpickled = getattr(self._last, "unpickled", None), None
        if (unpickled is not None and not args and not kwargs and type(obj) is tuple
                and len(obj) == len(unpickled[1]) and isinstance(obj[-1], Windowing)
                and all(mine is its for mine, its in zip(obj[:-1], unpickled[1][:-1]))):
            handed = Rewindowed(unpickled[0])
            handed.windowing, handed.objects = obj[-1], obj[:-1]
            return handed
        return self._pickler.dumps(obj, *args, **kwargs)


def _started_without_a_thread(self) -> None:
    """Beam's `StateSampler.start` less the start of its sampling thread.

    Each bundle's sampler started a thread that wakes every 2 to 200 ms to add the time
    since its last wake to the running step, and the bundle ended by joining it (the rest
    of a sleep); a Beam node runs dozens of stages. Its samples feed only Beam's
    execution-time counters, which a run never reads, and the lull report of workers with
    a status endpoint (the DirectRunner's have none)."""
    from apache_beam.runners.worker import statesampler

    self.tracked_thread = threading.current_thread()
    statesampler.set_current_tracker(self)
    self.started = True


def _stopped_without_a_thread(self) -> None:
    """Beam's `StateSampler.stop` less the join of its sampling thread (which `stop` makes
    end by setting `finished`)."""
    from apache_beam.runners.worker import statesampler

    statesampler.set_current_tracker(None)
    self.finished = True
