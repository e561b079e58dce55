"""Checks of the data root before a run: nothing is written to MLMD for data that
cannot be ingested.

`checked_spans` lists (through `components.support.spans`, the listing ExampleGen's patterns match)
and needs no TensorFlow; `check_records` reads every file through.
"""

from __future__ import annotations

import os
import re
from concurrent.futures import Future
from typing import List, Optional, Tuple

from components import background
from components.support import spans
from components.support.files import tensorflow_reason

# Records decoded at a time when the data is checked before a run.
_CHECK_BATCH = 10_000
# Up to this many bytes of files, `check_records` reads them as one dataset first: on
# data/ (0.14 MB) 0.19 s instead of 0.4-0.6 s. At 100,000 rows (4.6 MB) the two take
# about the same time; at 1M rows (46 MB) one pass takes 5.9 s, file by file on two
# threads 2.4-3.1 s.
_ONE_PASS_BYTES = 2 << 20


class BadDataError(ValueError):
    """A span or file that cannot be ingested: empty, truncated, corrupt or not a
    TFRecord of tf.Example (exit 4, like data the schema rejects)."""


def check_schema(path: str) -> None:
    """The curated schema (the data contract every run imports) exists and parses as a
    `tensorflow_metadata` Schema, else a ValueError naming the file, the line and what to do."""
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as err:
        raise ValueError(f"the schema {path} cannot be read ({err.strerror}): restore it (it ships with the "
                         "components package; `git checkout components/model/schema` in a clone), then run "
                         "again") from err
    try:
        schema = text_format.Parse(text, schema_pb2.Schema())
    except text_format.ParseError as err:
        raise ValueError(f"the schema {path} does not parse: {err}: fix that line (or undo the edit), "
                         "then run again") from err
    if not schema.feature:
        raise ValueError(f"the schema {path} declares no feature: restore it, then run again")


def checked_spans(data_root: str) -> List[spans.Span]:
    """The spans under `data_root` with the files the pipeline would ingest, or an error
    naming the problem."""
    found = spans.list_spans(data_root)
    try:
        spans.refuse_strays(data_root)
    except ValueError as err:
        raise BadDataError(str(err)) from err
    files = [file for span in found for file in span.files]
    if not files:
        raise spans.DataRootError(
            f"data root {data_root} holds no span files (expected {spans.ALL_SPANS_PATTERN}); "
            "build them with `taxi-pipeline make-data`"
        )
    empty = [path for path, size in files if size == 0]
    if empty:
        raise BadDataError(f"empty data files (0 bytes): {', '.join(empty)}: copy each again (a transfer cut "
                           "short?), or move it out of the data root")
    empty_spans = [
        span.path + (f" (holds only {', '.join(os.path.basename(p) for p in span.ignored)})" if span.ignored else "")
        for span in found if not span.files
    ]
    if empty_spans:
        raise BadDataError(
            f"span folders without data files ({spans.FILES_IN_SPAN}): {'; '.join(empty_spans)}"
        )
    return found


def ignored_entries(data_root: str, found: List[spans.Span]) -> List[str]:
    """Everything under `data_root` that neither the check nor ExampleGen reads."""
    return spans.ignored_entries(data_root) + [path for span in found for path in span.ignored]


def check_records(files: List[str]) -> int:
    """Reads every file through: each must be a GZIP TFRecord of tf.Example whose
    features have the types `components.model.features` declares (a feature the contract does
    not name may have any type). Files are checked in parallel, one thread per core,
    each record parsed by TensorFlow's C++ parser.

    Up to `_ONE_PASS_BYTES` of files, they are read first as one dataset (a file's dataset
    costs about 25 ms to set up, most of the check on data/); file by file only if that
    fails, to name the file.

    Returns the number of examples; raises BadDataError naming the first bad file.
    """
    from concurrent.futures import ThreadPoolExecutor

    import tensorflow as tf

    if sum(tf.io.gfile.stat(path).length for path in files) <= _ONE_PASS_BYTES:
        count = _count_in_one_pass(files)
        if count is not None and not any(gzip_problem(path) for path in files):
            return count
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return sum(pool.map(_check_file, files))


def start_check(files: List[str]) -> Future[int]:
    """`check_records(files)` on a thread of its own, started now: its reading and parsing
    leave the GIL, so it runs while the run imports TFX and builds the pipeline (at 1M
    rows, about 3 s of the check beside 4 s of imports). The future's result is the
    number of examples, or the check's BadDataError. The thread is a daemon: a run that
    ends without reading the result (an import that failed, a run recovered instead)
    does not wait for the check to finish reading."""
    return background.started(lambda: check_records(files), "record-check")


def _contract_spec() -> dict:
    """Every feature the contract names, parsed as the type it declares."""
    import tensorflow as tf

    from components.model import features

    return {name: tf.io.VarLenFeature(dtype) for name, dtype in features.column_dtypes().items()}


def _count_in_one_pass(files: List[str]) -> Optional[int]:
    """The examples in `files`, read and parsed as one dataset; None if any file is not
    what `check_records` requires (holding no record included)."""
    import tensorflow as tf

    from components.model import features

    spec = _contract_spec()

    @tf.autograph.experimental.do_not_convert
    def batches_of(index, path):
        return tf.data.TFRecordDataset(path, compression_type="GZIP").batch(_CHECK_BATCH).map(
            lambda batch: (index, tf.io.parse_example(batch, spec)[features.LABEL_KEY].dense_shape[0])
        )

    batches = tf.data.Dataset.from_tensor_slices((tf.range(len(files)), files)).interleave(
        batches_of, cycle_length=2, num_parallel_calls=2, deterministic=False
    )
    counts = [0] * len(files)
    try:
        for index, size in batches.as_numpy_iterator():
            counts[index] += int(size)
    except (tf.errors.OpError, UnicodeDecodeError):
        return None
    return sum(counts) if all(counts) else None


def _mistyped(message: str) -> str:
    """The feature and its types, from TensorFlow's parse error (which opens with the name
    of its internal function: not a line for people)."""
    key = re.search(r"Key: (?P<key>[^,]+),", message)
    # Worded two ways, by TensorFlow's two parsers.
    types = (re.search(r"Expected type: (?P<wanted>\w+), Actual type: (?P<got>\w+)", message)
             or re.search(r"Data type: (?P<got>\w+) but expected type: (?P<wanted>\w+)", message))
    if key is None or types is None:
        return "a feature of another type than the contract's"
    return f"feature {key['key']!r} as {types['got']}, where the contract has {types['wanted']}"


def _check_file(path: str) -> int:
    import tensorflow as tf

    from components.model import features

    spec = _contract_spec()
    # Each batch's size, read from the parser's output (so that the parse is not pruned),
    # and the bytes its records take in the TFRecord stream (see `_ends_whole`).
    batches = tf.data.TFRecordDataset(path, compression_type="GZIP").batch(_CHECK_BATCH).map(
        lambda batch: (tf.io.parse_example(batch, spec)[features.LABEL_KEY].dense_shape[0],
                       tf.reduce_sum(tf.cast(tf.strings.length(batch, unit="BYTE"), tf.int64)))
    )
    count = stream_bytes = 0
    try:
        for size, data_bytes in batches.as_numpy_iterator():
            count += int(size)
            stream_bytes += int(data_bytes) + _RECORD_FRAMING * int(size)
    except tf.errors.InvalidArgumentError as err:
        message = err.message.splitlines()[0]
        where = f"{path}: a record among {count + 1}-{count + _CHECK_BATCH}"
        if "Could not parse example input" in message:
            raise BadDataError(f"{where} is not a serialized tf.Example") from err
        if "Data types don't match" in message:
            raise BadDataError(f"{where} has {_mistyped(message)}: fix the export upstream, or move the file out "
                               "of the data root") from err
        raise BadDataError(_unreadable(path, message)) from err
    except tf.errors.OpError as err:
        raise BadDataError(_unreadable(path, err.message)) from err
    except UnicodeDecodeError as err:
        # TensorFlow quotes the record it could not parse; binary garbage fails to decode.
        raise BadDataError(f"{path}: a record among {count + 1}-{count + _CHECK_BATCH} is not a serialized "
                           "tf.Example") from err
    cut = "" if _ends_whole(path, stream_bytes) else gzip_problem(path)
    if cut:
        raise BadDataError(f"{path} {cut} (after {count} whole records): copy it again, or move it out of the data "
                           "root")
    if count == 0:
        raise BadDataError(f"{path} holds no records (it may be another kind of file: a CSV goes through "
                           "`taxi-pipeline make-data`): copy it again, or move it out of the data root")
    return count


def _unreadable(path: str, message: str) -> str:
    """Names the damage where reading `path` record by record meets it; a file that reads
    whole then (a read that failed once, records that do not parse) is named with
    `message`, the error of the check's read."""
    count, reason = read_through(path, "GZIP")
    if not reason:
        return (f"{path} could not be read or parsed ({tensorflow_reason(message)}): check it, copy it again, or "
                "move it out of the data root")
    return (f"{path} is not a readable GZIP TFRecord file (truncated or corrupt after {count} whole records: "
            f"{reason}): copy it again, or move it out of the data root")


def read_through(path: str, compression: str) -> Tuple[int, str]:
    """The records TFRecord file `path` holds whole, read one by one to the first damage,
    and what TensorFlow says of that damage ("" when there is none)."""
    import tensorflow as tf

    count = 0
    try:
        for _ in tf.data.TFRecordDataset(path, compression_type=compression):
            count += 1
    except tf.errors.OpError as err:
        return count, tensorflow_reason(err.message)
    return count, ""


# A TFRecord's bytes around its data: its length (8) and two CRCs (4 each).
_RECORD_FRAMING = 16


def _ends_whole(path: str, stream_bytes: int) -> bool:
    """Whether GZIP file `path` ends with the trailer of a stream of `stream_bytes`
    bytes: its last four bytes are the stream's length modulo 2**32 (RFC 1952's ISIZE).
    TensorFlow's reader has read those bytes whole (every record's CRCs checked); a file
    cut anywhere else ends in deflated data, whose last four bytes match by a chance of
    one in 2**32. A file of several GZIP members (the last one's length) or cut just there
    does not match, and `gzip_problem` reads the stream through: reading every file
    through again was a second inflate of all the data, beside the run's imports
    (docs/performance.md, "the record check's trailer")."""
    import tensorflow as tf

    size = tf.io.gfile.stat(path).length
    if size < 18:  # a GZIP header and trailer
        return False
    with tf.io.gfile.GFile(path, "rb") as handle:
        handle.seek(size - 4)
        return int.from_bytes(handle.read(4), "little") == stream_bytes % 2**32


# Bytes read at a time when a GZIP file's stream is checked.
_GZIP_CHUNK = 1 << 20


def gzip_problem(path: str) -> str:
    """"" when `path` is a whole GZIP stream (one member or several, CRCs checked), else
    what is wrong. TensorFlow's and Beam's readers stop without an error where a cut
    falls between records inside a truncated file: only the stream's end says it is cut."""
    import zlib

    import tensorflow as tf

    inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
    try:
        with tf.io.gfile.GFile(path, "rb") as handle:
            while True:
                chunk = handle.read(_GZIP_CHUNK)
                if not chunk:
                    break
                while chunk:
                    inflater.decompress(chunk)
                    chunk = inflater.unused_data
                    if chunk:  # the next member of a multi-member file
                        inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
    except zlib.error as err:
        return f"is not a valid GZIP file ({err})"
    return "" if inflater.eof else "is truncated: its GZIP stream ends before its end marker"
