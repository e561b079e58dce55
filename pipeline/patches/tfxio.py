"""Patches to tfx_bsl's TFXIO: an Examples artifact read a file at a time (see `patches`)."""

from __future__ import annotations

import functools
import os
from typing import Callable, List

from pipeline.patches.machinery import Patch

# The rows of each batch an Examples artifact is read in (`patches`) when the reader
# names no size at all: StatisticsGen and the Evaluator. At 1M rows, two alternating pairs
# of runs each: StatisticsGen 11.3 and 12.7 s at tfx_bsl's cap of 1,000 rows, 9.4-9.8 s at
# 4,096, 9.2-9.6 s at 8,192; the Evaluator within its spread at either. Transform passes
# `None` (its desired batch size, unset) and keeps tfx_bsl's cap: it was no faster at
# 4,096, and its quantile sketches depend on how the rows are batched (at 4,096 the 1M
# run's bucket boundaries moved, and with them the Trainer's epochs). Four batches of this
# size are held per decoding thread's lead.
READ_BATCH = 4096
# `BeamSource`'s batch size when its caller passes none (not even `None`).
_NO_SIZE = object()


def patches() -> List[Patch]:
    """`(owner, attribute, new value from the old one)` of each change to tfx_bsl.

    - `TFExampleRecord.BeamSource` (inherited from `RecordBasedTFXIO`), how StatisticsGen,
      Transform and the Evaluator read an Examples artifact's files: Beam's own TFRecord
      source reads each record in Python and makes it a Beam element, and tfx_bsl
      batches the elements again before decoding them. Where Beam's workers stay in this
      environment (`beam_args.runs_here`), each file is read by TensorFlow's reader
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
      row, which nothing on this machine reads: 0.26 s of Python per 200,000 rows, on
      the thread every bundle waits on; at 1M rows Transform 12.0-12.7 -> 11.8 s). Beyond this
      environment (Dataflow, Flink, Spark, a portable job service), with tfx_bsl's
      byte-size batching (`--tfxio_use_byte_size_batching`), and for the other TFXIOs:
      tfx_bsl's own source. 1M rows: Transform 27.8 -> 15.5 s, StatisticsGen 23.2 -> 16.6 s;
      decoded on two threads, Transform 17.2 -> 11.9 s; in batches of 4,096 rows rather
      than 1,000, StatisticsGen 11.3-12.7 -> 8.9-9.8 s (TFDV's generators pay their
      Python per batch and per feature).
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
    from pipeline import beam_args

    return beam_args.runs_here([f"--runner={type(pipeline.runner).__name__}"])
