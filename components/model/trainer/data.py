"""The Trainer's input pipeline: raw examples through the Transform layer, then batches
of `(features, label)`, by one of two paths chosen by the number of rows:

- up to `IN_MEMORY_ROWS`, into in-memory columns: the Transform graph runs once per raw
  example, while the rows are read; every epoch then permutes the columns at once and
  slices its batches from them (about 116 bytes a row, twice that during an epoch);
- beyond, through a transformed cache on disk: the Transform graph runs once per raw
  example, in one pass that writes the transformed rows (`write_cache`); every epoch
  then reads the cache in an order drawn from its seed (`from_cache`), so that memory
  does not grow with the data and no epoch pays the Transform graph again
  (docs/scale.md has both paths' throughput).

The steps' `input_signature` is derived from the transformed feature spec, with a
`None` batch dimension so that the last, partial batch does not retrace.
"""

from __future__ import annotations

import math
import os
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import tensorflow as tf
import tensorflow_transform as tft

from components.model import features
from components.model.trainer import model as model_lib
from components.model.trainer.settings import TrainConfig

Batch = Tuple[Dict[str, tf.Tensor], tf.Tensor]
# Raw features (dense or sparse) in, transformed features out (see `transform_fn`).
Transform = Callable[[Dict[str, object]], Mapping[str, tf.Tensor]]
# Raw examples per call of the Transform graph while building the dataset.
_TRANSFORM_BATCH = 1024
# Up to this many rows, the transformed rows are held in memory; beyond, cached on disk.
# Memory holds about 116 bytes a row, twice that while an epoch runs (its permuted copy)
# and for a moment while the columns are joined: 2M rows take 0.23-0.46 GB; beyond, the
# cache keeps the Trainer's memory flat. Measured (run_fn alone on a 1M run's 950k
# training rows, tfx-1.16, four alternating pairs): 26.1 s in memory against 30.5 s
# through the cache (medians), 90 MB more at peak.
IN_MEMORY_ROWS = 2_000_000
# Files the cache is written from at once, `_TRANSFORM_BATCH` records from each in turn
# (about 0.3 MB of reader each): files may hold rows of one span each, and chunks written
# one file after another would give batches of one span after another.
_INTERLEAVED_FILES = 128
# The cache's files: chunk i of `_TRANSFORM_BATCH` transformed rows goes to shard i mod this.
CACHE_SHARDS = 16
# Shards a shuffled epoch reads at once, in an order drawn from its seed: each shard
# holds every 16th chunk of the whole data, so an epoch goes over the data once per
# group of shards, and the groups differ from epoch to epoch.
_SHARDS_READ_AT_ONCE = 4
# Chunks in each epoch's shuffle buffer (about 115 KB each, 112 bytes a row).
CACHE_SHUFFLE_CHUNKS = 1024
# Rows permuted together, from chunks drawn out of that buffer, before they are cut
# into batches: a batch mixes rows of several chunks, and differs from epoch to epoch.
_MIXED_ROWS = 8 * _TRANSFORM_BATCH
# Written last into a cache folder, deleted first: a folder without it is a cache a kill
# cut short, while it was written or while it was deleted.
_CACHE_COMPLETE = "COMPLETE"


def transform_fn(tf_transform_output: tft.TFTransformOutput) -> Transform:
    """The Transform graph as a function of raw features, for the datasets, the serving
    signatures and the TFLite model alike.

    It is the `call` of TFT's `transform_features_layer()`, one layer per Transform
    output, which loads the graph once and tracks its tables and vocabularies (the
    exported model tracks the layer, see export.py). `call` and not the layer itself:
    Keras' `__call__` records the specs of the first inputs, and a Keras layer with
    recorded specs is traced again at export for Keras' own metadata, which makes the
    export several times slower and the SavedModel larger and slower to load, with
    nothing in serving reading that metadata. Keras then logs, at export, that it skips
    the full serialization of the layer "because it is not built": expected.
    """
    return tf_transform_output.transform_features_layer().call


def input_signature(transformed_feature_spec: Mapping[str, tf.io.FixedLenFeature]) -> Tuple:
    """`(features, label)` TensorSpecs with a `None` batch dimension."""
    label_key = features.transformed_label_key()
    feature_specs = {
        name: tf.TensorSpec([None], spec.dtype, name=name)
        for name, spec in sorted(transformed_feature_spec.items())
        if name != label_key
    }
    label_spec = tf.TensorSpec([None], transformed_feature_spec[label_key].dtype, name=label_key)
    return (feature_specs, label_spec)


def list_files(file_patterns: Sequence[str]) -> List[str]:
    """The files matching any of `file_patterns`, sorted; an error if there are none, so
    that a wrong split path fails here instead of training on nothing."""
    files = sorted(path for pattern in file_patterns for path in tf.io.gfile.glob(pattern))
    if not files:
        raise FileNotFoundError(f"no examples match {list(file_patterns)}")
    return files


def effective_batch_size(config: TrainConfig, train_examples: int) -> int:
    """`config.batch_size`, or smaller when the data would give too few steps per epoch."""
    if config.min_steps_per_epoch <= 0:
        return config.batch_size
    fitting = max(32, math.ceil(train_examples / config.min_steps_per_epoch))
    return min(config.batch_size, fitting)


def _plain(fn: Callable) -> Callable:
    """`fn` for `Dataset.map`, traced as written: tf.data runs AutoGraph on map functions by
    default, and converting these and the Transform graph they call is a measurable part
    of a short Trainer run; none of them has data-dependent Python control flow."""
    return tf.autograph.experimental.do_not_convert(fn)


def _parse_and_transform(transform: Transform) -> Callable[[tf.Tensor], Batch]:
    """A batch of serialized raw examples -> `(features, label)`."""
    raw_spec = features.raw_feature_spec(include_label=True)
    label_key = features.transformed_label_key()

    def parse_and_transform(serialized: tf.Tensor) -> Batch:
        transformed = transform(tf.io.parse_example(serialized, raw_spec))
        return model_lib.model_inputs(transformed), tf.reshape(transformed[label_key], [-1])

    return _plain(parse_and_transform)


def count_records(file_patterns: Sequence[str]) -> int:
    """The number of records in the files (one pass of reading, nothing parsed)."""
    # In batches: a reduce step per record costs tens of microseconds, per batch nothing.
    batches = tf.data.TFRecordDataset(list_files(file_patterns), compression_type="GZIP").batch(8192)
    return int(batches.reduce(tf.constant(0, tf.int64), lambda count, batch: count + tf.size(batch, tf.int64)))


def write_cache(file_patterns: Sequence[str], transform: Transform, cache_dir: str) -> bool:
    """Writes every transformed row of the raw examples under `cache_dir`, once: in
    chunks of `_TRANSFORM_BATCH` rows, read from up to `_INTERLEAVED_FILES` files in turn,
    over `CACHE_SHARDS` files (about 112 bytes a row, uncompressed). A complete cache is kept
    (a resumed Trainer reuses it); one a kill cut short is written again. True if written."""
    complete = os.path.join(cache_dir, _CACHE_COMPLETE)
    if tf.io.gfile.exists(complete):
        return False
    delete_cache(cache_dir)
    files = list_files(file_patterns)
    records = tf.data.Dataset.from_tensor_slices(files).interleave(
        lambda path: tf.data.TFRecordDataset(path, compression_type="GZIP", buffer_size=1 << 18),
        cycle_length=min(len(files), _INTERLEAVED_FILES), block_length=_TRANSFORM_BATCH,
    )
    chunks = records.batch(_TRANSFORM_BATCH).map(
        _parse_and_transform(transform), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )
    chunks.enumerate().save(cache_dir, shard_func=_plain(lambda index, _: index % CACHE_SHARDS))
    with tf.io.gfile.GFile(complete, "w") as handle:
        handle.write("")
    return True


def from_cache(cache_dir: str, batch_size: int, shuffle_seed: Optional[int] = None) -> tf.data.Dataset:
    """Batches of `(features, label)` from a cache `write_cache` completed: in the order
    written, or, given a seed, an order drawn from it alone: the shards in a permutation,
    `_SHARDS_READ_AT_ONCE` at a time, their chunks through a buffer of
    `CACHE_SHUFFLE_CHUNKS`, the rows of `_MIXED_ROWS` at a time permuted. Memory: the
    buffer and a few batches."""
    if not tf.io.gfile.exists(os.path.join(cache_dir, _CACHE_COMPLETE)):
        raise FileNotFoundError(f"no complete transformed cache in {cache_dir}")
    if shuffle_seed is None:
        chunks = tf.data.Dataset.load(
            cache_dir, reader_func=lambda shards: shards.interleave(lambda shard: shard, cycle_length=CACHE_SHARDS)
        )
        return chunks.map(_plain(lambda _, chunk: chunk)).rebatch(batch_size).prefetch(tf.data.AUTOTUNE)

    def read_shards(shards: tf.data.Dataset) -> tf.data.Dataset:
        return shards.shuffle(CACHE_SHARDS, seed=shuffle_seed).interleave(
            lambda shard: shard, cycle_length=_SHARDS_READ_AT_ONCE
        )

    def permute(index: tf.Tensor, rows: Batch) -> Batch:
        count = tf.shape(rows[1])[0]
        seed = tf.stack([tf.constant(shuffle_seed, tf.int64), index])
        order = tf.argsort(tf.random.stateless_uniform([count], seed=seed))
        return tf.nest.map_structure(lambda column: tf.gather(column, order), rows)

    return (
        tf.data.Dataset.load(cache_dir, reader_func=read_shards)
        .map(_plain(lambda _, chunk: chunk))
        .shuffle(CACHE_SHUFFLE_CHUNKS, seed=shuffle_seed, reshuffle_each_iteration=False)
        .rebatch(_MIXED_ROWS)
        .enumerate()
        .map(_plain(permute), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .rebatch(batch_size)
        .prefetch(tf.data.AUTOTUNE)
    )


def delete_cache(cache_dir: str) -> None:
    """Deletes a cache, its `COMPLETE` marker first: a kill part-way leaves a folder
    `write_cache` writes again, never part of a cache taken for whole."""
    complete = os.path.join(cache_dir, _CACHE_COMPLETE)
    if tf.io.gfile.exists(complete):
        tf.io.gfile.remove(complete)
    if tf.io.gfile.exists(cache_dir):
        tf.io.gfile.rmtree(cache_dir)


def transformed_rows(file_patterns: Sequence[str], transform: Transform) -> Batch:
    """All `(features, label)` rows of raw GZIP TFRecords of `tf.Example`, as in-memory
    columns: one tensor per feature, the rows along the first dimension.

    Raw examples are parsed by the feature spec and passed through `transform` once, in
    batches; every epoch then reads the columns (see `batched`).
    """
    chunks = list(
        tf.data.TFRecordDataset(list_files(file_patterns), compression_type="GZIP")
        .batch(_TRANSFORM_BATCH)
        .map(_parse_and_transform(transform), num_parallel_calls=tf.data.AUTOTUNE)
    )
    if not chunks:
        raise ValueError(f"no examples in {list(file_patterns)}")
    return tf.nest.map_structure(lambda *parts: tf.concat(parts, axis=0), *chunks)


def count_rows(rows: Batch) -> int:
    return int(tf.shape(rows[1])[0])


def batched(rows: Batch, batch_size: int, shuffle_seed: Optional[int] = None) -> tf.data.Dataset:
    """Batches of `rows`, in order, or, given a seed, in a permutation drawn from the seed
    alone (each iteration of the dataset gives the same batches; each epoch of the
    Trainer builds its dataset with a seed of its own, see `shuffled`).

    Batches are sliced from the columns (permuted first): tf.data never handles a row
    of 16 tensors on its own, which cost more than the training step itself.
    """
    if shuffle_seed is None:
        return _sliced(rows, count_rows(rows), batch_size)
    return shuffled(rows, batch_size)(shuffle_seed)


def shuffled(rows: Batch, batch_size: int) -> Callable[[int], tf.data.Dataset]:
    """`batched(rows, batch_size, seed)` as a function of the seed, for one dataset per
    epoch."""
    total = count_rows(rows)

    # The permutation is drawn and every column gathered by it once per epoch, eagerly, in
    # one stateless op (no global seed involved): a second copy of the rows while the
    # epoch runs. Gathering per batch cost four times as much; the same ops in a function
    # given to `flat_map` cost more again at each epoch's iterator, which instantiates
    # the function with the rows it captures.
    def batches(shuffle_seed: int) -> tf.data.Dataset:
        seed = tf.constant([shuffle_seed, 0], tf.int64)
        order = tf.random.experimental.stateless_shuffle(tf.range(total, dtype=tf.int64), seed=seed)
        return _sliced(tf.nest.map_structure(lambda column: tf.gather(column, order), rows), total, batch_size)

    return batches


def _sliced(rows: Batch, total: int, batch_size: int) -> tf.data.Dataset:
    """`rows` in batches, in order: the full batches as rows of a `[batches, batch_size]`
    reshape, sliced by tf.data without a function call per batch, then the partial one."""
    full = total // batch_size * batch_size
    batches = tf.data.Dataset.from_tensor_slices(
        tf.nest.map_structure(lambda column: tf.reshape(column[:full], [-1, batch_size]), rows)
    )
    if total > full:
        batches = batches.concatenate(
            tf.data.Dataset.from_tensors(tf.nest.map_structure(lambda column: column[full:], rows))
        )
    return batches.with_options(_without_rewrites())


def _without_rewrites() -> tf.data.Options:
    """Options for batches sliced from rows in memory: none of tf.data's rewrites (they
    have nothing to fuse or tune here), which serialize the dataset, the rows with it, at
    each of its iterators: an epoch's train and eval iterators cost 30-60 ms each that way
    at 12,000 rows, and about 1 ms without."""
    options = tf.data.Options()
    options.experimental_optimization.apply_default_optimizations = False
    options.autotune.enabled = False
    return options


def make_dataset(
    file_patterns: Sequence[str],
    transform: Transform,
    batch_size: int,
    shuffle_seed: Optional[int] = None,
) -> tf.data.Dataset:
    """Batches of `(features, label)`: `transformed_rows`, shuffled if a seed is given."""
    return batched(transformed_rows(file_patterns, transform), batch_size, shuffle_seed)
