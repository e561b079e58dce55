"""What Beam's workers run for this package's components: the DoFns and functions pickled
into ImportExampleGen's (`components.custom.ingest`) and the data gate's
(`components.custom.span_statistics`) Beam pipelines, and into StatisticsGen's,
Transform's and the Evaluator's where a local run reads their examples a file at a time
(`RecordBatchesOfFiles`, see `pipeline.patches.tfxio`).

Beyond the launching process (Flink, Spark, Dataflow, `--beam portable`) a worker process
imports the module of each DoFn it unpickles. So this one imports only what the work
needs: TensorFlow's record reader and writer, pyarrow, tfx_bsl's decoder; never TFX's API
(`tfx.v1` alone costs a worker about 3 s, in every worker of every job).
"""

from __future__ import annotations

import bisect
import collections
import copy
import hashlib
import os
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, Iterator, List, Optional, Tuple

import apache_beam as beam
import pyarrow as pa
import tensorflow as tf
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx_bsl.coders import example_coder

# The file name TFX's ExampleGen writes (`tfx.components.example_gen.write_split`), named
# here: importing TFX's module imports every TFX component.
DEFAULT_FILE_NAME = "data_tfrecord"
# The column that carries each record batch's span through TFDV's slicing.
SPAN_COLUMN = "__span__"
# Records decoded into one record batch.
DECODE_BATCH = 1000
_GZIP = tf.io.TFRecordOptions(compression_type="GZIP")
# ImportExampleGen's output: zlib's fastest level. Deflating at its default level (6) was
# most of the split's time; level 1 writes more bytes, which readers inflate as fast
# (docs/performance.md, "ImportExampleGen's GZIP at level 1").
SPLIT_OUTPUT = tf.io.TFRecordOptions(compression_type="GZIP", compression_level=1)


def split_index(record: bytes, buckets: List[int]) -> int:
    """The output split of `record`: TFX's (`base_example_gen_executor._PartitionFn`, on a
    record's bytes), the SHA-256 of the bytes as an integer, modulo the total buckets."""
    return bisect.bisect(buckets, int.from_bytes(hashlib.sha256(record).digest(), "big") % buckets[-1])


def output_name(index: int, total: int) -> str:
    """The output file of input file `index` of `total`, in each split it writes to."""
    return f"{DEFAULT_FILE_NAME}-{index:05d}-of-{total:05d}.gz"


class SplitFile(beam.DoFn):
    """Writes one input file's records to one file per output split, by `split_index`;
    yields `(split index, records written to it)` for each split."""

    def __init__(self, split_uris: List[str], buckets: List[int], total_files: int):
        self._split_uris, self._buckets, self._total = split_uris, buckets, total_files

    def process(self, item: Tuple[int, str]) -> Iterator[Tuple[int, int]]:
        index, path = item
        name = output_name(index, self._total)
        writers = [tf.io.TFRecordWriter(os.path.join(uri, name), SPLIT_OUTPUT) for uri in self._split_uris]
        counts = [0] * len(writers)
        try:
            for record in records(path):
                split = split_index(record, self._buckets)
                writers[split].write(record)
                counts[split] += 1
        finally:
            for writer in writers:
                writer.close()
        yield from enumerate(counts)


def write_split_rows(counts: List[Tuple[int, int]], uri: str, split_names: List[str]) -> None:
    """Records the rows `SplitFile` wrote to each split: its `(split index, rows)` pairs of
    every file, summed by split (`components.model.split_rows`)."""
    from components.model import split_rows

    rows = dict.fromkeys(split_names, 0)
    for index, count in counts:
        rows[split_names[index]] += count
    split_rows.write(uri, rows)


class CopyFile(beam.DoFn):
    """Copies one input file, as it is, into its split."""

    def __init__(self, split_uri: str, total_files: int):
        self._split_uri, self._total = split_uri, total_files

    def process(self, item: Tuple[int, str]) -> Iterator[int]:
        index, path = item
        tf.io.gfile.copy(path, os.path.join(self._split_uri, output_name(index, self._total)), overwrite=True)
        yield 1


def in_sample(record: bytes, rate: float) -> bool:
    """Whether `record` is in the sample of `rate`: by the CRC-32 of its bytes, so the
    sample does not depend on file order, worker count or runner."""
    return zlib.crc32(record) < rate * 2**32


def add_span(record_batch: pa.RecordBatch, span: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        record_batch.columns + [pa.array([[span]] * record_batch.num_rows, pa.list_(pa.int64()))],
        schema=record_batch.schema.append(pa.field(SPAN_COLUMN, pa.list_(pa.int64()))),
    )


def by_span(record_batch: pa.RecordBatch) -> Iterable[Tuple[str, pa.RecordBatch]]:
    """TFDV slice function: each batch is one span's (see `compute_span_statistics`)."""
    index = record_batch.schema.get_field_index(SPAN_COLUMN)
    span = record_batch.column(index)[0].as_py()[0] if record_batch.num_rows else None
    if span is not None:
        kept = [i for i in range(record_batch.num_columns) if i != index]
        yield str(span), pa.RecordBatch.from_arrays(
            [record_batch.column(i) for i in kept], schema=pa.schema([record_batch.schema.field(i) for i in kept])
        )


def records(path: str, options: Optional[tf.io.TFRecordOptions] = _GZIP) -> Iterator[bytes]:
    """The records of TFRecord file `path` (GZIP unless `options` say otherwise), read by
    TensorFlow's record reader, which checks each record's CRCs as tf.data's does: about
    1 ms to open a file where a tf.data pipeline over it takes about 15 ms to build (the
    gate and ImportExampleGen open every span file, 43 on data/)."""
    return tf.compat.v1.io.tf_record_iterator(path, options)


def tfrecords(path: str) -> Iterator[bytes]:
    """The records of TFRecord file `path`, compressed as its name says (Beam's rule):
    GZIP and uncompressed files by TensorFlow's reader (CRCs checked), any other
    compression Beam can open by Beam's own record reader."""
    from apache_beam.io import filesystem, filesystems

    compression = filesystem.CompressionTypes.detect_compression_type(path)
    if compression == filesystem.CompressionTypes.GZIP:
        return records(path)
    if compression == filesystem.CompressionTypes.UNCOMPRESSED:
        return records(path, None)
    return _beam_records(filesystems.FileSystems.open(path, compression_type=compression))


def _beam_records(handle) -> Iterator[bytes]:
    from apache_beam.io import tfrecordio

    with handle:
        while True:
            record = tfrecordio._TFRecordUtil.read_record(handle)
            if record is None:
                return
            yield record


def in_batches(items: Iterable[bytes], size: int) -> Iterator[List[bytes]]:
    """`items` in lists of `size` (the last one shorter, none empty)."""
    batch: List[bytes] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def matching_files(patterns: List[str]) -> List[str]:
    """The files that match each of `patterns` (Beam's file systems), sorted; an error,
    in Beam's words, for a pattern that matches none, as Beam's own TFRecord source
    raises when the pipeline is built."""
    from apache_beam.io import filesystems

    found = []
    for pattern, result in zip(patterns, filesystems.FileSystems.match(list(patterns))):
        if not result.metadata_list:
            raise OSError(f"No files found based on the file pattern {pattern}")
        found += sorted(meta.path for meta in result.metadata_list)
    return found


class ReadRecordBatches(beam.DoFn):
    """A TFRecord file's records in lists of `size` (`tfrecords`): one Beam element per
    list, where Beam's own source makes one per record and batches them again after. A
    file that cannot be read to its end (truncated, corrupt) is named in the error."""

    def __init__(self, size: int):
        self._size = size

    def process(self, path: str) -> Iterator[List[bytes]]:
        try:
            yield from in_batches(tfrecords(path), self._size)
        except (tf.errors.OpError, OSError, EOFError, ValueError, zlib.error) as err:
            raise OSError(f"{path} cannot be read to its end: {type(err).__name__}: {err}") from err


def sampled_batches(path: str, rate: float) -> Iterator[List[bytes]]:
    """The records of GZIP TFRecord file `path` that are `in_sample` at `rate`, in
    batches of at most `DECODE_BATCH` (empty batches left out)."""
    return in_batches((record for record in records(path) if rate >= 1 or in_sample(record, rate)), DECODE_BATCH)


class ReadSpanFile(beam.DoFn):
    """One span file's records `in_sample`, decoded by the schema into record batches that
    carry the span (`add_span`). Records are read by TensorFlow's reader, not one Beam
    element each: Beam's per-element cost would be most of the pass."""

    def __init__(self, schema: Optional[schema_pb2.Schema], rate: float):
        self._schema, self._rate = schema, rate

    def setup(self) -> None:
        self._decoder = example_coder.ExamplesToRecordBatchDecoder(
            self._schema.SerializeToString() if self._schema is not None else None
        )

    def process(self, item: Tuple[int, str]) -> Iterable[pa.RecordBatch]:
        span, path = item
        for kept in sampled_batches(path, self._rate):
            yield add_span(self._decoder.DecodeBatch(kept), span)


class ReadDecodedBatches(beam.DoFn):
    """A TFRecord file's records in lists of `size` (`ReadRecordBatches`), each list
    `decode`d on one of `threads` threads while the next lists are read: tfx_bsl's decoder
    and TensorFlow's reader leave the GIL, so a bundle run on one thread uses more than
    one core (200,000 records decoded by the schema: 1.47 s on one thread, 0.84 s on two).
    The lists come out in the order they were read. Each thread decodes with its own copy
    of `decode` (tfx_bsl's decoder keeps state between its calls); Beam metrics that
    `decode` would count on those threads are not counted."""

    def __init__(self, size: int, decode: beam.DoFn, threads: int):
        self._read, self._decode, self._threads = ReadRecordBatches(size), decode, threads

    def setup(self) -> None:
        self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="decode")
        self._local = threading.local()
        self._copies: List[beam.DoFn] = []
        self._copies_lock = threading.Lock()

    def _decoded(self, batch: List[bytes]) -> list:
        decode = getattr(self._local, "decode", None)
        if decode is None:
            decode = self._local.decode = copy.deepcopy(self._decode)
            decode.setup()
            with self._copies_lock:
                self._copies.append(decode)
        return list(decode.process(batch))

    def process(self, path: str) -> Iterator[object]:
        pending: collections.deque = collections.deque()
        try:
            for batch in self._read.process(path):
                pending.append(self._pool.submit(self._decoded, batch))
                # Lists read ahead: enough to keep every thread busy, few enough to hold.
                if len(pending) > 2 * self._threads:
                    yield from pending.popleft().result()
            while pending:
                yield from pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()

    def teardown(self) -> None:
        self._pool.shutdown(wait=True)
        for decode in self._copies:
            decode.teardown()


@beam.ptransform_fn
def RecordBatchesOfFiles(pipeline, files: List[str], size: int, decode: beam.DoFn, threads: int = 1):
    """TFRecord `files`, each read by one `ReadRecordBatches` (the files shared out among
    Beam's workers), then `decode`d a list at a time; with `threads` above 1, decoded on
    that many threads while the file is read (`ReadDecodedBatches`)."""
    files_read = pipeline | "Files" >> beam.Create(files) | "ShareOut" >> beam.Reshuffle()
    if threads > 1:
        return files_read | "ReadAndDecode" >> beam.ParDo(ReadDecodedBatches(size, decode, threads))
    return files_read | "Read" >> beam.ParDo(ReadRecordBatches(size)) | "Decode" >> beam.ParDo(decode)
