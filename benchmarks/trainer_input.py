"""The Trainer's input paths on a finished run's train split, one epoch each, no training
step: in-memory columns; the transformed cache on disk (the path beyond memory); streamed
from the raw TFRecords through the Transform graph every epoch (the path beyond memory
before the cache); and streamed from materialized transformed examples (what Transform
writes with `materialize=True`).

    python benchmarks/trainer_input.py OUTPUT_ROOT [--batch-size 256]

OUTPUT_ROOT is a `taxi-pipeline run --output-root` that ran in all-spans mode.
"""

from __future__ import annotations

import argparse
import glob
import os
import tempfile
import time
from typing import List

import psutil
import tensorflow as tf
import tensorflow_transform as tft

from components.model import features
from components.model.trainer import data
from components.model.trainer import model as model_lib


def _latest(output_root: str, node: str, output: str) -> str:
    found = sorted(glob.glob(os.path.join(output_root, "pipeline_root", node, output, "*")),
                   key=lambda path: int(os.path.basename(path)))
    if not found:
        raise SystemExit(f"no {node} output under {output_root}")
    return found[-1]


# The streamed paths' shuffle buffer, in records.
SHUFFLE_BUFFER = 200_000


def _streamed(files: List[str], transform: data.Transform, batch_size: int, seed: int) -> tf.data.Dataset:
    """Raw records through a seeded shuffle buffer, each batch through the Transform graph."""
    records = tf.data.Dataset.from_tensor_slices(files).interleave(
        lambda path: tf.data.TFRecordDataset(path, compression_type="GZIP", buffer_size=1 << 18),
        cycle_length=min(len(files), 32), block_length=8,
    ).shuffle(SHUFFLE_BUFFER, seed=seed)
    raw_spec = features.raw_feature_spec(include_label=True)
    label_key = features.transformed_label_key()

    def parse_and_transform(serialized):
        transformed = transform(tf.io.parse_example(serialized, raw_spec))
        return model_lib.model_inputs(transformed), tf.reshape(transformed[label_key], [-1])

    return (records.batch(batch_size).map(parse_and_transform, num_parallel_calls=tf.data.AUTOTUNE)
            .prefetch(tf.data.AUTOTUNE))


def _epoch(dataset: tf.data.Dataset) -> int:
    return sum(int(labels.shape[0]) for _, labels in dataset)


# Rows materialized for the third path (built here in Python, one proto a row): its
# throughput is measured on these.
MATERIALIZED_ROWS = 200_000


def _materialize(files: List[str], transform: data.Transform, out: str) -> int:
    """The first `MATERIALIZED_ROWS` transformed rows as GZIP TFRecords of tf.Example."""
    raw_spec = features.raw_feature_spec(include_label=True)
    written = 0
    with tf.io.TFRecordWriter(out, "GZIP") as writer:
        for batch in tf.data.TFRecordDataset(files, "GZIP").take(MATERIALIZED_ROWS).batch(4096):
            transformed = {k: v.numpy() for k, v in transform(tf.io.parse_example(batch, raw_spec)).items()}
            for row in range(len(batch)):
                feature = {}
                for name, column in transformed.items():
                    value = column[row].reshape(-1)
                    if value.dtype.kind == "f":
                        feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=value))
                    else:
                        feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=value))
                writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
                written += 1
    return written


def measure(output_root: str, batch_size: int = 256) -> List[str]:
    """Markdown table rows, one per input path."""
    transform_output = tft.TFTransformOutput(_latest(output_root, "Transform", "transform_graph"))
    transform = data.transform_fn(transform_output)
    files = sorted(glob.glob(os.path.join(_latest(output_root, "ImportExampleGen", "examples"), "Split-train", "*")))
    rows = data.count_records(files)
    process = psutil.Process()
    lines = [f"{rows:,} training rows, batches of {batch_size}, one shuffled epoch each (input only):", "",
             "| path | preparation | one epoch | rows/s in the epoch | memory held |", "|---|---|---|---|---|"]

    before = process.memory_info().rss
    started = time.perf_counter()
    columns = data.transformed_rows(files, transform)
    prepared = time.perf_counter() - started
    held = (process.memory_info().rss - before) / 2**20
    started = time.perf_counter()
    assert _epoch(data.batched(columns, batch_size, shuffle_seed=1)) == rows
    seconds = time.perf_counter() - started
    lines.append(f"| in memory (up to {data.IN_MEMORY_ROWS:,} rows) | {prepared:.1f} s (transform once) | "
                 f"{seconds:.1f} s | {rows / seconds:,.0f} | {held:.0f} MB |")
    del columns

    with tempfile.TemporaryDirectory() as scratch:
        cache_dir = os.path.join(scratch, "cache")
        started = time.perf_counter()
        data.write_cache(files, transform, cache_dir)
        prepared = time.perf_counter() - started
        size = sum(os.path.getsize(os.path.join(folder, name))
                   for folder, _, names in os.walk(cache_dir) for name in names) / 2**20
        started = time.perf_counter()
        assert _epoch(data.from_cache(cache_dir, batch_size, shuffle_seed=1)) == rows
        seconds = time.perf_counter() - started
    buffer_mb = min(rows, data.CACHE_SHUFFLE_CHUNKS * data._TRANSFORM_BATCH) * size / rows
    lines.append(f"| transformed cache on disk (beyond {data.IN_MEMORY_ROWS:,} rows) | {prepared:.1f} s (transform "
                 f"once, write {size:.0f} MB) | {seconds:.1f} s | {rows / seconds:,.0f} | shuffle buffer "
                 f"({data.CACHE_SHUFFLE_CHUNKS:,} chunks, {buffer_mb:.0f} MB) |")

    started = time.perf_counter()
    assert _epoch(_streamed(files, transform, batch_size, seed=1)) == rows
    seconds = time.perf_counter() - started
    lines.append(f"| streamed, raw through the Transform graph every epoch (beyond, before the cache) | none | "
                 f"{seconds:.1f} s | {rows / seconds:,.0f} | shuffle buffer ({SHUFFLE_BUFFER:,} records) |")

    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "transformed.tfrecord.gz")
        materialized_rows = _materialize(files, transform, path)
        spec = transform_output.transformed_feature_spec()
        label_key = features.transformed_label_key()

        def parse(serialized):
            parsed = tf.io.parse_example(serialized, spec)
            return model_lib.model_inputs(parsed), tf.reshape(parsed[label_key], [-1])

        materialized = (tf.data.TFRecordDataset([path], "GZIP", buffer_size=1 << 20)
                        .shuffle(SHUFFLE_BUFFER, seed=1).batch(batch_size)
                        .map(parse, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE))
        started = time.perf_counter()
        assert _epoch(materialized) == materialized_rows
        seconds = time.perf_counter() - started
    lines.append(f"| streamed, materialized transformed examples (first {materialized_rows:,} rows) | "
                 f"Transform writes a second copy of the data | {seconds * rows / materialized_rows:.1f} s "
                 f"(scaled) | {materialized_rows / seconds:,.0f} | shuffle buffer |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output_root")
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()
    print("\n".join(measure(args.output_root, args.batch_size)))


if __name__ == "__main__":
    main()
