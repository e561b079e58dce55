"""The patches to Beam: their targets still exist on the pinned Beam, they are undone on
leaving, they compute what Beam computes, and Beam's worker processes run the worker patches."""

import bz2
import functools
import inspect
import os
import threading
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions
from apache_beam.runners.portability.fn_api_runner import worker_handlers
from apache_beam.runners.worker import statesampler
from apache_beam.transforms import userstate
from apache_beam.utils import counters

from pipeline.patches import beam as beam_patches
from pipeline.patches import machinery


def test_every_patched_target_exists_with_the_shape_the_patch_expects():
    patches = beam_patches.patches()
    assert len(patches) == 14
    for owner, name, _ in patches:
        assert name in owner.__dict__, f"{owner.__name__}.{name} moved: its speed-up must be revisited"
    assert isinstance(worker_handlers.STATE_CACHE_SIZE_MB, int) and worker_handlers.STATE_CACHE_SIZE_MB > 0
    assert list(inspect.signature(userstate.get_dofn_specs).parameters) == ["dofn"]
    assert list(inspect.signature(PipelineOptions.view_as).parameters) == ["self", "cls"]
    # The statements the patched `start` and `stop` keep, less the thread's (in the base class).
    assert _statements(statesampler.StateSampler.start) == [
        "self.tracked_thread = threading.current_thread()", "set_current_tracker(self)", "super().start()",
        "self.started = True"]
    assert _statements(statesampler.StateSampler.stop) == ["set_current_tracker(None)", "super().stop()"]
    # The round trip `HandedOverDoFns` saves: the bundle processor's second pickling of a
    # ParDo's data, which the operation unpickles when it is made and at its setup.
    from apache_beam.runners.worker import bundle_processor, operations

    assert "serialized_fn = pickler.dumps(dofn_data[:-1] + (windowing, ))" in _statements(
        bundle_processor._create_pardo_operation)
    # `operations` is compiled: its source beside it.
    source = (Path(operations.__file__).parent / "operations.py").read_text()
    assert "self.fn, _, _, _, _ = (pickler.loads(self.spec.serialized_fn))" in source
    assert list(inspect.signature(beam_patches.submodule_scan_owner()._find_imported_submodules).parameters) == [
        "code", "top_level_dependencies"]
    # A run's end asks (`run`, or on Beam 2.77 what it calls), by the name `apache_beam.pipeline`
    # imported; each transform applied asks through `interactive_utils`' own.
    from apache_beam import pipeline as beam_pipeline
    from apache_beam.utils import interactive_utils

    assert inspect.unwrap(beam_pipeline.is_in_ipython) is inspect.unwrap(interactive_utils.is_in_ipython)
    assert "if not is_in_ipython():" in inspect.getsource(beam_pipeline.Pipeline)
    assert "alter_label_if_ipython(transform, pvalueish)" in inspect.getsource(beam_pipeline.Pipeline)
    assert "if is_in_ipython():" in inspect.getsource(interactive_utils.alter_label_if_ipython)


def test_a_process_where_ipython_has_not_run_is_no_ipython_session_without_importing_it(monkeypatch):
    import importlib.util
    import sys
    import types

    from apache_beam import pipeline as beam_pipeline
    from apache_beam.utils import interactive_utils

    def session(answer):
        module = types.ModuleType("IPython")
        module.get_ipython = lambda: answer
        return module

    deferred = importlib.util.module_from_spec(importlib.util.find_spec("IPython"))
    deferred.__class__ = machinery.DeferredModule
    with machinery.patched(beam_patches.ipython_check_patches()):
        for bound, expected in [(None, False), (deferred, False), (session(object()), True), (session(None), False)]:
            monkeypatch.setitem(sys.modules, "IPython", bound)
            if bound is None:
                monkeypatch.delitem(sys.modules, "IPython")
            assert beam_pipeline.is_in_ipython() is expected and interactive_utils.is_in_ipython() is expected
            assert sys.modules.get("IPython") is bound and type(deferred) is machinery.DeferredModule


def test_the_patches_hold_inside_the_block_only():
    import sys

    from apache_beam.transforms import environments

    beam_worker = f"{sys.executable} -m apache_beam.runners.worker.sdk_worker_main"
    command = environments.SubprocessSDKEnvironment.__dict__["from_command_string"]
    originals = (worker_handlers.STATE_CACHE_SIZE_MB, userstate.get_dofn_specs, PipelineOptions.view_as)
    with machinery.patched(beam_patches.patches()):
        assert worker_handlers.STATE_CACHE_SIZE_MB == 0
        assert userstate.get_dofn_specs is not originals[1]
        assert PipelineOptions.view_as is not originals[2]
        started = environments.SubprocessSDKEnvironment.from_command_string(beam_worker).command_string
        assert started == f"{sys.executable} -m pipeline.run.beam_worker"
        assert environments.SubprocessSDKEnvironment.from_command_string("my-worker").command_string == "my-worker"
    assert (worker_handlers.STATE_CACHE_SIZE_MB, userstate.get_dofn_specs, PipelineOptions.view_as) == originals
    assert environments.SubprocessSDKEnvironment.__dict__["from_command_string"] is command
    assert environments.SubprocessSDKEnvironment.from_command_string(beam_worker).command_string == beam_worker


def _statements(method) -> list:
    return [line.strip() for line in inspect.getsource(method).splitlines()[1:]
            if line.strip() and not line.strip().startswith("#")]


def _a_bundle_s_sampler() -> tuple:
    """What a bundle sees of its state sampler: the threads it starts, whether it is the
    current tracker while it runs, its flags after `stop`, and again after a `reset`."""
    sampler = statesampler.StateSampler("step", counters.CounterFactory())
    threads = threading.active_count()
    sampler.start()
    running = (threading.active_count() - threads, statesampler.get_current_tracker() is sampler,
               sampler.started, sampler.finished)
    sampler.stop()
    stopped = (statesampler.get_current_tracker(), sampler.started, sampler.finished,
               threading.active_count() - threads)
    sampler.reset()
    sampler.start()
    sampler.stop_if_still_running()
    return running, stopped, (sampler.started, sampler.finished, statesampler.get_current_tracker())


def test_a_bundle_s_state_sampler_starts_and_stops_as_beam_s_without_a_thread():
    beam_s = _a_bundle_s_sampler()
    with machinery.patched(beam_patches.patches()):
        patched = _a_bundle_s_sampler()
    assert beam_s[0] == (1, True, True, False)
    assert patched[0] == (0, True, True, False)
    assert patched[1:] == beam_s[1:] == ((None, True, True, 0), (True, True, None))
    assert _a_bundle_s_sampler()[0][0] == 1


class _Counting(beam.DoFn):
    def process(self, element):
        yield element


def test_dofn_specs_are_computed_once_per_dofn_and_equal_the_originals(monkeypatch):
    calls = []
    original = userstate.get_dofn_specs
    monkeypatch.setattr(userstate, "get_dofn_specs", lambda dofn: calls.append(dofn) or original(dofn))
    with machinery.patched(beam_patches.patches()):
        first, second = _Counting(), _Counting()
        assert userstate.get_dofn_specs(first) == original(first)
        assert userstate.get_dofn_specs(first) == original(first)
        userstate.get_dofn_specs(second)
    assert calls == [first, second]


def test_option_views_share_their_values():
    options = PipelineOptions(["--direct_num_workers=3"])
    with machinery.patched(beam_patches.patches()):
        view = options.view_as(DirectOptions)
        assert view is options.view_as(DirectOptions)
        view.direct_num_workers = 5
        assert options.view_as(DirectOptions).direct_num_workers == 5
    assert options.view_as(DirectOptions).direct_num_workers == 5


def test_remembered_bz2_answers_are_bz2_s_own_and_bounded(monkeypatch):
    calls = []
    original_compress, original_decompress = bz2.compress, bz2.decompress
    monkeypatch.setattr(bz2, "compress", lambda data, level: calls.append("c") or original_compress(data, level))
    monkeypatch.setattr(bz2, "decompress", lambda data: calls.append("d") or original_decompress(data))
    remembering = beam_patches.RememberingBz2()
    payload = b"a pickled DoFn " * 200
    packed = remembering.compress(payload, compresslevel=9)
    assert packed == original_compress(payload, 9)
    assert remembering.compress(bytearray(payload), compresslevel=9) == packed
    assert remembering.decompress(packed) == payload  # known from its compression
    assert calls == ["c"]
    other = original_compress(b"packed elsewhere", 9)
    assert remembering.decompress(other) == b"packed elsewhere" and calls == ["c", "d"]
    assert remembering.decompress(other) == b"packed elsewhere" and calls == ["c", "d"]

    monkeypatch.setattr(beam_patches.RememberingBz2, "LIMIT_BYTES", 4096)
    small = beam_patches.RememberingBz2()
    for index in range(50):
        small.compress(bytes([index]) * 1000, compresslevel=9)
    assert small._size <= 4096 and len(small._answers) < 10


def test_what_beam_pickles_under_the_patches_unpickles_without_them():
    from apache_beam.internal import cloudpickle_pickler

    with machinery.patched(beam_patches.patches()):
        assert isinstance(cloudpickle_pickler.bz2, beam_patches.RememberingBz2)
        encoded = cloudpickle_pickler.dumps(_Counting())
        assert cloudpickle_pickler.dumps(_Counting()) == encoded
        assert type(cloudpickle_pickler.loads(encoded)).__name__ == "_Counting"
    assert cloudpickle_pickler.bz2 is bz2
    assert type(cloudpickle_pickler.loads(encoded)).__name__ == "_Counting"


class _Offset(beam.DoFn):
    def setup(self):
        self.offset = 0

    def process(self, element, side):
        yield element + side + self.offset


def _pipeline_s_picklings() -> tuple:
    """A pipeline of ParDos with a side input and a windowing: what it outputs, how often
    Beam's pickler pickled and unpickled while it ran."""
    from apache_beam.internal import pickler
    from apache_beam.testing.util import assert_that, equal_to

    calls = []
    dumps, loads = pickler.dumps, pickler.loads
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(pickler, "dumps", lambda *args, **kwargs: calls.append("d") or dumps(*args, **kwargs))
        monkeypatch.setattr(pickler, "loads", lambda *args, **kwargs: calls.append("l") or loads(*args, **kwargs))
        with beam.Pipeline(runner="apache_beam.runners.portability.fn_api_runner.FnApiRunner") as pipeline:
            side = pipeline | "Side" >> beam.Create([10])
            output = (pipeline | beam.Create([1, 2, 3]) | beam.ParDo(_Offset(), beam.pvalue.AsSingleton(side))
                      | beam.WindowInto(beam.window.FixedWindows(5)) | beam.Map(lambda value: (value, value * 2)))
            assert_that(output, equal_to([(11, 22), (12, 24), (13, 26)]))
    return calls.count("d"), calls.count("l")


def test_a_pardo_s_dofn_reaches_its_operation_without_beam_s_second_pickling_and_runs_the_same():
    beam_s = _pipeline_s_picklings()
    with machinery.patched(beam_patches.patches()):
        patched = _pipeline_s_picklings()
    # Each ParDo a bundle runs: one pickling and one unpickling fewer (assert_that checked the output).
    rebuilt = beam_s[0] - patched[0]
    assert rebuilt >= 5 and beam_s[1] - patched[1] == rebuilt


def test_a_handed_over_dofn_is_what_beam_s_round_trip_gives():
    from apache_beam.internal import pickler
    from apache_beam.transforms.core import Windowing

    handed_over = beam_patches.HandedOverDoFns(pickler)
    encoded = pickler.dumps((_Offset(), (1,), {"k": 2}, [], None))
    data = handed_over.loads(encoded)
    windowing = Windowing(beam.window.FixedWindows(5))
    token = handed_over.dumps(data[:-1] + (windowing,))
    assert isinstance(token, beam_patches.Rewindowed) and bytes(token) == encoded
    beam_s = pickler.loads(pickler.dumps(data[:-1] + (windowing,)))
    first, second = handed_over.loads(token), handed_over.loads(token)
    assert all(mine is its for mine, its in zip(first, data[:-1] + (windowing,)))
    assert type(second[0]) is _Offset and second[0] is not first[0] and second[1:4] == first[1:4] == beam_s[1:4]
    assert second[-1] is windowing and second[-1] == beam_s[-1]
    # Anything else is pickled as Beam pickles it: other data, or the same data twice.
    assert handed_over.dumps(data[:-1] + (windowing,)) == pickler.dumps(data[:-1] + (windowing,))
    handed_over.loads(encoded)
    other = (_Offset(),) + data[1:-1] + (windowing,)
    assert type(handed_over.dumps(other)) is bytes


class _Keyed(beam.DoFn):
    def process(self, element, prefix="k"):
        yield prefix, element


def test_a_bound_method_s_signature_is_remembered_by_function_and_equals_beam_s():
    from apache_beam.transforms import core
    from apache_beam.typehints import decorators

    original = decorators.get_signature
    with machinery.patched(beam_patches.patches()):
        first, second = _Keyed().process, _Keyed().process
        assert core.get_signature(first) == original(first)
        assert core.get_signature(second) is core.get_signature(first)
        assert list(core.get_signature(first).parameters) == ["element", "prefix"]
        assert core.get_function_arguments(_Keyed(), "process") == (["element", "prefix"], ["k"])
        # Anything else is asked of Beam's own each time.
        assert decorators.get_signature(str.upper) == original(str.upper)
        assert list(core.get_signature(lambda a, b=2: a).parameters) == ["a", "b"]
    assert core.get_signature is original and decorators.get_signature is original


def _in_the_worker(torn_down_marker):
    import atexit
    import os
    import sys

    from tensorflow_model_analysis.metrics import metric_util

    # Run by the interpreter's teardown only, which printed TensorFlow's finalizers' errors.
    atexit.register(lambda: open(torn_down_marker, "w").close())
    yield (os.getpid(), hasattr(metric_util.to_label_prediction_example_weight, "__wrapped__"),
           "tensorflow_data_validation" in sys.modules)


@pytest.mark.slow
@pytest.mark.every_stack
@pytest.mark.timeout(300)
def test_beam_s_worker_processes_run_the_worker_speed_ups_import_only_what_their_work_needs_and_end_quietly(
        monkeypatch, capfd, tmp_path):
    from apache_beam.testing.util import assert_that

    monkeypatch.delenv(machinery.ENV, raising=False)
    here = os.getpid()

    def check(rows):  # runs in the worker, where pytest's assertion rewriting is not
        pid, tfma_shared, tfdv_imported = rows[0]
        if pid == here:
            raise AssertionError("the work ran in this process, not in a worker")
        if not tfma_shared:
            raise AssertionError("the worker's TFMA is not patched")
        if tfdv_imported:
            raise AssertionError("the worker imported TFDV for nothing")

    options = PipelineOptions(["--direct_running_mode=multi_processing", "--direct_num_workers=1"])
    with machinery.patched(beam_patches.patches()):
        with beam.Pipeline(options=options) as pipeline:
            assert_that(pipeline | beam.Create([str(tmp_path / "torn-down")]) | beam.FlatMap(_in_the_worker), check)
    assert not (tmp_path / "torn-down").exists(), "the worker's interpreter was torn down"
    assert "Exception ignored" not in capfd.readouterr().err



def test_submodules_found_from_the_index_are_cloudpickle_s_in_its_order_and_pickle_the_same(monkeypatch):
    import concurrent.futures
    import sys
    import types
    import xml
    import xml.dom.minidom

    from apache_beam.internal import cloudpickle_pickler

    owner = beam_patches.submodule_scan_owner()
    theirs = owner._find_imported_submodules
    index = beam_patches.SubmoduleIndex()

    def uses_submodules():
        return concurrent.futures.ThreadPoolExecutor, xml.dom.minidom.parseString, os.path.join

    code, globals_ = uses_submodules.__code__, [concurrent, xml, os, sys, "not a module"]
    expected = theirs(code, globals_)
    assert concurrent.futures in expected and xml.dom.minidom in expected  # what the scan is for
    assert index.find(code, globals_) == expected
    # A module loaded since: found too, where sys.modules lists it.
    monkeypatch.setitem(sys.modules, "xml.dom.spelled", types.ModuleType("xml.dom.spelled"))
    assert index.find(code, globals_) == theirs(code, globals_) == expected
    monkeypatch.setitem(sys.modules, "concurrent.futures.pool", types.ModuleType("concurrent.futures.pool"))
    pool_code = (lambda: concurrent.futures.pool).__code__
    assert sys.modules["concurrent.futures.pool"] in index.find(pool_code, globals_)
    assert index.find(pool_code, globals_) == theirs(pool_code, globals_)
    monkeypatch.delitem(sys.modules, "concurrent.futures.pool")  # one gone: indexed anew
    assert index.find(pool_code, globals_) == theirs(pool_code, globals_) == [concurrent.futures]

    unpatched = cloudpickle_pickler.dumps(uses_submodules)
    with machinery.patched(beam_patches.patches()):
        assert owner._find_imported_submodules is not theirs
        assert cloudpickle_pickler.dumps(uses_submodules) == unpatched
    assert owner._find_imported_submodules is theirs


class _YieldsAndReturns(beam.DoFn):
    def process(self, element):
        if element:
            return [element]
        yield element


def test_the_yield_and_return_check_reads_a_dofn_s_source_once_and_answers_as_beam(monkeypatch):
    from apache_beam.transforms import core

    reads = []
    original = core._get_function_body_without_inners
    monkeypatch.setattr(core, "_get_function_body_without_inners", lambda fn: reads.append(fn) or original(fn))
    theirs = [core._check_fn_use_yield_and_return(dofn.process) for dofn in (_YieldsAndReturns(), _Counting())]
    assert theirs == [True, False] and len(reads) == 2
    del reads[:]
    with machinery.patched(beam_patches.patches()):
        ours = [core._check_fn_use_yield_and_return(dofn.process)
                for dofn in (_YieldsAndReturns(), _Counting(), _YieldsAndReturns(), _Counting())]
        beam.ParDo(_Counting())  # as a ParDo asks: read once more for no class
        assert core._check_fn_use_yield_and_return(len) is False  # no source: Beam's answer
    assert ours == theirs * 2 and len(reads) == 2


def _decorated(process):
    @functools.wraps(process)
    def wrapper(self, element):
        return process(self, element)

    return wrapper


def _yield_and_return(self, element):
    if element:
        return [element]
    yield element


def _yield(self, element):
    yield element


class _DecoratedYieldsAndReturns(beam.DoFn):
    process = _decorated(_yield_and_return)


class _DecoratedYields(beam.DoFn):
    process = _decorated(_yield)


def test_the_yield_and_return_check_is_remembered_by_the_source_it_reads_not_a_shared_wrapper():
    from apache_beam.transforms import core

    dofns = (_DecoratedYieldsAndReturns(), _DecoratedYields())
    theirs = [core._check_fn_use_yield_and_return(dofn.process) for dofn in dofns]
    assert theirs == [True, False]  # one wrapper's code, two sources: Beam reads the wrapped one
    with machinery.patched(beam_patches.patches()):
        assert [core._check_fn_use_yield_and_return(dofn.process) for dofn in dofns * 2] == theirs * 2


IO_NAMES = """
import json, sys
from pipeline import patches
from pipeline.run import process

if sys.argv[1] == "deferred":
    with process.local_runner(True):  # the run's imports, as a run makes them
        pass
import apache_beam as beam
loaded_by_imports = patches.beam.IO_BLOCK_STAR_IMPORTS[0] in sys.modules
# What a first file write imports (`iobase.Write`): Beam's Pub/Sub module, and with it its client?
import apache_beam.io.gcp.pubsub
client_with_module = "google.cloud.pubsub_v1" in sys.modules
client_type = sys.modules["apache_beam.io.gcp.pubsub"].pubsub.types.PubsubMessage.__module__
# Its names but its submodules (which imports of them bind, whichever import runs first).
def bound():
    return sorted(name for name, value in vars(beam.io).items()
                  if not name.startswith("_") and type(value).__name__ != "module")
before = bound()
star = {}
exec("from apache_beam.io import *", star)  # reads __all__ first: the block's names too
same = beam.io.ReadFromBigQuery is sys.modules["apache_beam.io.gcp.bigquery"].ReadFromBigQuery
after = bound()
print(json.dumps({"loaded_by_imports": loaded_by_imports, "before": before, "after": after, "same": same,
                  "gcsio": beam.io.gcsio.__name__, "star": "ReadFromBigQuery" in star,
                  "client_with_module": client_with_module, "client_type": client_type}))
"""


@pytest.mark.timeout(300)
def test_beam_s_google_cloud_io_block_and_pubsub_client_load_when_first_asked_for_with_beam_s_names(tmp_path):
    import json
    import subprocess
    import sys

    script = tmp_path / "io_names.py"
    script.write_text(IO_NAMES)

    def names(mode):
        ran = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True, timeout=240,
                             env={**os.environ, machinery.ENV: "1"}, cwd=os.getcwd())
        assert ran.returncode == 0, ran.stderr[-3000:]
        return json.loads(ran.stdout.splitlines()[-1])

    deferred, beam_s = names("deferred"), names("as-beam-imports-it")
    assert beam_s["loaded_by_imports"] and not deferred["loaded_by_imports"]
    assert "ReadFromBigQuery" in beam_s["before"] and "ReadFromBigQuery" not in deferred["before"]
    # Once a name of the block is asked for: Beam's very names and objects.
    assert deferred["after"] == beam_s["after"] == beam_s["before"]
    assert deferred["same"] and deferred["gcsio"] == beam_s["gcsio"] == "apache_beam.io.gcp.gcsio"
    assert deferred["star"] and beam_s["star"]
    # The Pub/Sub client: not loaded with Beam's Pub/Sub module, and Beam's own once asked for.
    assert beam_s["client_with_module"] and not deferred["client_with_module"]
    assert deferred["client_type"] == beam_s["client_type"]
    assert deferred["client_type"].startswith("google.cloud.pubsub")
