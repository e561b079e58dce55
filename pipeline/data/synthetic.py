"""Synthetic data at any size, for timing and memory: `taxi-pipeline make-data --rows N`.

Rows are drawn with replacement from the Chicago taxi CSV (the wheel's by default), with
multiplicative log-normal noise on the numeric trip fields; the label is recomputed from
the noisy fare and tip, so it stays consistent with the features. Spans keep the source's
time order: the source rows are sorted by `trip_start_timestamp` and cut into `spans`
equal slices, and span k draws only from slice k.

The output is deterministic for a seed: span k's draws come from its own random stream,
`SeedSequence([seed, k])`, so a span does not change when others are added. It streams:
rows are generated and written in chunks, never all held. The examples' bytes are
assembled from pre-serialized pieces (each source row's fixed features, then the noisy
ones and the label), which parses to the same `tf.Example` as building the proto and is
about 15 times faster.

Synthetic rows are for measuring time and memory, not for judging a model: every row
repeats one of the source's trips.
"""

from __future__ import annotations

import csv
import dataclasses
import os
import shutil
import struct
import tempfile
from typing import Dict, Iterator, List, Sequence, Tuple

import numpy as np

from components.model import features
from components.support import spans
from pipeline.data import dataset

# The fields drawn with noise (each multiplied by its own log-normal factor): the numeric
# features, and tips, which is not stored but decides the label.
NOISY_FEATURES: Tuple[str, ...] = tuple(f.name for f in features.FEATURES if f.kind is features.Kind.NUMERIC)
DRIFT_FEATURE = "trip_miles"
README_FILE = "SYNTHETIC.md"
_CHUNK = 20_000


@dataclasses.dataclass(frozen=True)
class SyntheticConfig:
    rows: int
    out_dir: str
    spans: int = 8
    seed: int = 0
    # Standard deviation of the log of each noise factor.
    noise: float = 0.05
    # Rows per file: several files per span, as a sharded export writes them.
    rows_per_file: int = 250_000
    csv_path: str = ""
    # A slow drift: the log of DRIFT_FEATURE grows by this much from the first span to the
    # last, linearly (0.2 makes trips 22% longer by the end).
    drift: float = 0.0

    def __post_init__(self) -> None:
        if self.rows < self.spans:
            raise ValueError(f"--rows must be at least the number of spans ({self.spans}), got {self.rows}")
        if self.spans < 1 or self.rows_per_file < 1:
            raise ValueError("--spans and rows per file must be at least 1")
        if not 0 <= self.noise < 1:
            raise ValueError(f"noise must be in [0, 1), got {self.noise}")


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _entry(key: str, feature: bytes) -> bytes:
    """One `Features.feature` map entry: field 1, holding key (1) and Feature (2)."""
    name = key.encode()
    body = b"\x0a" + _varint(len(name)) + name + b"\x12" + _varint(len(feature)) + feature
    return b"\x0a" + _varint(len(body)) + body


def _float_prefix(key: str) -> bytes:
    """A map entry of one float value, without its 4 value bytes (appended per row)."""
    # Feature.float_list (2) { value (1), packed, 4 bytes }
    return _entry(key, b"\x12\x06\x0a\x04" + b"\0\0\0\0")[:-4]


def _label_entries() -> Tuple[bytes, bytes]:
    # Feature.int64_list (3) { value (1), packed, one varint }
    return tuple(_entry(features.LABEL_KEY, b"\x1a\x03\x0a\x01" + bytes([value])) for value in (0, 1))


@dataclasses.dataclass(frozen=True)
class _Source:
    """The source rows, sorted by time: each one's CSV row, its fixed features
    pre-serialized, its noisy values (NaN when missing) and its tip."""

    rows: List[Dict[str, str]]
    fixed: List[bytes]
    values: np.ndarray  # rows x NOISY_FEATURES, float64, NaN where missing
    tips: np.ndarray


def _load_source(csv_path: str) -> _Source:
    rows = []
    for row in dataset.read_rows(csv_path):
        example = dataset.row_to_example(row)
        if example is not None:
            rows.append((int(float(row[dataset.TIMESTAMP_COLUMN])), row, example))
    if not rows:
        raise dataset.DataError(f"{csv_path} holds no row with a fare and a tip")
    rows.sort(key=lambda item: item[0])
    fixed, values = [], np.full((len(rows), len(NOISY_FEATURES)), np.nan)
    for index, (_, _, example) in enumerate(rows):
        feature_map = example.features.feature
        for column, name in enumerate(NOISY_FEATURES):
            if name in feature_map:
                values[index, column] = feature_map[name].float_list.value[0]
                del feature_map[name]
        del feature_map[features.LABEL_KEY]
        fixed.append(example.features.SerializeToString(deterministic=True))
    return _Source(
        rows=[row for _, row, _ in rows], fixed=fixed, values=values,
        tips=np.array([float(row[dataset.TIPS_COLUMN]) for _, row, _ in rows]),
    )


def _span_rows(config: SyntheticConfig) -> List[int]:
    base, extra = divmod(config.rows, config.spans)
    return [base + (1 if index < extra else 0) for index in range(config.spans)]


@dataclasses.dataclass(frozen=True)
class _Draws:
    """A chunk of one span's rows: source row, noisy values (float32, NaN where
    missing), noisy tip and label."""

    picked: np.ndarray
    values: np.ndarray
    tips: np.ndarray
    big_tip: np.ndarray


def _span_draws(source: _Source, config: SyntheticConfig, span: int, count: int) -> Iterator[_Draws]:
    total = len(source.fixed)
    low = (span - 1) * total // config.spans
    high = max(span * total // config.spans, low + 1)
    rng = np.random.default_rng(np.random.SeedSequence([config.seed, span]))
    fare_column = NOISY_FEATURES.index(features.FARE_KEY)
    for start in range(0, count, _CHUNK):
        size = min(_CHUNK, count - start)
        picked = rng.integers(low, high, size)
        factors = rng.lognormal(0.0, config.noise, (size, len(NOISY_FEATURES) + 1))
        if config.drift and config.spans > 1:
            factors[:, NOISY_FEATURES.index(DRIFT_FEATURE)] *= np.exp(config.drift * (span - 1) / (config.spans - 1))
        values = (source.values[picked] * factors[:, :-1]).astype(np.float32)
        tips = source.tips[picked] * factors[:, -1]
        big_tip = tips > features.BIG_TIP_FRACTION * values[:, fare_column].astype(np.float64)
        yield _Draws(picked, values, tips, big_tip)


def span_records(source: _Source, config: SyntheticConfig, span: int, count: int) -> Iterator[bytes]:
    """The serialized examples of synthetic span `span` (1-based), `count` of them."""
    prefixes = [_float_prefix(name) for name in NOISY_FEATURES]
    labels = _label_entries()
    for draws in _span_draws(source, config, span, count):
        present = ~np.isnan(draws.values)
        for row in range(len(draws.picked)):
            parts = [source.fixed[draws.picked[row]]]
            for column, prefix in enumerate(prefixes):
                if present[row, column]:
                    parts += (prefix, struct.pack("<f", draws.values[row, column]))
            parts.append(labels[int(draws.big_tip[row])])
            body = b"".join(parts)
            yield b"\x0a" + _varint(len(body)) + body


def write_csv(config: SyntheticConfig, path: str) -> int:
    """The same rows as `write`, as a CSV with the source's columns (the tip included, from
    which TFX's taxi example computes the same label); for comparing with that example."""
    csv_path = config.csv_path or dataset.default_csv_path()
    source = _load_source(csv_path)
    columns = list(source.rows[0])
    written = 0
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        for index, count in enumerate(_span_rows(config)):
            for draws in _span_draws(source, config, index + 1, count):
                for row in range(len(draws.picked)):
                    out = dict(source.rows[draws.picked[row]])
                    for column, name in enumerate(NOISY_FEATURES):
                        if not np.isnan(draws.values[row, column]):
                            out[name] = repr(float(draws.values[row, column]))
                    out[dataset.TIPS_COLUMN] = repr(float(draws.tips[row]))
                    writer.writerow(out)
                    written += 1
    return written


def _readme(config: SyntheticConfig, counts: Sequence[int], csv_digest: str) -> str:
    per_span = ", ".join(f"span-{index + 1}: {count}" for index, count in enumerate(counts))
    command = (f"taxi-pipeline make-data --rows {config.rows} --spans {config.spans} --seed {config.seed} "
               f"--drift {config.drift} --out ...")
    return f"""# Synthetic data: for timing and memory, not for judging a model

Written by `{command}`.

- Source: `{os.path.basename(config.csv_path)}` (sha256 {csv_digest[:16]}), sorted by
  `trip_start_timestamp` and cut into {config.spans} time slices; span k draws its rows with
  replacement from slice k.
- Noise: {", ".join(NOISY_FEATURES)} and the tip are each multiplied by a log-normal factor
  (sigma {config.noise}); the label `{features.LABEL_KEY}` is recomputed from the noisy tip and fare.
  Every other field is the source row's. Drift: the log of `{DRIFT_FEATURE}` grows linearly by
  {config.drift} from the first span to the last.
- Rows: {config.rows} ({per_span}); at most {config.rows_per_file} rows per file.
- The same command writes the same bytes again.
"""


def write(config: SyntheticConfig) -> Dict[int, int]:
    """Writes the spans under `config.out_dir`, replacing the span folders already there
    (staged, then swapped in: a failure leaves the old spans); rows per span."""
    import tensorflow as tf

    csv_path = config.csv_path or dataset.default_csv_path()
    config = dataclasses.replace(config, csv_path=csv_path)
    source = _load_source(csv_path)
    counts = _span_rows(config)
    os.makedirs(config.out_dir, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".staging-", dir=config.out_dir)
    options = tf.io.TFRecordOptions(compression_type="GZIP")
    try:
        for index, count in enumerate(counts):
            span = index + 1
            folder = os.path.join(staging, spans.folder(span))
            os.makedirs(folder)
            files = -(-count // config.rows_per_file)
            records = span_records(source, config, span, count)
            for part in range(files):
                path = os.path.join(folder, f"trips-{part:05d}-of-{files:05d}.tfrecord.gz")
                with tf.io.TFRecordWriter(path, options) as writer:
                    for _ in range(min(config.rows_per_file, count - part * config.rows_per_file)):
                        writer.write(next(records))
        dataset.swap_in(staging, config.out_dir)
        with open(os.path.join(config.out_dir, README_FILE), "w") as handle:
            handle.write(_readme(config, counts, spans.sha256(csv_path)))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {index + 1: count for index, count in enumerate(counts)}
