"""Patches to tfx_bsl's TFXIO: an Examples artifact read a file at a time by TensorFlow's
reader into tfx_bsl's own decoder, where Beam's workers stay on this machine. What it
changes and why: `patches`.

When tfx_bsl or TFX changes under it,
tests/pipeline/patches/test_tfxio.py::test_the_tfx_bsl_internals_the_reading_relies_on_are_where_it_expects_them
fails for an internal that moved or changed (the inherited `BeamSource`, the batch cap,
the decoder's arguments, how each executor asks for its batch size), and
tests/pipeline/patches/test_tfxio.py::test_tf_examples_read_a_file_at_a_time_give_tfx_bsl_s_own_rows
for rows that are no longer tfx_bsl's. What it saves: docs/performance.md#patches-to-tfxio.
"""

from __future__ import annotations

import functools
import os
from typing import Callable, List

from components.support import beam_place
from pipeline.patches.machinery import Patch

# The rows of each batch an Examples artifact is read in (`patches`) when the reader
# names no size at all: StatisticsGen and the Evaluator, whose TFDV generators pay their
# Python per batch and per feature. Transform passes `None` (its desired batch size,
# unset) and keeps tfx_bsl's cap: it gains nothing from larger batches, and its quantile
# sketches depend on how the rows are batched (their bucket boundaries, and with them the
# Trainer's epochs, would move). Four batches of this size are held per decoding thread's
# lead. Measured: docs/performance.md#patches-to-tfxio.
READ_BATCH = 4096
# `BeamSource`'s batch size when its caller passes none (not even `None`).
_NO_SIZE = object()


def patches() -> List[Patch]:
    """`(owner, attribute, new value from the old one)` of each change to tfx_bsl.

    - `TFExampleRecord.BeamSource` (inherited from `RecordBasedTFXIO`), how StatisticsGen,
      Transform and the Evaluator read an Examples artifact's files: Beam's own TFRecord
      source reads each record in Python and makes it a Beam element, and tfx_bsl
      batches the elements again before decoding them. Where Beam's workers stay in this
      environment (`pipeline.beam.options.runs_here`), each file is read by TensorFlow's reader
      straight into lists of records (`beam_fns.RecordBatchesOfFiles`), decoded by
      tfx_bsl's own decoder (on a thread per core while the file is read, where Beam
      runs each bundle on one thread of this process: `_decode_threads`): the same rows,
      in batches of the size asked for, of tfx_bsl's cap of 1,000 rows where the reader
      leaves the size to tfx_bsl (`None`: tfx_bsl grows its batches from 1 up to that
      cap), or of `READ_BATCH` rows where it names none at all. So
      sums are added up in another order (a mean or standard deviation may differ in
      its last bit), and a schema-less decoding, StatisticsGen's, meets an optional
      feature earlier, which TFDV then lists earlier: the same inferred schema, in
      another feature order (on the test slice: the same eval metrics and predictions
      to 1e-6). Beam's raw-record and batching counters are not counted, nor tfx_bsl's
      record-batch telemetry (Beam distributions of each batch's byte size and values per
      row, which nothing on this machine reads, computed on the thread every bundle
      waits on). Beyond this environment (Dataflow, Flink, Spark, a portable job
      service), with tfx_bsl's byte-size batching (`--tfxio_use_byte_size_batching`), and
      for the other TFXIOs: tfx_bsl's own source.
    """
    from tfx_bsl.tfxio import tf_example_record

    return [(tf_example_record.TFExampleRecord, "BeamSource", _read_a_file_at_a_time)]


def _read_a_file_at_a_time(original: Callable) -> Callable:
    @functools.wraps(original)
    def BeamSource(self, batch_size=_NO_SIZE):
        import apache_beam as beam
        from tfx_bsl.coders import batch_util
        from tfx_bsl.tfxio import tf_example_record

        from components.custom import beam_fns

        asked = None if batch_size is _NO_SIZE else batch_size
        size = READ_BATCH if batch_size is _NO_SIZE else asked or batch_util._BATCH_SIZE_CAP
        if batch_util._UseByteSizeBatching():
            return original(self, asked)

        def expand(pipeline):
            if not (isinstance(pipeline, beam.pvalue.PBegin) and _workers_here(pipeline.pipeline)):
                return pipeline | "TFXIO" >> original(self, asked)
            decode = tf_example_record._DecodeBatchExamplesDoFn(
                self._GetSchemaForDecoding(), self.raw_record_column_name
            )
            files = beam_fns.matching_files(list(self._file_pattern))
            return (
                pipeline
                | "ReadRecordBatches"
                >> beam_fns.RecordBatchesOfFiles(
                    files, size, decode, _decode_threads(pipeline.pipeline)
                )
            )

        return beam.ptransform_fn(expand)()

    return BeamSource


def _decode_threads(pipeline) -> int:
    """Threads that decode a file's records while it is read: one per core where Beam runs
    each bundle on this process's one thread (the DirectRunner with one worker, its
    default); one where its workers already share the cores (Beam's threads or worker
    processes, any worker count but 1)."""
    from apache_beam.options.pipeline_options import DirectOptions

    direct = pipeline.options.view_as(DirectOptions)
    # Any other worker count than 1 (0: one per core) shares out bundles, whatever the mode.
    if direct.direct_num_workers != 1:
        return 1
    return os.cpu_count() or 1


def _workers_here(pipeline) -> bool:
    """Whether `pipeline`'s runner keeps Beam's workers in this environment."""
    return beam_place.place(type(pipeline.runner).__name__) is not beam_place.Place.ELSEWHERE
