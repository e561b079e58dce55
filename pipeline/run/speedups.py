"""Every speed-up that reaches into a library's internals, in one place, switchable off.

They remove per-run Python overhead; a run makes the same decisions and the same model
with and without them (compared artifact by artifact by `pipeline.inspect.parity`, in the
tests and at a million rows in docs/speedups-parity.md), and the same numbers except where
a library's result follows how the examples were batched (see `tfxio_patches`): the last
bits of TFDV's and TFMA's sums, the values TFDV reads off its quantile sketch (within the
sketch's error), the order TFDV lists features in. They act only in
the process that runs the pipeline locally and in the Beam worker processes it starts
(`pipeline.run.beam_worker`): components in their own containers (Vertex AI, Dataflow
workers) get the libraries as they are.

Off with `TAXI_PIPELINE_SPEEDUPS=0` in the environment (or `taxi-pipeline run
--no-speedups`), for example to rule them out when something behaves oddly.

- The heavy imports (TensorFlow, TFX, Beam, TFMA, TFDV) run with the cyclic GC paused,
  then `gc.freeze()`: the long-lived objects they create (modules, classes, protos) are
  not rescanned by every later full collection. During the run the collector's first
  threshold is 10,000 allocations instead of 700 (`GC_THRESHOLDS`).
- Beam's in-memory DirectRunner: its state cache is sized 0 (it ignores
  `--max_cache_memory_usage_mb`), and two pure functions Beam calls thousands of times
  per pipeline are memoized: `userstate.get_dofn_specs`, `PipelineOptions.view_as` and
  the signatures of DoFns' methods;
  its bundles' state samplers sample every 2 ms instead of 200, so a bundle's end does
  not wait out a sampler's sleep; its pickler's bz2 answers are remembered (the same
  functions are pickled and unpickled many times in a run).
- TFDV's equi-width histograms are computed from arrays (`tfdv_patches`), to the same
  bits.
- TFMA's metrics share each example's label, prediction and weight, extracted once per
  example instead of once per metric and slice, and TFMA's commonest combiners (example
  count, confusion matrices, calibration and its histogram) add them directly, to the
  same bits (`tfma_patches`, `pipeline.patches.metric_updates`).
- The DirectRunner's `multi_processing` workers (the Evaluator's from 300,000 rows on,
  any component's the user sends there) run with Beam's, TFDV's and TFMA's speed-ups
  too (`in_workers`).
- StatisticsGen, Transform and the Evaluator read an Examples artifact a file at a time
  by TensorFlow's record reader, into lists of records for tfx_bsl's own decoder
  (`tfxio_patches`): the same rows, without a Beam element per record.
- The serving check's probe, started with the run, is handed the model as soon as the
  Trainer has written it (`when_done`): it loads it and replays its warmup requests
  while the Evaluator runs, on the core the Evaluator leaves idle.
- The process ends with `os._exit` once every output is written and closed, instead of
  tearing down an interpreter with TensorFlow and Beam loaded.
- At a terminal, the run's page is drawn after the exit status is known, by a detached
  child (`after_exit`): the prompt comes back while a placeholder page that reloads
  itself stands in for it for a few seconds. Piped or redirected output (a scheduler, a
  script, a test) gets the command's end only when the page is written, as before.
"""

from __future__ import annotations

import bz2
import collections
import contextlib
import functools
import gc
import importlib
import importlib.abc
import logging
import os
import signal
import sys
import threading
import types
import warnings
import weakref
from types import ModuleType
from typing import Callable, Dict, Iterator, List, Optional, Tuple

ENV = "TAXI_PIPELINE_SPEEDUPS"
LOCAL_RUNNER = "pipeline.run.local_runner"
# The cyclic GC's thresholds during a run (Python's are 700, 10, 10; see `local_runner`).
GC_THRESHOLDS = (10_000, 10, 10)
# Beam's state samplers' period (Beam's own default is 200 ms; see `beam_patches`).
SAMPLING_PERIOD_MS = 2
# The longest the detached child of `exit_process` may take before SIGALRM ends it.
DETACHED_SECONDS = 300

# Work for after the exit status is known (`after_exit`), done by `exit_process`, and
# whether this process ends through it (`ends_with_exit_process`).
_after_exit: List[Callable[[], object]] = []
# Work for once a node has run (`when_done`): node id -> callables of its outputs.
_when_done: Dict[str, List[Callable[[dict], object]]] = {}
_ends_here = [False]
_INHERITED = object()


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0"


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


def beam_patches() -> List[Tuple[object, str, Callable[[object], object]]]:
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
      out the rest of a sleep: about 1 s of a run on data/, spread over its Beam nodes.
      Sampled every `SAMPLING_PERIOD_MS` instead; the samples only feed Beam's own
      timing counters (the thread wakes without the GIL).
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


# The command the DirectRunner starts its `multi_processing` workers with, and this
# package's instead (`pipeline.run.beam_worker`).
_BEAM_WORKER = "%s -m apache_beam.runners.worker.sdk_worker_main"
_WORKER_WITH_SPEEDUPS = "%s -m pipeline.run.beam_worker"


def _workers_with_speedups(original: Callable) -> Callable:
    @functools.wraps(original)
    def from_command_string(cls, command_string):
        if command_string == _BEAM_WORKER % sys.executable:
            command_string = _WORKER_WITH_SPEEDUPS % sys.executable
        return original(cls, command_string)

    return from_command_string


def _worker_libraries() -> Dict[str, Callable[[], List[Tuple[object, str, Callable[[object], object]]]]]:
    """The speed-ups of the work done inside Beam's workers, by the library they change:
    TFDV's (StatisticsGen, the data gate) and TFMA's (the Evaluator)."""
    return {"tensorflow_data_validation": tfdv_patches, "tensorflow_model_analysis": tfma_patches}


def worker_patches() -> List[Tuple[object, str, Callable[[object], object]]]:
    """`_worker_libraries`' speed-ups, for this process; the worker processes of the
    DirectRunner's `multi_processing` mode (`pipeline.run.beam_worker`) apply each as
    they import its library (`in_workers`)."""
    return [patch for make in _worker_libraries().values() for patch in make()]


@contextlib.contextmanager
def in_workers() -> Iterator[None]:
    """Within the block (a worker process's life), if the speed-ups are on (the workers
    inherit the run's environment): Beam's, and each of `_worker_libraries`' right after
    the worker first imports it, so that an Evaluator's worker does not import TFDV for
    nothing (2.6 s) nor a StatisticsGen's TFMA."""
    if not enabled():
        yield
        return
    finder = _PatchedOnImport(_worker_libraries())
    sys.meta_path.insert(0, finder)
    try:
        with _patched(beam_patches()):
            yield
    finally:
        sys.meta_path.remove(finder)


class _PatchedOnImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a top-level package of `patches`, it has the other
    finders find it, and applies the package's patches once the package has run (for
    good: a worker process ends with them)."""

    def __init__(self, patches: Dict[str, Callable[[], List[Tuple[object, str, Callable[[object], object]]]]]):
        self._pending = dict(patches)

    def find_spec(self, fullname, path, target=None):
        make = self._pending.pop(fullname, None)
        if make is None:
            return None
        spec = None
        for finder in sys.meta_path:
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_patch(module):
            exec_module(module)
            _apply(make())

        spec.loader.exec_module = exec_then_patch
        return spec


class RememberingBz2:
    """bz2's `compress` and `decompress`, each answer remembered by its input, for Beam's
    pickler (`beam_patches`): the same bytes, byte for byte, as bz2's, so anything that
    reads them elsewhere reads them as before.

    Beam compresses each pickled function with bz2 at level 9 and decompresses it where it
    runs; in one local run it pickles the same DoFns and CombineFns again and again (when a
    ParDo is built, to check that it pickles; into the pipeline's proto; for each bundle's
    operations), and bz2 was about 1 s of a run on data/. At most `LIMIT_BYTES` of answers
    are kept (the oldest go first); a payload is a few kilobytes."""

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


def tfx_patches() -> List[Tuple[object, str, Callable[[object], object]]]:
    """`(owner, attribute, new value from the old one)` of each change to TFX.

    - `Launcher._publish_successful_execution`: LocalDagRunner (and BeamDagRunner) launch
      one node after another and say nothing in between; once a node's executor has run
      and its outputs are published, the work `when_done` left for that node is done with
      those outputs, before the next node starts. (A node whose outputs came from the
      cache publishes through another path: its outputs were written by an earlier run.)
    - `dependency_utils.make_beam_dependency_flags`: given no package, setup file or
      image for Beam's workers (this package installed from a wheel rather than from
      source), TFX copies itself into a new temporary folder and builds an archive of it
      before every Beam component: about 3 s, and 52 MB left behind each time. With a
      runner that keeps Beam's workers here (`beam_args.runs_here`) they never read it.
    """
    from tfx.orchestration.portable import launcher
    from tfx.utils import dependency_utils

    return [
        (launcher.Launcher, "_publish_successful_execution", _calling_back),
        (dependency_utils, "make_beam_dependency_flags", _archive_for_remote_workers_only),
    ]


def tfdv_patches() -> List[Tuple[object, str, Callable[[object], object]]]:
    """`(owner, attribute, new value from the old one)` of each change to TFDV.

    - `quantiles_util.generate_equi_width_histogram`: each numeric feature's standard
      histogram, added up from 1,000 quantile buckets by a walk over protos in Python;
      computed from arrays instead, to the same bits (`pipeline.patches.equi_width`), where
      the bounds are 64-bit or integers (on NumPy 2 a float feature's are float32, and
      TFDV computes those). The data gate's statistics of 16 spans on data/, tfx-1.16:
      1.6 s -> 1.0 s.
    """
    from tensorflow_data_validation.utils import quantiles_util

    from pipeline.patches import equi_width

    return [(quantiles_util, "generate_equi_width_histogram", equi_width.replacing)]


def tfma_patches() -> List[Tuple[object, str, Callable[[object], object]]]:
    """`(owner, attribute, new value from the old one)` of each change to TFMA.

    - `metric_util.to_label_prediction_example_weight`: every metric's combiner asks it
      for each example's (label, prediction, weight) of each slice the example falls in,
      and it looks them up through the eval config's model specs each time: on the
      Evaluator's default metrics and three slicings, 9 calls per example, 41% of the
      Evaluator's Beam time. Its results depend only on the example's inputs and the
      arguments, so each thread keeps those of the example it saw last
      (`_shared_per_example`): 2 calls per example, the others answered from them, each
      caller given its own copies of the arrays.
      `_BinaryConfusionMatrixCombiner` was handed the function as a default argument at
      import; a combiner built with that default gets the shared one.
    - `_ComputationsCombineFn.add_input`: each of those combiners still looked the
      example up again, reshaped and flattened it, before adding a number to a sum: 92 µs
      per example and slice for the pipeline's four combiners. `metric_updates` adds the
      same numbers from one label and prediction per example, where the combiner and the
      example are the plain case (TFMA's own classes, unweighted, a label of 0 or 1, a
      finite prediction), and leaves the rest to TFMA: 21 µs. The Evaluator's executor
      alone on the 1M run's artifacts: 18.7-19.8 s -> 14.3-14.4 s (two worker processes),
      24.0 -> 14.5 s (in the run's process), the same metrics.
    - `model_util.get_callable`: TFMA calls the model's serving signature with each
      batch of serialized examples by position; a SavedModel's signature takes keywords
      only, so every call first failed, TensorFlow's error message printing the whole
      batch, before TensorFlow retried it by position: 20 ms against 2.7 ms a batch of
      1,000. A signature of one input is handed out as `_ByKeyword`, which passes a lone
      positional argument by that input's name.
    """
    from tensorflow_model_analysis.evaluators import metrics_plots_and_validations_evaluator as evaluator
    from tensorflow_model_analysis.metrics import binary_confusion_matrices, metric_util
    from tensorflow_model_analysis.utils import model_util

    from pipeline.patches import metric_updates

    original = metric_util.to_label_prediction_example_weight
    shared = _shared_per_example(original)
    return [
        (metric_util, "to_label_prediction_example_weight", lambda old: shared),
        (
            binary_confusion_matrices._BinaryConfusionMatrixCombiner,
            "__init__",
            lambda old: _given_instead(old, "_extract_label_prediction_and_weight", original, shared),
        ),
        (
            evaluator._ComputationsCombineFn,
            "add_input",
            lambda old: metric_updates.replacing(old, original, (original, shared)),
        ),
        (model_util, "get_callable", _signatures_by_keyword),
    ]


def _signatures_by_keyword(original: Callable) -> Callable:
    """`original` (TFMA's `get_callable`), a signature of one input wrapped in `_ByKeyword`."""

    @functools.wraps(original)
    def get_callable(*args, **kwargs):
        function = original(*args, **kwargs)
        name = _single_keyword_input(function)
        return function if name is None else _ByKeyword(function, name)

    return get_callable


def _single_keyword_input(function: object) -> Optional[str]:
    """The input's name of a function whose structured signature is one keyword input."""
    structured = getattr(function, "structured_input_signature", None)
    if not isinstance(structured, tuple) or len(structured) != 2:
        return None
    positional, keywords = structured
    if positional or not isinstance(keywords, dict) or len(keywords) != 1:
        return None
    return next(iter(keywords))


class _ByKeyword:
    """A function of one keyword input, also called with that input by position; every
    other attribute is the function's own."""

    def __init__(self, function: Callable, name: str):
        self._function, self._name = function, name

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs:
            return self._function(**{self._name: args[0]})
        return self._function(*args, **kwargs)

    def __getattr__(self, attribute: str):
        if attribute in ("_function", "_name"):  # not set yet (a copy): no recursion
            raise AttributeError(attribute)
        return getattr(self._function, attribute)


def _shared_per_example(original: Callable) -> Callable:
    """`original(inputs, ...)` computed once per set of arguments for the `inputs` object
    this thread saw last. Every caller gets its own copies of the arrays: TFMA's
    `CategoricalCrossEntropy` normalises its predictions in place."""
    last = threading.local()

    @functools.wraps(original)
    def to_label_prediction_example_weight(inputs, *args, **kwargs):
        if getattr(last, "inputs", None) is not inputs:
            last.inputs, last.results, last.held = inputs, {}, []
        key = (tuple(_by_value_or_identity(value, last.held) for value in args),
               tuple((name, _by_value_or_identity(value, last.held)) for name, value in kwargs.items()))
        results = last.results.get(key)
        if results is None:
            results = last.results[key] = tuple(original(inputs, *args, **kwargs))
        return iter([tuple(_copied(value) for value in result) for result in results])

    return to_label_prediction_example_weight


def _by_value_or_identity(value: object, held: list) -> object:
    """`value` as part of a key: itself if hashable, a dict by its items, anything else
    (a proto) by identity, held in `held` so that its id cannot be another object's."""
    try:
        hash(value)
        return value
    except TypeError:
        pass
    if isinstance(value, dict):
        try:
            return ("dict", frozenset(value.items()))
        except TypeError:
            pass
    held.append(value)
    return ("id", id(value))


def _copied(value: object) -> object:
    import numpy as np

    return value.copy() if isinstance(value, np.ndarray) else value


def _given_instead(original_init: Callable, attribute: str, given: object, instead: object) -> Callable:
    """`original_init`, then `attribute` set to `instead` where it was `given`."""

    @functools.wraps(original_init)
    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        if getattr(self, attribute, None) is given:
            setattr(self, attribute, instead)

    return init


# The rows of each batch an Examples artifact is read in (`tfxio_patches`) when the reader
# names no size at all: StatisticsGen and the Evaluator. At 1M rows, two alternating pairs
# of runs each: StatisticsGen 11.3 and 12.7 s at tfx_bsl's cap of 1,000 rows, 9.4-9.8 s at
# 4,096, 9.2-9.6 s at 8,192; the Evaluator within its spread at either. Transform passes
# `None` (its desired batch size, unset) and keeps tfx_bsl's cap: it was no faster at
# 4,096, and its quantile sketches depend on how the rows are batched (at 4,096 the 1M
# run's bucket boundaries moved, and with them the Trainer's epochs). Four batches of this
# size are held per decoding thread's lead.
READ_BATCH = 4096
# `BeamSource`'s batch size when its caller passes none (not even `None`).
_NO_SIZE = object()


def tfxio_patches() -> List[Tuple[object, str, Callable[[object], object]]]:
    """`(owner, attribute, new value from the old one)` of each change to tfx_bsl.

    - `TFExampleRecord.BeamSource` (inherited from `RecordBasedTFXIO`), how StatisticsGen,
      Transform and the Evaluator read an Examples artifact's files: Beam's own TFRecord
      source reads each record in Python and makes it a Beam element, and tfx_bsl
      batches the elements again before decoding them. Where Beam's workers stay in this
      environment (`beam_args.runs_here`), each file is read by TensorFlow's reader
      straight into lists of records (`beam_fns.RecordBatchesOfFiles`), decoded by
      tfx_bsl's own decoder (on a thread per core while the file is read, where Beam
      runs each bundle on one thread of this process: `_decode_threads`): the same rows,
      in batches of the size asked for, of tfx_bsl's cap of 1,000 rows where the reader
      leaves the size to tfx_bsl (`None`: tfx_bsl grows its batches from 1 up to that
      cap), or of `READ_BATCH` rows where it names none at all. So
      sums are added up in another order (a mean or standard deviation may differ in
      its last bit), and a schema-less decoding, StatisticsGen's, meets an optional
      feature earlier, which TFDV then lists earlier: the same inferred schema, in
      another feature order (on the test slice: the same eval metrics and predictions
      to 1e-6). Beam's raw-record and batching counters are not counted, nor tfx_bsl's
      record-batch telemetry (Beam distributions of each batch's byte size and values per
      row, which nothing on this machine reads: 0.26 s of Python per 200,000 rows, on
      the thread every bundle waits on; at 1M rows Transform 12.0-12.7 -> 11.8 s). Beyond this
      environment (Dataflow, Flink, Spark, a portable job service), with tfx_bsl's
      byte-size batching (`--tfxio_use_byte_size_batching`), and for the other TFXIOs:
      tfx_bsl's own source. 1M rows: Transform 27.8 -> 15.5 s, StatisticsGen 23.2 -> 16.6 s;
      decoded on two threads, Transform 17.2 -> 11.9 s; in batches of 4,096 rows rather
      than 1,000, StatisticsGen 11.3-12.7 -> 8.9-9.8 s (TFDV's generators pay their
      Python per batch and per feature).
    """
    from tfx_bsl.tfxio import tf_example_record

    return [(tf_example_record.TFExampleRecord, "BeamSource", _read_a_file_at_a_time)]


def _read_a_file_at_a_time(original: Callable) -> Callable:
    @functools.wraps(original)
    def BeamSource(self, batch_size=_NO_SIZE):
        import apache_beam as beam
        from tfx_bsl.coders import batch_util
        from tfx_bsl.tfxio import tf_example_record

        from components.custom import beam_fns

        asked = None if batch_size is _NO_SIZE else batch_size
        size = READ_BATCH if batch_size is _NO_SIZE else asked or batch_util._BATCH_SIZE_CAP
        if batch_util._UseByteSizeBatching():
            return original(self, asked)

        def expand(pipeline):
            if not (isinstance(pipeline, beam.pvalue.PBegin) and _workers_here(pipeline.pipeline)):
                return pipeline | "TFXIO" >> original(self, asked)
            decode = tf_example_record._DecodeBatchExamplesDoFn(
                self._GetSchemaForDecoding(), self.raw_record_column_name
            )
            files = beam_fns.matching_files(list(self._file_pattern))
            return (
                pipeline
                | "ReadRecordBatches"
                >> beam_fns.RecordBatchesOfFiles(
                    files, size, decode, _decode_threads(pipeline.pipeline)
                )
            )

        return beam.ptransform_fn(expand)()

    return BeamSource


def _decode_threads(pipeline) -> int:
    """Threads that decode a file's records while it is read: one per core where Beam runs
    each bundle on this process's one thread (the DirectRunner with one worker, its
    default); one where its workers already share the cores (Beam's threads or worker
    processes, any worker count but 1)."""
    from apache_beam.options.pipeline_options import DirectOptions

    direct = pipeline.options.view_as(DirectOptions)
    # Any other worker count than 1 (0: one per core) shares out bundles, whatever the mode.
    if direct.direct_num_workers != 1:
        return 1
    return os.cpu_count() or 1


def _workers_here(pipeline) -> bool:
    """Whether `pipeline`'s runner keeps Beam's workers in this environment."""
    from pipeline import beam_args

    return beam_args.runs_here([f"--runner={type(pipeline.runner).__name__}"])


def _archive_for_remote_workers_only(original: Callable) -> Callable:
    @functools.wraps(original)
    def make_beam_dependency_flags(beam_pipeline_args):
        from pipeline import beam_args

        if beam_args.runs_here(beam_pipeline_args):
            return list(beam_pipeline_args)
        return original(beam_pipeline_args)

    return make_beam_dependency_flags


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


@contextlib.contextmanager
def when_done(node_id: str, work: Callable[[dict], object]) -> Iterator[None]:
    """Within the block, `work(outputs)` runs as soon as node `node_id` of a local run
    has run and published its outputs (not when they came from the cache), if the
    speed-ups are on (`tfx_patches`): for work ahead of a later node, which must not
    depend on it. Errors in `work` are logged, never raised."""
    _when_done.setdefault(node_id, []).append(work)
    try:
        yield
    finally:
        _when_done[node_id].remove(work)


@contextlib.contextmanager
def _patched(patches: List[Tuple[object, str, Callable[[object], object]]]) -> Iterator[None]:
    # An attribute the owner inherits is set on the owner and deleted again after.
    originals = [(owner, name, owner.__dict__.get(name, _INHERITED)) for owner, name, _ in patches]
    try:
        _apply(patches)
        yield
    finally:
        for owner, name, original in originals:
            if original is not _INHERITED:
                setattr(owner, name, original)
            elif name in vars(owner):
                delattr(owner, name)


def _apply(patches: List[Tuple[object, str, Callable[[object], object]]]) -> None:
    for owner, name, make in patches:
        setattr(owner, name, make(getattr(owner, name)))


def _import_frozen(name: str) -> ModuleType:
    """Imports `name` with the cyclic GC paused, then freezes what the import created."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return importlib.import_module(name)
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


@contextlib.contextmanager
def local_runner(on: bool) -> Iterator[ModuleType]:
    """`pipeline.run.local_runner`, and within the block the speed-ups when `on`.

    The Beam and TFX patches and the collector's thresholds are undone on leaving, so
    nothing outside the run sees them.
    """
    if not on:
        yield importlib.import_module(LOCAL_RUNNER)
        return
    module = _import_frozen(LOCAL_RUNNER)
    with _patched(beam_patches() + tfx_patches() + tfxio_patches() + worker_patches()), _collecting_less_often():
        yield module


@contextlib.contextmanager
def _collecting_less_often() -> Iterator[None]:
    """The cyclic GC's thresholds at `GC_THRESHOLDS` within the block.

    With Python's (700, 10, 10), a run on data/ made about 1,900 young, 170 middle and
    14 full collections; the full ones scan everything the nodes left alive (TF graphs,
    Beam pipelines) and took 1.2 s of the 1.6 s the collector spent. At (10,000, 10, 10):
    0.5 s, no full collection, peak memory +76 MB (0.98 -> 1.06 GB). Long runs still reach
    full collections, 14 times less often.
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
    through `exit_process`, the speed-ups are on and a person waits at a terminal."""
    return _ends_here[0] and enabled() and hasattr(os, "fork") and sys.stdout.isatty()


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
