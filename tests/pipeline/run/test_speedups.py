"""The speed-ups: their targets still exist on the pinned libraries, they are undone on
leaving, they compute what the originals compute, and one setting turns them off."""

import bz2
import copy
import gc
import inspect
import os
import subprocess
import sys
import tempfile
import time
import types
from typing import List

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions
from apache_beam.runners.portability.fn_api_runner import worker_handlers
from apache_beam.runners.worker import statesampler
from apache_beam.transforms import userstate
from apache_beam.utils import counters
from tfx.dsl.components.base import base_beam_executor

from pipeline.run import speedups


def test_every_patched_target_exists_with_the_shape_the_patch_expects():
    patches = speedups.beam_patches()
    assert len(patches) == 9
    for owner, name, _ in patches:
        assert name in owner.__dict__, f"{owner.__name__}.{name} moved: its speed-up must be revisited"
    assert isinstance(worker_handlers.STATE_CACHE_SIZE_MB, int) and worker_handlers.STATE_CACHE_SIZE_MB > 0
    assert list(inspect.signature(userstate.get_dofn_specs).parameters) == ["dofn"]
    assert list(inspect.signature(PipelineOptions.view_as).parameters) == ["self", "cls"]
    assert list(inspect.signature(statesampler.StateSampler.__init__).parameters) == [
        "self", "prefix", "counter_factory", "sampling_period_ms"]


def test_the_patches_hold_inside_the_block_only():
    import sys

    from apache_beam.transforms import environments

    beam_worker = f"{sys.executable} -m apache_beam.runners.worker.sdk_worker_main"
    command = environments.SubprocessSDKEnvironment.__dict__["from_command_string"]
    originals = (worker_handlers.STATE_CACHE_SIZE_MB, userstate.get_dofn_specs, PipelineOptions.view_as)
    with speedups._patched(speedups.beam_patches()):
        assert worker_handlers.STATE_CACHE_SIZE_MB == 0
        assert userstate.get_dofn_specs is not originals[1]
        assert PipelineOptions.view_as is not originals[2]
        started = environments.SubprocessSDKEnvironment.from_command_string(beam_worker).command_string
        assert started == f"{sys.executable} -m pipeline.run.beam_worker"
        assert environments.SubprocessSDKEnvironment.from_command_string("my-worker").command_string == "my-worker"
    assert (worker_handlers.STATE_CACHE_SIZE_MB, userstate.get_dofn_specs, PipelineOptions.view_as) == originals
    assert environments.SubprocessSDKEnvironment.__dict__["from_command_string"] is command
    assert environments.SubprocessSDKEnvironment.from_command_string(beam_worker).command_string == beam_worker


def test_a_failure_inside_the_block_still_undoes_the_patches():
    original = userstate.get_dofn_specs
    with pytest.raises(RuntimeError, match="boom"):
        with speedups._patched(speedups.beam_patches()):
            raise RuntimeError("boom")
    assert userstate.get_dofn_specs is original


def _seconds_to_stop_a_sampler_after(seconds: float) -> float:
    sampler = statesampler.StateSampler("step", counters.CounterFactory())
    sampler.start()
    time.sleep(seconds)
    started = time.perf_counter()
    sampler.stop()
    return time.perf_counter() - started


def test_a_bundle_s_state_sampler_stops_without_waiting_out_a_long_sleep():
    # Beam's sampler sleeps 2 ms, then 20% longer each time up to 200 ms, and `stop` joins
    # it: stopped 1 s after its start, it waits out a sleep that ends at about 1.13 s.
    waits = [_seconds_to_stop_a_sampler_after(1.0) for _ in range(3)]
    assert max(waits) > 0.06, waits
    with speedups._patched(speedups.beam_patches()):
        sampler = statesampler.StateSampler("step", counters.CounterFactory())
        assert sampler.sampling_period_ms == speedups.SAMPLING_PERIOD_MS
        patched = [_seconds_to_stop_a_sampler_after(1.0) for _ in range(3)]
    assert min(patched) < 0.03, patched
    assert statesampler.StateSampler("step", counters.CounterFactory()).sampling_period_ms == 200


class _Counting(beam.DoFn):
    def process(self, element):
        yield element


def test_dofn_specs_are_computed_once_per_dofn_and_equal_the_originals(monkeypatch):
    calls = []
    original = userstate.get_dofn_specs
    monkeypatch.setattr(userstate, "get_dofn_specs", lambda dofn: calls.append(dofn) or original(dofn))
    with speedups._patched(speedups.beam_patches()):
        first, second = _Counting(), _Counting()
        assert userstate.get_dofn_specs(first) == original(first)
        assert userstate.get_dofn_specs(first) == original(first)
        userstate.get_dofn_specs(second)
    assert calls == [first, second]


def test_option_views_share_their_values():
    options = PipelineOptions(["--direct_num_workers=3"])
    with speedups._patched(speedups.beam_patches()):
        view = options.view_as(DirectOptions)
        assert view is options.view_as(DirectOptions)
        view.direct_num_workers = 5
        assert options.view_as(DirectOptions).direct_num_workers == 5
    assert options.view_as(DirectOptions).direct_num_workers == 5


def test_the_heavy_import_runs_with_the_gc_paused_and_leaves_it_as_it_was(monkeypatch):
    seen = []
    monkeypatch.setattr(speedups.importlib, "import_module", lambda name: seen.append((name, gc.isenabled())))
    monkeypatch.setattr(speedups.gc, "freeze", lambda: seen.append("freeze"))
    gc.enable()
    speedups._import_frozen("some.module")
    assert seen == [("some.module", False), "freeze"] and gc.isenabled()
    gc.disable()
    try:
        speedups._import_frozen("some.module")
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.parametrize("value, expected", [(None, True), ("1", True), ("0", False)])
def test_one_environment_setting_turns_them_off(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv(speedups.ENV, raising=False)
    else:
        monkeypatch.setenv(speedups.ENV, value)
    assert speedups.enabled() is expected


_AFTER_EXIT = """
import os, sys, time
from pipeline.run import speedups
speedups.ends_with_exit_process()
def work():
    time.sleep(1.5)
    with open(sys.argv[1], "w") as handle:
        handle.write(f"{os.getpid()} {os.getppid()} {os.isatty(1)}")
speedups.after_exit(work)
print("detach" if speedups.can_detach() else "foreground", flush=True)
speedups.exit_process(3, True)
"""


def _at_terminal(command, env=None, timeout=60):
    """`command` with a terminal as its standard output: its exit status, what it printed,
    and the seconds until it exited."""
    import pty
    import time

    controller, terminal = pty.openpty()
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=terminal, stderr=terminal, stdin=subprocess.DEVNULL, env=env)
    os.close(terminal)
    output = b""
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # the terminal closed: every process holding it ended or let it go
            break
        if not chunk:
            break
        output += chunk
    code = process.wait(timeout=timeout)
    os.close(controller)
    return code, output.decode(), time.perf_counter() - started


def test_work_after_the_exit_is_left_to_a_detached_child_at_a_terminal_and_done_first_otherwise(tmp_path):
    import time

    at_terminal = tmp_path / "terminal"
    code, output, _ = _at_terminal([sys.executable, "-c", _AFTER_EXIT, str(at_terminal)])
    assert code == 3 and output.strip() == "detach" and not at_terminal.exists()
    deadline = time.monotonic() + 30
    while not at_terminal.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    child, parent, tty = at_terminal.read_text().split()
    assert tty == "False"  # the child let the terminal go
    assert int(parent) != os.getpid()  # it was re-parented: the command had ended

    piped = tmp_path / "piped"
    done = subprocess.run([sys.executable, "-c", _AFTER_EXIT, str(piped)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3 and done.stdout.strip() == "foreground"
    assert piped.exists()  # written before the command ended

    off = tmp_path / "off"  # the speed-ups off: done first, at a terminal too
    code, output, _ = _at_terminal([sys.executable, "-c", _AFTER_EXIT, str(off)], env={**os.environ, speedups.ENV: "0"})
    assert code == 3 and output.strip() == "foreground" and off.exists()


def test_a_placeholder_stands_in_for_a_page_being_drawn_and_reloads(tmp_path):
    from pipeline.inspect import report_page

    path = report_page.write_placeholder(str(tmp_path), "20261125-000000-000000-1-abc")
    text = open(path).read()
    assert path == report_page.report_path(str(tmp_path), "20261125-000000-000000-1-abc")
    assert 'http-equiv="refresh"' in text and f'id="{report_page.PLACEHOLDER_ID}"' in text
    assert f"taxi-pipeline report 20261125-000000-000000-1-abc --output-root {tmp_path}" in text
    assert os.listdir(tmp_path / report_page.REPORTS_DIR) == [os.path.basename(path)]  # nothing staged is left


class _Launcher:
    """Stands for TFX's Launcher: it publishes a node's outputs once its executor ran."""

    def __init__(self, node_id):
        self._pipeline_node = types.SimpleNamespace(node_info=types.SimpleNamespace(id=node_id))
        self.published = []

    def _publish_successful_execution(self, execution_id, contexts, output_dict, executor_output):
        self.published.append(execution_id)


def test_work_left_for_a_node_runs_once_it_published_its_outputs_and_never_fails_it(caplog):
    publish = speedups._calling_back(_Launcher._publish_successful_execution)
    outputs = {"model": ["artifact"]}
    seen = []

    def failing(_):
        raise RuntimeError("boom")

    with speedups.when_done("Trainer", seen.append), speedups.when_done("Trainer", failing):
        transform = _Launcher("Transform")
        publish(transform, 1, [], {"transform_graph": []}, None)
        assert transform.published == [1] and seen == []
        trainer = _Launcher("Trainer")
        publish(trainer, 2, [], outputs, None)
        assert trainer.published == [2]
    assert seen == [outputs]
    assert "work after node Trainer failed" in caplog.text
    publish(_Launcher("Trainer"), 3, [], outputs, None)
    assert seen == [outputs]  # the block's end took the work back
    assert dict(speedups._when_done) == {"Trainer": []}


def test_the_launcher_patch_targets_tfx_s_publishing_of_a_run_node_only():
    from tfx.orchestration.portable import launcher

    original = launcher.Launcher._publish_successful_execution
    assert list(inspect.signature(original).parameters) == [
        "self", "execution_id", "contexts", "output_dict", "executor_output"]
    assert "self._pipeline_node = pipeline_node" in inspect.getsource(launcher.Launcher.__init__)
    # Called after the executor ran, and only there: a cached node publishes otherwise.
    launch = inspect.getsource(launcher.Launcher.launch)
    assert launch.count("self._publish_successful_execution(") == 1
    assert launch.index("self._run_executor(") < launch.index("self._publish_successful_execution(")
    assert "_publish_successful_execution" not in inspect.getsource(launcher.Launcher._prepare_execution)
    with speedups._patched(speedups.tfx_patches()):
        assert launcher.Launcher._publish_successful_execution is not original
    assert launcher.Launcher._publish_successful_execution is original


class _BeamExecutor(base_beam_executor.BaseBeamExecutor):
    def Do(self, input_dict, output_dict, exec_properties):
        raise AssertionError("never run")


@pytest.mark.parametrize("args, archive_built", [
    ([], False),
    (["--runner=apache_beam.runners.portability.fn_api_runner.FnApiRunner"], False),
    (["--direct_running_mode=multi_processing", "--direct_num_workers=2"], False),
    (["--runner=PortableRunner", "--job_endpoint=localhost:8099"], True),
    (["--runner=DataflowRunner"], True),
])
def test_tfx_archives_itself_only_for_workers_beyond_this_environment(monkeypatch, args, archive_built):
    from tfx.utils import dependency_utils

    built = []
    monkeypatch.setattr(dependency_utils, "build_ephemeral_package", lambda: built.append(1) or "/tmp/tfx.tar.gz")
    given = ["--max_cache_memory_usage_mb=0"] + args
    with speedups._patched(speedups.tfx_patches()):
        executor = _BeamExecutor(_BeamExecutor.Context(beam_pipeline_args=list(given)))
    assert bool(built) == archive_built
    assert ("--extra_package=/tmp/tfx.tar.gz" in executor._beam_pipeline_args) == archive_built
    assert executor._beam_pipeline_args[:len(given)] == given
    # Without the patch TFX builds its archive whatever the runner.
    built.clear()
    _BeamExecutor(_BeamExecutor.Context(beam_pipeline_args=list(given)))
    assert built == [1]


def test_remembered_bz2_answers_are_bz2_s_own_and_bounded(monkeypatch):
    calls = []
    original_compress, original_decompress = bz2.compress, bz2.decompress
    monkeypatch.setattr(bz2, "compress", lambda data, level: calls.append("c") or original_compress(data, level))
    monkeypatch.setattr(bz2, "decompress", lambda data: calls.append("d") or original_decompress(data))
    remembering = speedups.RememberingBz2()
    payload = b"a pickled DoFn " * 200
    packed = remembering.compress(payload, compresslevel=9)
    assert packed == original_compress(payload, 9)
    assert remembering.compress(bytearray(payload), compresslevel=9) == packed
    assert remembering.decompress(packed) == payload  # known from its compression
    assert calls == ["c"]
    other = original_compress(b"packed elsewhere", 9)
    assert remembering.decompress(other) == b"packed elsewhere" and calls == ["c", "d"]
    assert remembering.decompress(other) == b"packed elsewhere" and calls == ["c", "d"]

    monkeypatch.setattr(speedups.RememberingBz2, "LIMIT_BYTES", 4096)
    small = speedups.RememberingBz2()
    for index in range(50):
        small.compress(bytes([index]) * 1000, compresslevel=9)
    assert small._size <= 4096 and len(small._answers) < 10


def test_what_beam_pickles_under_the_patches_unpickles_without_them():
    from apache_beam.internal import cloudpickle_pickler

    with speedups._patched(speedups.beam_patches()):
        assert isinstance(cloudpickle_pickler.bz2, speedups.RememberingBz2)
        encoded = cloudpickle_pickler.dumps(_Counting())
        assert cloudpickle_pickler.dumps(_Counting()) == encoded
        assert type(cloudpickle_pickler.loads(encoded)).__name__ == "_Counting"
    assert cloudpickle_pickler.bz2 is bz2
    assert type(cloudpickle_pickler.loads(encoded)).__name__ == "_Counting"


class _Keyed(beam.DoFn):
    def process(self, element, prefix="k"):
        yield prefix, element


def test_a_bound_method_s_signature_is_remembered_by_function_and_equals_beam_s():
    from apache_beam.transforms import core
    from apache_beam.typehints import decorators

    original = decorators.get_signature
    with speedups._patched(speedups.beam_patches()):
        first, second = _Keyed().process, _Keyed().process
        assert core.get_signature(first) == original(first)
        assert core.get_signature(second) is core.get_signature(first)
        assert list(core.get_signature(first).parameters) == ["element", "prefix"]
        assert core.get_function_arguments(_Keyed(), "process") == (["element", "prefix"], ["k"])
        # Anything else is asked of Beam's own each time.
        assert decorators.get_signature(str.upper) == original(str.upper)
        assert list(core.get_signature(lambda a, b=2: a).parameters) == ["a", "b"]
    assert core.get_signature is original and decorators.get_signature is original


def test_the_collector_runs_less_often_inside_the_run_only(monkeypatch):
    monkeypatch.setattr(speedups, "_import_frozen", lambda name: name)
    before = gc.get_threshold()
    with speedups.local_runner(True) as module:
        assert module == speedups.LOCAL_RUNNER
        assert gc.get_threshold() == speedups.GC_THRESHOLDS
        assert speedups.GC_THRESHOLDS[0] > before[0]
    assert gc.get_threshold() == before
    with pytest.raises(RuntimeError):
        with speedups.local_runner(True):
            raise RuntimeError("a failed run")
    assert gc.get_threshold() == before
    with speedups.local_runner(False):
        assert gc.get_threshold() == before


def test_an_immediate_exit_still_removes_autograph_s_generated_sources(tmp_path, monkeypatch):
    import tensorflow as tf

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = set(sys.modules)

    @tf.function(input_signature=[tf.TensorSpec([], tf.int32)])
    def halve_evens(x):
        if x % 2 == 0:
            x = x // 2
        return x

    assert int(halve_evens(tf.constant(8))) == 4
    generated = [tmp_path / os.path.basename(sys.modules[name].__file__)
                 for name in set(sys.modules) - before if name.startswith(speedups.GENERATED_PREFIX)]
    assert generated and all(path.exists() for path in generated)
    other = tmp_path / "kept.py"
    other.write_text("")
    speedups.remove_generated_sources()
    assert not any(path.exists() for path in generated)
    assert other.exists()
    # Nor their bytecode, where Python cached it (Python 3.13 does, beside the sources).
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.py"]


def _example(index: int) -> bytes:
    import tensorflow as tf

    feature = {"fare": tf.train.Feature(float_list=tf.train.FloatList(value=[index / 7]))}
    if index % 3:  # some rows lack a feature, some have two values of it
        companies = [b"c%d" % (index % 5)] * (index % 2 + 1)
        feature["company"] = tf.train.Feature(bytes_list=tf.train.BytesList(value=companies))
    feature["hour"] = tf.train.Feature(int64_list=tf.train.Int64List(value=[index % 24]))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def _tfrecord_files(folder) -> List[str]:
    """Three TFRecord files of 2,734 tf.Examples in all: two GZIP, one uncompressed; as
    two file patterns."""
    import tensorflow as tf

    for name, compression, indices in [("a.gz", "GZIP", range(0, 2100)), ("b.gz", "GZIP", range(2100, 2600)),
                                       ("c", None, range(2600, 2734))]:
        with tf.io.TFRecordWriter(str(folder / name), options=compression) as writer:
            for index in indices:
                writer.write(_example(index))
    return [str(folder / "*.gz"), str(folder / "c")]


def _schema():
    from tensorflow_metadata.proto.v0 import schema_pb2

    schema = schema_pb2.Schema()
    for name, kind in [("fare", schema_pb2.FLOAT), ("company", schema_pb2.BYTES), ("hour", schema_pb2.INT)]:
        schema.feature.add(name=name, type=kind)
    return schema


_NO_SIZE = "no size"


def _rows_read(tfxio, out_prefix: str, batch_size=None):
    """The rows of every record batch `tfxio.BeamSource` gives, and the batches' sizes;
    with `batch_size` `_NO_SIZE`, `BeamSource` is called without one."""
    import json

    def rows(batch):
        columns = batch.to_pydict()
        return [json.dumps({name: (repr(values[i])) for name, values in columns.items()}, sort_keys=True)
                for i in range(batch.num_rows)]

    with beam.Pipeline(argv=["--runner=DirectRunner", "--direct_running_mode=in_memory"]) as pipeline:
        batches = pipeline | tfxio.BeamSource(*([] if batch_size == _NO_SIZE else [batch_size]))
        _ = batches | "Rows" >> beam.FlatMap(rows) | "WriteRows" >> beam.io.WriteToText(out_prefix + "-rows")
        _ = batches | "Sizes" >> beam.Map(lambda batch: batch.num_rows) | beam.io.WriteToText(out_prefix + "-sizes")

    def lines(kind):
        found = []
        for path in sorted(os.listdir(os.path.dirname(out_prefix))):
            if path.startswith(os.path.basename(out_prefix) + kind):
                with open(os.path.join(os.path.dirname(out_prefix), path)) as handle:
                    found += handle.read().splitlines()
        return found

    return sorted(lines("-rows")), [int(size) for size in lines("-sizes")]


@pytest.mark.parametrize("batch_size", [_NO_SIZE, None, 100])
def test_tf_examples_read_a_file_at_a_time_give_tfx_bsl_s_own_rows(tmp_path, monkeypatch, batch_size):
    from tfx_bsl.tfxio import tf_example_record

    monkeypatch.setattr(speedups, "READ_BATCH", 700)  # files of 2,100, 500 and 134 records

    (tmp_path / "in").mkdir()
    patterns = _tfrecord_files(tmp_path / "in")

    def tfxio():
        return tf_example_record.TFExampleRecord(patterns, schema=_schema(), raw_record_column_name="__raw__")

    expected, _ = _rows_read(tfxio(), str(tmp_path / "tfx_bsl"), batch_size)
    with speedups._patched(speedups.tfxio_patches()):
        assert "BeamSource" in tf_example_record.TFExampleRecord.__dict__
        got, sizes = _rows_read(tfxio(), str(tmp_path / "patched"), batch_size)
        projected, _ = _rows_read(tfxio().Project(["fare"]), str(tmp_path / "projected"), batch_size)
    assert "BeamSource" not in tf_example_record.TFExampleRecord.__dict__  # inherited again
    assert len(expected) == 2734 and got == expected
    assert len(projected) == 2734 and all('"fare"' in row and '"hour"' not in row for row in projected)
    # A file's records in lists of the size asked for: tfx_bsl's cap of 1,000 for None
    # (Transform's), `READ_BATCH` when none is named (StatisticsGen's, the Evaluator's).
    limit = {_NO_SIZE: 700, None: 1000}.get(batch_size, batch_size)

    def lists_of(records):
        return [limit] * (records // limit) + [records % limit] * bool(records % limit)

    assert sorted(sizes) == sorted(lists_of(2100) + lists_of(500) + lists_of(134))


def test_tf_examples_read_a_file_at_a_time_refuse_a_pattern_without_files_as_beam_does(tmp_path):
    from tfx_bsl.tfxio import tf_example_record

    with pytest.raises(OSError, match="No files found based on the file pattern .*nothing-here"):
        _rows_read(tf_example_record.TFExampleRecord(str(tmp_path / "nothing-here*")), str(tmp_path / "x"))
    with speedups._patched(speedups.tfxio_patches()):
        with pytest.raises(OSError, match="No files found based on the file pattern .*nothing-here"):
            _ = beam.Pipeline() | tf_example_record.TFExampleRecord(str(tmp_path / "nothing-here*")).BeamSource()


def test_a_truncated_file_read_a_file_at_a_time_is_named(tmp_path):
    from components.custom import beam_fns

    (tmp_path / "in").mkdir()
    _tfrecord_files(tmp_path / "in")
    # Cut inside the last record (a GZIP file cut where its records happen to end reads
    # as a shorter file: neither TensorFlow's reader nor Beam's can tell).
    whole = (tmp_path / "in" / "c").read_bytes()
    (tmp_path / "in" / "c").write_bytes(whole[:-5])
    with pytest.raises(OSError, match=r"in/c cannot be read to its end: DataLossError"):
        list(beam_fns.ReadRecordBatches(100).process(str(tmp_path / "in" / "c")))
    assert sum(map(len, beam_fns.ReadRecordBatches(100).process(str(tmp_path / "in" / "b.gz")))) == 500


class _OneThreadDecode(beam.DoFn):
    """A decoder that fails if two threads use it, as tfx_bsl's does (it keeps state
    between calls): each list's length, first and last records. Each copy's first call
    waits until `parties` copies are in one (so that every thread of the pool starts)."""

    torn_down: List[int] = []
    parties = None

    def setup(self):
        import threading

        self._thread, self._waited = threading.get_ident(), False

    def process(self, records):
        import threading
        import time as clock

        assert threading.get_ident() == self._thread, "a decoder was shared between threads"
        if not self._waited and self.parties is not None:
            self._waited = True
            self.parties.wait(timeout=30)
        clock.sleep(0.001)  # lets the lists overtake one another if they could
        yield len(records), records[0], records[-1]

    def teardown(self):
        self.torn_down.append(self._thread)


def test_records_decoded_on_threads_come_out_in_order_each_thread_with_its_own_decoder(tmp_path):
    from components.custom import beam_fns

    (tmp_path / "in").mkdir()
    _tfrecord_files(tmp_path / "in")
    path = str(tmp_path / "in" / "a.gz")
    one_by_one = [out for batch in beam_fns.ReadRecordBatches(30).process(path) for out in [
        (len(batch), batch[0], batch[-1])]]
    import threading

    _OneThreadDecode.torn_down.clear()
    _OneThreadDecode.parties = threading.Barrier(3)  # every thread starts: each copy's first call waits for 3
    try:
        threaded = beam_fns.ReadDecodedBatches(30, _OneThreadDecode(), threads=3)
        threaded.setup()
        got = list(threaded.process(path)) + list(threaded.process(path))
        threaded.teardown()
    finally:
        _OneThreadDecode.parties = None
    assert len(one_by_one) == 70 and got == one_by_one * 2
    # A copy a thread, each torn down.
    assert len(set(_OneThreadDecode.torn_down)) == len(_OneThreadDecode.torn_down) == 3


def test_records_decoded_on_threads_name_a_file_that_cannot_be_read_to_its_end(tmp_path):
    from components.custom import beam_fns

    (tmp_path / "in").mkdir()
    _tfrecord_files(tmp_path / "in")
    # Cut inside its last record, as above: the error comes after lists already handed
    # to the decoding threads (134 records, lists of 30).
    whole = (tmp_path / "in" / "c").read_bytes()
    (tmp_path / "in" / "c").write_bytes(whole[:-5])
    threaded = beam_fns.ReadDecodedBatches(30, _OneThreadDecode(), threads=2)
    threaded.setup()
    try:
        with pytest.raises(OSError, match=r"in/c cannot be read to its end: DataLossError"):
            list(threaded.process(str(tmp_path / "in" / "c")))
    finally:
        threaded.teardown()


@pytest.mark.parametrize("args, threads", [
    ([], os.cpu_count()),
    (["--direct_running_mode=in_memory"], os.cpu_count()),
    (["--direct_running_mode=multi_threading", "--direct_num_workers=1"], os.cpu_count()),
    (["--direct_running_mode=multi_threading", "--direct_num_workers=0"], 1),
    (["--direct_running_mode=in_memory", "--direct_num_workers=2"], 1),
    (["--direct_running_mode=multi_processing", "--direct_num_workers=2"], 1),
])
def test_records_are_decoded_on_a_thread_per_core_only_where_beam_runs_a_bundle_on_one_thread(args, threads):
    assert speedups._decode_threads(beam.Pipeline(options=PipelineOptions(args))) == threads


def test_beyond_this_environment_and_with_byte_size_batching_tfx_bsl_s_own_source_stays(monkeypatch, tmp_path):
    from apache_beam.runners.portability import portable_runner
    from tfx_bsl.coders import batch_util
    from tfx_bsl.tfxio import tf_example_record

    (tmp_path / "in").mkdir()
    patterns = _tfrecord_files(tmp_path / "in")

    def transforms(runner):
        pipeline = beam.Pipeline(runner=runner)
        _ = pipeline | tf_example_record.TFExampleRecord(patterns, schema=_schema()).BeamSource()
        return " ".join(t.unique_name for t in pipeline.to_runner_api().components.transforms.values())

    with speedups._patched(speedups.tfxio_patches()):
        here = transforms(None)
        assert "ReadRecordBatches" in here and "ReadFromTFRecord" not in here
        assert "CollectRecordBatchTelemetry" not in here  # Beam distributions nothing here reads
        beyond = transforms(portable_runner.PortableRunner())
        assert "ReadFromTFRecord" in beyond and "ReadRecordBatches" not in beyond
        assert "CollectRecordBatchTelemetry" in beyond  # a Dataflow job's monitoring keeps them
        monkeypatch.setattr(batch_util, "_UseByteSizeBatching", lambda: True)
        assert "ReadFromTFRecord" in transforms(None)


def test_the_tfx_bsl_internals_the_reading_relies_on_are_where_it_expects_them():
    from tfx_bsl.coders import batch_util
    from tfx_bsl.tfxio import record_based_tfxio, tf_example_record

    assert tf_example_record.TFExampleRecord.BeamSource is record_based_tfxio.RecordBasedTFXIO.BeamSource
    assert batch_util._BATCH_SIZE_CAP == 1000 and callable(batch_util._UseByteSizeBatching)
    # StatisticsGen and the Evaluator name no batch size; Transform passes its desired one.
    from tfx.components.evaluator import executor as evaluator_executor
    from tfx.components.statistics_gen import executor as statistics_executor
    from tfx.components.transform import executor as transform_executor

    assert "tfxio.BeamSource()" in inspect.getsource(statistics_executor)
    assert "tfxio.BeamSource()" in inspect.getsource(evaluator_executor)
    assert "tfxio.BeamSource(desired_batch_size)" in inspect.getsource(transform_executor)
    assert list(inspect.signature(tf_example_record._DecodeBatchExamplesDoFn.__init__).parameters) == [
        "self", "schema", "raw_record_column_name"]
    source = inspect.getsource(tf_example_record.TFExampleRecord._RawRecordBeamSourceInternal)
    assert "ReadTfRecord(self._file_pattern)" in source  # tfx_bsl's own reading, replaced whole
    record = tf_example_record.TFExampleRecord(["/a/*", "/b/*"])
    assert record._file_pattern == ["/a/*", "/b/*"]


def test_a_patch_that_fails_to_build_leaves_every_attribute_as_it_was():
    from tfx_bsl.tfxio import tf_example_record

    def broken(original):
        raise RuntimeError("cannot build")

    before = dict(vars(tf_example_record.TFExampleRecord))
    with pytest.raises(RuntimeError, match="cannot build"):
        with speedups._patched([(tf_example_record.TFExampleRecord, "BeamSource", broken)]):
            pass
    assert dict(vars(tf_example_record.TFExampleRecord)) == before


def _metric_inputs(label: float, prediction: float):
    import numpy as np
    from tensorflow_model_analysis.metrics import metric_types

    return metric_types.StandardMetricInputs(
        labels=np.array([label]), predictions=np.array([prediction]), example_weights=None)


def test_tfma_s_internals_the_sharing_relies_on_are_where_it_expects_them():
    from tensorflow_model_analysis.metrics import binary_confusion_matrices, metric_util

    assert list(inspect.signature(metric_util.to_label_prediction_example_weight).parameters)[0] == "inputs"
    combiner = binary_confusion_matrices._BinaryConfusionMatrixCombiner
    assert "extract_label_prediction_and_weight" in inspect.signature(combiner.__init__).parameters
    assert "self._extract_label_prediction_and_weight" in inspect.getsource(combiner)


def test_an_example_s_labels_predictions_and_weights_are_computed_once_per_arguments_as_tfma_computes_them():
    import numpy as np
    from tensorflow_model_analysis.metrics import metric_util

    original = metric_util.to_label_prediction_example_weight
    calls = []

    def counting(inputs, **kwargs):
        calls.append(sorted(kwargs))
        return original(inputs, **kwargs)

    shared = speedups._shared_per_example(counting)
    first, second = _metric_inputs(1.0, 0.75), _metric_inputs(0.0, 0.25)
    for inputs in (first, first, first, second, second):
        for kwargs in ({"flatten": True, "fractional_labels": True}, {"allow_none": True, "class_weights": {}}):
            got, expected = list(shared(inputs, **kwargs)), list(original(inputs, **kwargs))
            assert len(got) == len(expected) and got
            for got_row, expected_row in zip(got, expected):
                for got_array, expected_array in zip(got_row, expected_row):
                    assert got_array.tolist() == expected_array.tolist()
                    assert got_array.dtype == expected_array.dtype
    # Two argument sets, two examples (the same example again: no new call).
    assert len(calls) == 4
    # Each caller gets its own arrays (TFMA's CategoricalCrossEntropy writes into its
    # predictions): what one caller does to them, the next caller and the inputs never see.
    label, prediction, _ = next(shared(second, allow_none=True, class_weights={}))
    assert not np.shares_memory(prediction, second.prediction)
    label[...], prediction[...] = 7.0, 7.0
    assert [row[:2] for row in shared(second, allow_none=True, class_weights={})] == [([0.0], [0.25])]
    assert (second.label.tolist(), second.prediction.tolist()) == ([0.0], [0.25])


def test_arguments_that_cannot_be_hashed_tell_the_results_apart():
    import numpy as np
    from tensorflow_model_analysis.metrics import metric_types, metric_util
    from tensorflow_model_analysis.proto import config_pb2

    shared = speedups._shared_per_example(metric_util.to_label_prediction_example_weight)
    inputs = metric_types.StandardMetricInputs(
        labels={"a": np.array([1.0]), "b": np.array([0.0])}, predictions=np.array([0.5]), example_weights=None)
    by_a, by_b = (config_pb2.EvalConfig(model_specs=[config_pb2.ModelSpec(label_key=key)]) for key in "ab")
    for _ in range(2):
        assert [row[0].tolist() for row in shared(inputs, eval_config=by_a)] == [[1.0]]
        assert [row[0].tolist() for row in shared(inputs, eval_config=by_b)] == [[0.0]]


def test_each_thread_keeps_its_own_last_example():
    import threading

    seen = []
    shared = speedups._shared_per_example(lambda inputs: (seen.append(inputs) or [(inputs,)]))
    first, second = object(), object()
    assert list(shared(first)) == [(first,)]
    other = threading.Thread(target=lambda: list(shared(second)))
    other.start()
    other.join()
    assert list(shared(first)) == [(first,)]
    assert seen == [first, second]


def test_a_confusion_matrix_combiner_built_with_tfma_s_default_gets_the_shared_function():
    from tensorflow_model_analysis.metrics import binary_confusion_matrices, metric_util

    original = metric_util.to_label_prediction_example_weight

    def combiner(**kwargs):
        return binary_confusion_matrices._BinaryConfusionMatrixCombiner(
            key=None, eval_config=None, thresholds=[0.5], example_id_key=None, example_ids_count=0,
            aggregation_type=None, class_weights=None, example_weighted=False, enable_fractional_labels=True,
            **kwargs)

    own = lambda *args, **kwargs: iter(())  # noqa: E731
    with speedups._patched(speedups.tfma_patches()):
        shared = metric_util.to_label_prediction_example_weight
        assert shared is not original and shared.__wrapped__ is original
        assert combiner(extract_label_prediction_and_weight=original)._extract_label_prediction_and_weight is shared
        assert combiner(extract_label_prediction_and_weight=own)._extract_label_prediction_and_weight is own
    assert metric_util.to_label_prediction_example_weight is original
    assert combiner(extract_label_prediction_and_weight=original)._extract_label_prediction_and_weight is original


def test_tfma_calls_the_serving_signature_by_position_through_get_callable():
    from tensorflow_model_analysis.utils import model_util

    source = inspect.getsource(model_util)
    assert "get_callable(model, signature_name, required)" in source
    assert "signature(tf.constant(inputs, dtype=tf.string))" in source


class _Recording:
    """A function of one keyword input that records how it was called."""

    structured_input_signature = ((), {"examples": "spec"})
    structured_outputs = {"probability": "spec"}

    def __init__(self):
        self.calls = []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return "scores"


def test_a_signature_of_one_input_is_called_by_its_name_when_given_it_by_position():
    from tensorflow_model_analysis.utils import model_util

    function = _Recording()
    two_inputs = types.SimpleNamespace(structured_input_signature=((), {"a": 1, "b": 2}))
    by_position = types.SimpleNamespace(structured_input_signature=(("a",), {}))
    original = model_util.get_callable
    with speedups._patched(speedups.tfma_patches()):
        wrapped = model_util.get_callable(types.SimpleNamespace(signatures={"serving_default": function}),
                                          "serving_default")
        for other in (two_inputs, by_position):
            assert model_util.get_callable(types.SimpleNamespace(signatures={"s": other}), "s") is other
    assert model_util.get_callable is original
    assert wrapped is not function
    assert wrapped("batch") == "scores"
    wrapped(examples="keyword")
    wrapped("a", "b")
    assert function.calls == [((), {"examples": "batch"}), ((), {"examples": "keyword"}), (("a", "b"), {})]
    assert wrapped.structured_outputs == function.structured_outputs
    assert hasattr(wrapped, "structured_input_signature")
    assert copy.copy(wrapped)("copied") == "scores" and function.calls[-1] == ((), {"examples": "copied"})


@pytest.mark.timeout(120)
def test_a_saved_model_s_signature_called_by_position_gives_what_it_gives_by_keyword(tmp_path):
    import numpy as np
    import tensorflow as tf
    from tensorflow_model_analysis.utils import model_util

    module = tf.Module()
    module.serve = tf.function(lambda examples: {"length": tf.strings.length(examples)},
                               input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    tf.saved_model.save(module, str(tmp_path), signatures={"serving_default": module.serve})
    loaded = tf.saved_model.load(str(tmp_path))
    batch = tf.constant([b"a", b"bcd", b""])
    with speedups._patched(speedups.tfma_patches()):
        signature = model_util.get_callable(loaded, "serving_default")
    assert isinstance(signature, speedups._ByKeyword)
    np.testing.assert_array_equal(signature(batch)["length"], [1, 3, 0])
    np.testing.assert_array_equal(signature(batch)["length"], signature(examples=batch)["length"])


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

    monkeypatch.delenv(speedups.ENV, raising=False)
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
    with speedups._patched(speedups.beam_patches()):
        with beam.Pipeline(options=options) as pipeline:
            assert_that(pipeline | beam.Create([str(tmp_path / "torn-down")]) | beam.FlatMap(_in_the_worker), check)
    assert not (tmp_path / "torn-down").exists(), "the worker's interpreter was torn down"
    assert "Exception ignored" not in capfd.readouterr().err
