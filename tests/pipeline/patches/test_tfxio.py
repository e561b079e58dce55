"""The patch to tfx_bsl's TFXIO: Examples read a file at a time give tfx_bsl's own rows,
where its internals are still where the reading expects them."""

import inspect
import os
from typing import List

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.patches import machinery
from pipeline.patches import tfxio as tfxio_patches


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

    monkeypatch.setattr(tfxio_patches, "READ_BATCH", 700)  # files of 2,100, 500 and 134 records

    (tmp_path / "in").mkdir()
    patterns = _tfrecord_files(tmp_path / "in")

    def tfxio():
        return tf_example_record.TFExampleRecord(patterns, schema=_schema(), raw_record_column_name="__raw__")

    expected, _ = _rows_read(tfxio(), str(tmp_path / "tfx_bsl"), batch_size)
    with machinery.patched(tfxio_patches.patches()):
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
    with machinery.patched(tfxio_patches.patches()):
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
    assert tfxio_patches._decode_threads(beam.Pipeline(options=PipelineOptions(args))) == threads


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

    with machinery.patched(tfxio_patches.patches()):
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

