"""Builds `data/` from the Chicago taxi CSV that ships in the tfx wheel.

Each row becomes a `tf.Example` holding the features of `components.model.features`, the
span key and the `big_tip` label. A value missing in the CSV is left out of the
example: no zeros or empty strings are invented. Rows are grouped into one span per
calendar quarter of `trip_start_timestamp` and written, in source order, as GZIP
TFRecords under `<out>/span-<N>/`. The output is byte-for-byte reproducible.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import datetime
import os
import shutil
import tempfile
from typing import Dict, Iterable, List, Mapping, Optional

import tensorflow as tf

from components.model import features
from components.support import spans

# Span 1 is the first quarter of this year; spans count quarters from there on.
FIRST_SPAN_YEAR = 2013
TIMESTAMP_COLUMN = "trip_start_timestamp"
FARE_COLUMN, TIPS_COLUMN = features.FARE_KEY, features.TIPS_COLUMN


class DataError(ValueError):
    """The source data cannot be converted."""


def default_csv_path() -> str:
    import tfx

    return os.path.join(
        os.path.dirname(tfx.__file__), "examples", "chicago_taxi_pipeline", "data", "simple", "data.csv"
    )


def span_of(timestamp: int) -> int:
    """Quarter number of a UTC epoch timestamp, counting 2013Q1 as span 1."""
    when = datetime.datetime.fromtimestamp(timestamp, tz=datetime.timezone.utc)
    if when.year < FIRST_SPAN_YEAR:
        raise DataError(f"timestamp {timestamp} ({when:%Y-%m-%d}) is before {FIRST_SPAN_YEAR}")
    return (when.year - FIRST_SPAN_YEAR) * 4 + (when.month - 1) // 3 + 1


def span_label(span: int) -> str:
    year = FIRST_SPAN_YEAR + (span - 1) // 4
    return f"{year}Q{(span - 1) % 4 + 1}"


def _column_dtypes() -> Dict[str, tf.dtypes.DType]:
    """The CSV columns stored in each example (the label is computed)."""
    return {name: dtype for name, dtype in features.column_dtypes().items() if name != features.LABEL_KEY}


def _parse_value(raw: str, dtype: tf.dtypes.DType, column: str):
    if dtype == tf.string:
        return raw.encode("utf-8")
    try:
        number = float(raw)
    except ValueError as err:
        raise DataError(f"column {column!r}: {raw!r} is not a number") from err
    if dtype == tf.int64:
        if not number.is_integer():
            raise DataError(f"column {column!r}: {raw!r} is not an integer")
        return int(number)
    return number


def row_to_example(row: Mapping[str, str]) -> Optional[tf.train.Example]:
    """One CSV row as a tf.Example, or None when its label cannot be computed."""
    fare, tips = row.get(FARE_COLUMN, ""), row.get(TIPS_COLUMN, "")
    if fare == "" or tips == "":
        return None
    example = tf.train.Example()
    feature_map = example.features.feature
    for column, dtype in _column_dtypes().items():
        raw = row.get(column, "")
        if raw == "":
            continue  # missing stays missing
        value = _parse_value(raw, dtype, column)
        if dtype == tf.string:
            feature_map[column].bytes_list.value.append(value)
        elif dtype == tf.int64:
            feature_map[column].int64_list.value.append(value)
        else:
            feature_map[column].float_list.value.append(value)
    big_tip = float(tips) > features.BIG_TIP_FRACTION * float(fare)
    feature_map[features.LABEL_KEY].int64_list.value.append(int(big_tip))
    return example


@dataclasses.dataclass
class ConversionReport:
    rows_read: int = 0
    rows_without_label: int = 0
    examples_per_span: Dict[int, int] = dataclasses.field(default_factory=dict)

    def summary(self) -> str:
        lines = [f"read {self.rows_read} rows; skipped {self.rows_without_label} without fare or tips"]
        for span, count in sorted(self.examples_per_span.items()):
            lines.append(f"  span-{span} ({span_label(span)}): {count} examples")
        return "\n".join(lines)


def read_rows(csv_path: str) -> Iterable[Dict[str, str]]:
    with open(csv_path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        required = set(_column_dtypes()) | {FARE_COLUMN, TIPS_COLUMN}
        missing = sorted(required - set(reader.fieldnames or ()))
        if missing:
            raise DataError(f"{csv_path}: missing columns {missing}")
        yield from reader


def convert(csv_path: str, out_dir: str) -> ConversionReport:
    """Writes every span under `out_dir`, replacing the span folders already there.

    The spans are written to a staging folder inside `out_dir` first, so a failed
    conversion leaves the existing data untouched; then they are swapped in
    (`swap_in`), which puts the old spans back if anything fails on the way.
    """
    report = ConversionReport()
    by_span: Dict[int, List[bytes]] = collections.defaultdict(list)
    for line_number, row in enumerate(read_rows(csv_path), start=2):
        report.rows_read += 1
        try:
            example = row_to_example(row)
        except DataError as err:
            raise DataError(f"{csv_path}:{line_number}: {err}") from err
        if example is None:
            report.rows_without_label += 1
            continue
        span = span_of(int(float(row[TIMESTAMP_COLUMN])))
        by_span[span].append(example.SerializeToString(deterministic=True))

    os.makedirs(out_dir, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".staging-", dir=out_dir)
    try:
        options = tf.io.TFRecordOptions(compression_type="GZIP")
        for span, records in sorted(by_span.items()):
            span_dir = os.path.join(staging, spans.folder(span))
            os.makedirs(span_dir)
            path = os.path.join(span_dir, f"trips-{span_label(span)}.tfrecord.gz")
            with tf.io.TFRecordWriter(path, options) as writer:
                for record in records:
                    writer.write(record)
            report.examples_per_span[span] = len(records)
        swap_in(staging, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return report


def swap_in(staging: str, out_dir: str) -> None:
    """Replaces the span folders of `out_dir` with those of `staging`, by renames only.

    The old span folders are first moved aside into `<out_dir>/.previous-*` (a name no
    pattern of the pipeline reads), then the new ones are moved in, then the old ones are
    deleted. If a rename fails, what was moved in is taken out again and the old spans
    are moved back: `out_dir` is as it was. A process killed in the middle leaves the
    old spans in `.previous-*`, never deleted.
    """
    previous = tempfile.mkdtemp(prefix=".previous-", dir=out_dir)
    old = [name for name in sorted(os.listdir(out_dir)) if spans.number(name) is not None]
    moved_in: List[str] = []
    try:
        for name in old:
            os.replace(os.path.join(out_dir, name), os.path.join(previous, name))
        for name in sorted(os.listdir(staging)):
            os.replace(os.path.join(staging, name), os.path.join(out_dir, name))
            moved_in.append(name)
    except OSError:
        for name in moved_in:
            os.replace(os.path.join(out_dir, name), os.path.join(staging, name))
        for name in os.listdir(previous):
            os.replace(os.path.join(previous, name), os.path.join(out_dir, name))
        os.rmdir(previous)
        raise
    shutil.rmtree(previous)


def requests(data_root: str, count: Optional[int] = None) -> List[bytes]:
    """The first `count` examples (all by default) of the spans under `data_root`, in span
    and file order, label removed and serialized: what a client sends the model."""
    files = [path for span in spans.list_spans(data_root) for path, _ in span.files]
    records = tf.data.TFRecordDataset(files, compression_type="GZIP")
    found = []
    for record in records.take(count) if count is not None else records:
        example = tf.train.Example.FromString(record.numpy())
        del example.features.feature[features.LABEL_KEY]
        found.append(example.SerializeToString())
    return found
