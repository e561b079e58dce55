"""The Trainer's input pipeline: raw examples through the Transform layer, then batches
of `(features, label)`, by one of two paths chosen by the number of rows:

- up to `IN_MEMORY_ROWS`, into in-memory columns: the Transform graph runs once per raw
  example, while the rows are read; every epoch then slices or gathers batches from
  the cached columns (about 260 bytes a row);
- beyond, streamed: every epoch reads the files again, shuffles through a buffer of
  `SHUFFLE_BUFFER` records and transforms each batch, so memory does not grow with
  the data (docs/scale.md has both paths' throughput).

The steps' `input_signature` is derived from the transformed feature spec, with a
`None` batch dimension so that the last, partial batch does not retrace.
"""

from __future__ import annotations

import math
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
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
# Up to this many rows, the transformed rows are held in memory; beyond, streamed.
IN_MEMORY_ROWS = 2_000_000
# Serialized records in the streamed path's shuffle buffer (about 300 bytes each).
SHUFFLE_BUFFER = 200_000
# Files the streamed path reads at once, a few records from each in turn: files hold
# rows of one span each, and a buffer filled from one file at a time would give batches
# of one span after another.
_INTERLEAVED_FILES = 32


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


def streamed(
    file_patterns: Sequence[str], transform: Transform, batch_size: int, shuffle_seed: Optional[int] = None
) -> tf.data.Dataset:
    """Batches of `(features, label)` read from the files each time the dataset is
    iterated: in file order, or, given a seed, the files in a permutation drawn from it,
    read `_INTERLEAVED_FILES` at a time, their records through a seeded shuffle buffer.
    Memory: the buffer and a few batches, whatever the size of the files."""
    files = list_files(file_patterns)
    if shuffle_seed is None:
        records = tf.data.TFRecordDataset(files, compression_type="GZIP", buffer_size=1 << 20)
    else:
        files = [files[i] for i in np.random.default_rng(shuffle_seed).permutation(len(files))]
        records = tf.data.Dataset.from_tensor_slices(files).interleave(
            lambda path: tf.data.TFRecordDataset(path, compression_type="GZIP", buffer_size=1 << 18),
            cycle_length=min(len(files), _INTERLEAVED_FILES), block_length=8, deterministic=True,
        ).shuffle(SHUFFLE_BUFFER, seed=shuffle_seed, reshuffle_each_iteration=False)
    return (
        records.batch(batch_size)
        .map(_parse_and_transform(transform), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .prefetch(tf.data.AUTOTUNE)
    )


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
    """Batches of `rows`, in order, or, given a seed, in a new permutation each epoch
    (each new iterator), reproducible from the seed.

    Batches are sliced or gathered from the columns: tf.data never handles a row of
    16 tensors on its own, which cost more than the training step itself.
    """
    total = count_rows(rows)
    if shuffle_seed is None:
        starts = tf.data.Dataset.range(0, total, batch_size)
        return starts.map(
            _plain(lambda start: tf.nest.map_structure(lambda column: column[start : start + batch_size], rows))
        )
    # A full shuffle of row numbers (8 bytes a row), then one gather per batch and column.
    indices = tf.data.Dataset.range(total).shuffle(total, seed=shuffle_seed, reshuffle_each_iteration=True)
    return (
        indices.batch(batch_size)
        .map(_plain(lambda batch: tf.nest.map_structure(lambda column: tf.gather(column, batch), rows)))
        .prefetch(tf.data.AUTOTUNE)
    )


def make_dataset(
    file_patterns: Sequence[str],
    transform: Transform,
    batch_size: int,
    shuffle_seed: Optional[int] = None,
) -> tf.data.Dataset:
    """Batches of `(features, label)`: `transformed_rows`, shuffled if a seed is given."""
    return batched(transformed_rows(file_patterns, transform), batch_size, shuffle_seed)
