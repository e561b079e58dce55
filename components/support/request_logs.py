"""Logged serving traffic, read back as the `tf.Example`s the model was sent.

Three formats, detected from a file's first record or named with `--format`:

- `examples`: TFRecords (GZIP or not, told by the bytes, not the name) of serialized
  `tf.Example`, as a client or gateway logs what it sends to `serving_default`;
- `prediction-logs`: TFRecords of TF Serving's `PredictionLog` (what `taxi-pipeline
  predict` and tfx_bsl's RunInference write): the examples of each predict, classify or
  regress request;
- `json`: JSON lines of TF Serving REST request bodies, `{"instances": [...]}`, each
  instance a base64 `tf.Example` (`{"b64": ...}`, or `{"examples": {"b64": ...}}`) or an
  object of raw features (`{"fare": 12.5, "payment_type": "Cash", ...}`); or rows of a
  request-response log table exported as JSON lines: Vertex AI's (`request_payload`, one
  JSON instance or request body per item) or AI Platform's (`raw_data`, the body).

A record that cannot be read as requests is malformed: `Malformed` names its file and
record (TFRecords: its index from 0) or line (JSON: from 1). A damaged TFRecord file (a
bad checksum, a cut GZIP stream) is one malformed entry for the records after the last
whole one. This module imports what a Beam worker needs and nothing of TFX.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import gzip
import json
from typing import Iterator, List, Optional, Tuple, Union

import tensorflow as tf
from google.protobuf.message import DecodeError

from components.model import features
from components.support import traffic
from components.support.files import tensorflow_reason

EXAMPLES, PREDICTION_LOGS, JSON_LINES = FORMATS = traffic.REQUEST_FORMATS
# The request input of `serving_default` (components.model.trainer.settings.EXAMPLES_INPUT).
EXAMPLES_INPUT = "examples"
GZIP_MAGIC = b"\x1f\x8b"


@dataclasses.dataclass(frozen=True)
class Malformed:
    """One record that is not a request: where it is, and why."""

    path: str
    where: str  # "record 12" or "line 3"
    reason: str

    def __str__(self) -> str:
        return f"{self.path}, {self.where}: {self.reason}"


# A request's serialized tf.Example with where it is ("record 3", "line 7"), or a record
# that is none.
Item = Union[Tuple[str, bytes], Malformed]


def _compression(path: str) -> str:
    with tf.io.gfile.GFile(path, "rb") as handle:
        return "GZIP" if handle.read(2) == GZIP_MAGIC else ""


def _first_bytes(path: str, size: int = 4096) -> bytes:
    with tf.io.gfile.GFile(path, "rb") as handle:
        head = handle.read(size)
    if head[:2] == GZIP_MAGIC:
        with tf.io.gfile.GFile(path, "rb") as handle, gzip.GzipFile(fileobj=handle) as unzipped:
            try:
                return unzipped.read(size)
            except (OSError, EOFError):
                return b""
    return head


def _known_features(example: tf.train.Example) -> bool:
    names = set(example.features.feature)
    return any(feature.name in names for feature in features.FEATURES)


def detect(path: str) -> str:
    """The format of the file at `path`, from its first record; ValueError if none fits."""
    if _first_bytes(path).lstrip()[:1] == b"{":
        return JSON_LINES
    from tensorflow_serving.apis import prediction_log_pb2

    try:
        first = next(iter(tf.data.TFRecordDataset(path, compression_type=_compression(path)).take(1)), None)
    except tf.errors.OpError as err:
        raise ValueError(f"{path} is neither JSON lines nor a readable TFRecord file "
                         f"({tensorflow_reason(err.message, 120)}): name its format with --format") from err
    if first is None:
        raise ValueError(f"{path} holds no records: leave it out, or name its format with --format")
    record = first.numpy()
    try:
        if _known_features(tf.train.Example.FromString(record)):
            return EXAMPLES
    except DecodeError:
        pass
    try:
        if _log_examples(prediction_log_pb2.PredictionLog.FromString(record)):
            return PREDICTION_LOGS
    except DecodeError:
        pass
    raise ValueError(f"the first record of {path} is neither a tf.Example of this model's features nor a "
                     f"PredictionLog: name its format with --format ({', '.join(FORMATS)})")


def _log_examples(log) -> List[bytes]:
    """The serialized examples of one PredictionLog's request."""
    kind = log.WhichOneof("log_type")
    if kind == "predict_log":
        inputs = log.predict_log.request.inputs
        return list(inputs[EXAMPLES_INPUT].string_val) if EXAMPLES_INPUT in inputs else []
    if kind in ("classify_log", "regress_log"):
        examples = getattr(log, kind).request.input.example_list.examples
        return [example.SerializeToString() for example in examples]
    if kind == "multi_inference_log":
        return [e.SerializeToString() for e in log.multi_inference_log.request.input.example_list.examples]
    return []


def _valid_example(record: bytes) -> Optional[str]:
    """None when `record` is a tf.Example with at least one of the model's features, else why not."""
    try:
        example = tf.train.Example.FromString(record)
    except DecodeError:
        return "not a tf.Example"
    return None if _known_features(example) else "a tf.Example with none of the model's features"


def _tfrecords(path: str) -> Iterator[Tuple[int, Union[bytes, str]]]:
    """(index, record) for each whole record, then (index, why) if the file is damaged there."""
    dataset = tf.data.TFRecordDataset(path, compression_type=_compression(path))
    index = 0
    try:
        for batch in dataset.batch(1000):
            for record in batch.numpy():
                yield index, record
                index += 1
        return
    except tf.errors.OpError:
        pass
    # Damaged: the whole records of the batch it stopped in, one by one, up to the damage.
    try:
        for record in dataset.skip(index):
            yield index, record.numpy()
            index += 1
    except tf.errors.OpError as err:
        yield index, f"the file is damaged from here on ({tensorflow_reason(err.message, 160)})"


def read_examples(path: str) -> Iterator[Item]:
    for index, record in _tfrecords(path):
        problem = record if isinstance(record, str) else _valid_example(record)
        yield Malformed(path, f"record {index}", problem) if problem else (f"record {index}", record)


def read_prediction_logs(path: str) -> Iterator[Item]:
    from tensorflow_serving.apis import prediction_log_pb2

    for index, record in _tfrecords(path):
        if isinstance(record, str):
            yield Malformed(path, f"record {index}", record)
            continue
        try:
            found = _log_examples(prediction_log_pb2.PredictionLog.FromString(record))
        except DecodeError:
            yield Malformed(path, f"record {index}", "not a PredictionLog")
            continue
        if not found:
            yield Malformed(path, f"record {index}", "a PredictionLog without tf.Examples in its request")
        for example in found:
            problem = _valid_example(example)
            yield Malformed(path, f"record {index}", problem) if problem else (f"record {index}", example)


def raw_example(instance: dict) -> tf.train.Example:
    """A tf.Example of raw feature values, as the raw-feature signature takes them;
    ValueError naming a feature that is unknown or of the wrong type."""
    dtypes = features.column_dtypes()
    example = tf.train.Example()
    for name, value in instance.items():
        if name not in dtypes:
            raise ValueError(f"unknown feature {name!r}")
        values = value if isinstance(value, list) else [value]
        if any(v is None for v in values):
            continue  # a missing value, as in a tf.Example without it
        feature = example.features.feature[name]
        try:
            if dtypes[name] == tf.string:
                feature.bytes_list.value.extend(str(v).encode() for v in values)
            elif dtypes[name].is_integer:
                feature.int64_list.value.extend(_integer(v) for v in values)
            else:
                feature.float_list.value.extend(float(v) for v in values)
        except (TypeError, ValueError):
            raise ValueError(f"feature {name!r} has a value of the wrong type: {value!r}") from None
    return example


def _integer(value) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(value)
    return int(value)


def _instance_example(instance) -> bytes:
    """The serialized tf.Example of one REST instance (ValueError if it is none)."""
    if isinstance(instance, dict) and set(instance) == {EXAMPLES_INPUT}:
        instance = instance[EXAMPLES_INPUT]
    if isinstance(instance, dict) and set(instance) == {"b64"}:
        try:
            record = base64.b64decode(instance["b64"], validate=True)
        except (binascii.Error, TypeError):
            raise ValueError("its b64 value is not base64") from None
        problem = _valid_example(record)
        if problem:
            raise ValueError(problem)
        return record
    if isinstance(instance, dict):
        return raw_example(instance).SerializeToString()
    raise ValueError(f"an instance is neither an object nor {{\"b64\": ...}}: {str(instance)[:60]}")


def _instances(row) -> list:
    """The instances of one JSON line: a request body, or a request-response log row."""
    if not isinstance(row, dict):
        raise ValueError("not a JSON object")
    if "instances" in row:
        if not isinstance(row["instances"], list):
            raise ValueError("'instances' is not a list")
        return row["instances"]
    if "raw_data" in row:  # AI Platform's request log: the body, as a string
        return _instances(json.loads(row["raw_data"]))
    if "request_payload" in row:  # Vertex AI's: each item an instance (or a body), as JSON text
        payload = row["request_payload"]
        found = []
        for item in payload if isinstance(payload, list) else [payload]:
            parsed = json.loads(item) if isinstance(item, str) else item
            found.extend(_instances(parsed) if isinstance(parsed, dict) and "instances" in parsed else [parsed])
        return found
    raise ValueError("no 'instances', 'request_payload' or 'raw_data'")


def read_json_lines(path: str) -> Iterator[Item]:
    with tf.io.gfile.GFile(path, "rb") as raw:
        compressed = raw.read(2) == GZIP_MAGIC
    with tf.io.gfile.GFile(path, "rb") as raw:
        handle = gzip.GzipFile(fileobj=raw) if compressed else raw
        number = 0
        try:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    found = [_instance_example(i) for i in _instances(json.loads(line))]
                except (ValueError, UnicodeDecodeError) as err:  # json's JSONDecodeError is a ValueError
                    yield Malformed(path, f"line {number}", str(err)[:160])
                    continue
                yield from ((f"line {number}", record) for record in found)
        except (OSError, EOFError) as err:
            yield Malformed(path, f"line {number + 1}", f"the file is damaged from here on ({err})")


READERS = {EXAMPLES: read_examples, PREDICTION_LOGS: read_prediction_logs, JSON_LINES: read_json_lines}


def read(path: str, file_format: str) -> Iterator[Item]:
    """Each request example of the file (serialized), or a `Malformed` where one is not."""
    return READERS[file_format](path)
