"""The data gate's per-span statistics: TFDV statistics of each span on its own, computed
from the spans' files (all spans hash-split mode; in window mode each span is its own
split, and StatisticsGen's statistics of it are read back by `split_statistics`).

They are computed with TFDV's `GenerateStatistics` on the pipeline's Beam settings (one
streaming pass over the spans' files); up to `IN_PROCESS_ROWS` rows read into the
statistics, where Beam runs in this process anyway (`computed_in_process`), by TFDV's
in-memory computation here instead (`span_statistics_in_process`; in a local run, those
a process started with the run computed the same way from the same files, when there are
some: `computed_ahead`). Above
`SPAN_SAMPLE_ROWS` rows per span they are computed from a sample: each record is kept or
not by a hash of its bytes (deterministic: the same data gives the same verdict), at the
rate that leaves about that many rows per span. The check against the schema's fractions
(domain mass, presence) and the drift distances are then estimates; docs/scale.md gives
their measured error. A rule that one bad row breaks (a required feature missing) is
still checked on every row, by ExampleValidator over the whole splits.
"""

import hashlib
import json
import logging
import os
from typing import Callable, Dict, Iterator, List, Optional, Sequence, TypeVar

import apache_beam as beam
import tensorflow as tf
import tensorflow_data_validation as tfdv
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions
from tensorflow_metadata.proto.v0 import schema_pb2, statistics_pb2
from tfx.types import standard_artifacts

from components.custom import beam_fns
from components.support import beam_place, files, spans

# StatisticsGen's file of one split's statistics; the gate's own, of every span, is
# `span-FeatureStats.pb` in its verdict's folder.
STATS_FILE = "FeatureStats.pb"

# Above about this many rows per span on average, each span's statistics come from a
# sample of about this many rows (see the module's docstring).
SPAN_SAMPLE_ROWS = 25_000
# Up to this many rows read into the statistics in all (after sampling), and when Beam runs
# in the component's process anyway (`beam_runs_here`), the spans' statistics are computed
# in that process, a span per thread (`span_statistics_in_process`): 1.3 s instead of
# 2.6 s on data/ (15k rows), 4.0 s instead of 7.5 s at 1M rows (a sample of 200,000);
# beyond, by the pipeline's Beam runner, whose workers share the reading. StatisticsGen's
# statistics of the splits the same way, up to its own limit (`components.custom.statistics`).
IN_PROCESS_ROWS = 300_000
# TFDV's in-memory statistics count categorical values exactly up to this many distinct
# values (its Misra-Gries sketch's size, `stats_impl._DEFAULT_MG_SKETCH_SIZE`).
EXACT_DISTINCT_VALUES = 1024

T = TypeVar("T")


def sample_rate(total_rows: int, span_count: int) -> float:
    """The fraction of records the per-span statistics read: 1 up to `SPAN_SAMPLE_ROWS`
    rows per span on average, less beyond."""
    if total_rows <= 0 or span_count <= 0:
        return 1.0
    return min(1.0, SPAN_SAMPLE_ROWS * span_count / total_rows)


def compute_span_statistics(
    pipeline: beam.Pipeline, data_root: str, numbers: List[int], output_dir: str,
    schema: Optional[schema_pb2.Schema] = None, rate: float = 1.0, in_process: bool = False,
) -> Dict[int, statistics_pb2.DatasetFeatureStatisticsList]:
    """TFDV statistics of each of the spans `numbers`, from the records `beam_fns.in_sample`
    at `rate`, also written to `output_dir` (`span-FeatureStats.pb`, one dataset per span,
    named by its number).

    In one streaming pass of `pipeline` (one statistics computation sliced by span, not
    one per span; Beam spreads the files over its workers); with `in_process`, span by
    span in this process instead (`span_statistics_in_process`, or those a process
    started with a local run computed the same way from the same files: `computed_ahead`),
    unless a categorical feature of a span has more distinct values than that
    computation counts exactly.

    Records are decoded by `schema`, so that every batch holds the same columns (without
    one, a batch holds the features its records happen to have, and batches of one span
    that disagree cannot be combined)."""
    found = spans.list_spans(data_root, only=numbers)
    if sorted(span.number for span in found) != sorted(numbers):
        raise ValueError(f"spans {numbers} were ingested but are no longer all under {data_root}")
    path = os.path.join(output_dir, f"span-{STATS_FILE}")
    result = (computed_ahead(found, schema, rate) or span_statistics_in_process(found, schema, rate)
              if in_process else None)
    if result is not None and any(beyond_exact_counts(statistics) for statistics in result.values()):
        logging.info("a categorical feature of a span has more than %d distinct values: the spans' statistics "
                     "are computed by the Beam pass instead", EXACT_DISTINCT_VALUES)
        result = None
    if result is not None:
        tf.io.gfile.makedirs(output_dir)
        sliced = statistics_pb2.DatasetFeatureStatisticsList(
            datasets=[result[number].datasets[0] for number in sorted(result)]
        )
        with tf.io.gfile.GFile(path, "wb") as handle:
            handle.write(sliced.SerializeToString())
    else:
        result = _span_statistics_in_beam(pipeline, found, path, schema, rate)
    empty = sorted(set(numbers) - set(result))
    if empty:
        raise ValueError(f"spans {empty} under {data_root} hold no examples")
    return result


def beam_runs_here(options: PipelineOptions) -> bool:
    """Whether `options` run Beam in this process (the DirectRunner in memory or on
    threads). Elsewhere (a portable job service, Flink, Spark, Dataflow, the DirectRunner's
    worker processes) the user sent Beam's work out of the component's process: the
    gate's pass goes there too, whatever the data's size."""
    where = beam_place.place(options.view_as(StandardOptions).runner,
                             options.view_as(DirectOptions).direct_running_mode)
    return where is beam_place.Place.PROCESS


def computed_in_process(total_rows: int, rate: float, options: PipelineOptions) -> bool:
    """Whether the spans' statistics are computed in the component's process: when Beam
    runs there anyway, and the rows read into them (`total_rows` at the sample `rate`)
    are at most `IN_PROCESS_ROWS`."""
    return round(total_rows * rate) <= IN_PROCESS_ROWS and beam_runs_here(options)


def beyond_exact_counts(statistics: statistics_pb2.DatasetFeatureStatisticsList) -> bool:
    """Whether a categorical feature has more distinct values than TFDV's in-memory
    computation counts exactly."""
    return any(feature.string_stats.unique > EXACT_DISTINCT_VALUES
               for dataset in statistics.datasets for feature in dataset.features)


def span_statistics_in_process(
    found: List[spans.Span], schema: Optional[schema_pb2.Schema], rate: float,
) -> Dict[int, statistics_pb2.DatasetFeatureStatisticsList]:
    """Each span's statistics computed in this process, one span's decoded records in
    memory per thread at a time (a thread per core), by TFDV's in-memory computation. For
    small or sampled data: it spares the fixed cost of a Beam pipeline, about half of the
    gate's time on data/, and its reading and decoding leave the GIL.

    It counts categorical values with sketches (Misra-Gries, KMV) where the Beam pass
    counts exactly: the same figures while a feature has at most `EXACT_DISTINCT_VALUES`
    distinct values in a span (`compute_span_statistics` checks, and falls back to the
    Beam pass beyond); every other statistic is the Beam pass's to the last bits of a float."""
    return statistics_of_spans(found, lambda span: span_records(span, rate), schema)


def span_batches(span: spans.Span, rate: float) -> Iterator[List[bytes]]:
    """The serialized records of `span` the statistics read at the sample `rate`, in batches."""
    for file, _ in span.files:
        yield from beam_fns.sampled_batches(file, rate)


def span_records(span: spans.Span, rate: float) -> List[bytes]:
    """The serialized records of `span` the statistics read at the sample `rate`."""
    return [record for batch in span_batches(span, rate) for record in batch]


def statistics_of_spans(
    found: List[spans.Span], records_of: Callable[[spans.Span], List[bytes]], schema: Optional[schema_pb2.Schema],
) -> Dict[int, statistics_pb2.DatasetFeatureStatisticsList]:
    """`statistics_in_memory` of each span's `records_of`, each dataset named by its span."""
    computed = statistics_in_memory(found, records_of, schema)
    for span, statistics in zip(found, computed):
        if statistics is not None:
            statistics.datasets[0].name = str(span.number)
    return {span.number: statistics for span, statistics in zip(found, computed) if statistics is not None}


# A local run's spans' statistics computed ahead, in a process of their own started with the
# run (`pipeline.run.statistics_ahead`): a function that waits for that process and gives
# the file it wrote, or None when it wrote none. Unset: nothing is computed ahead.
_ahead: Optional[Callable[[], Optional[str]]] = None


def expect_ahead(wait: Optional[Callable[[], Optional[str]]]) -> None:
    """Sets (None: clears) where `computed_ahead` finds the statistics computed ahead."""
    global _ahead
    _ahead = wait


def ahead_key(found: List[spans.Span], schema: Optional[schema_pb2.Schema], rate: float) -> str:
    """What statistics computed ahead must have been computed from to stand for the gate's:
    the same files (path, inode, size, modification and change times), decoded by the same
    schema, at the same sample rate."""
    listed = []
    for span in found:
        for path, _ in span.files:
            stat = os.stat(path)
            # The change time too: copying tools can set a file's modification time back.
            listed.append([span.number, path, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns])
    digest = hashlib.sha256(schema.SerializeToString(deterministic=True)).hexdigest() if schema is not None else ""
    return json.dumps({"files": listed, "schema": digest, "rate": rate}, sort_keys=True)


def write_ahead(path: str, key: str, result: Dict[int, statistics_pb2.DatasetFeatureStatisticsList]) -> None:
    """Writes statistics computed ahead, then their key beside them (`<path>.key`): a key
    there means the statistics are whole."""
    sliced = statistics_pb2.DatasetFeatureStatisticsList(datasets=[result[n].datasets[0] for n in sorted(result)])
    with open(path, "wb") as handle:
        handle.write(sliced.SerializeToString())
    with open(f"{path}.key.tmp", "w") as handle:
        handle.write(key)
    os.replace(f"{path}.key.tmp", f"{path}.key")


def computed_ahead(
    found: List[spans.Span], schema: Optional[schema_pb2.Schema], rate: float,
) -> Optional[Dict[int, statistics_pb2.DatasetFeatureStatisticsList]]:
    """The spans' statistics as `span_statistics_in_process` computes them, if they were
    computed ahead from these very files, schema and rate (`ahead_key`); None otherwise."""
    if _ahead is None or any(files.is_remote(span.path) for span in found):
        return None
    path = _ahead()
    if path is None or not os.path.isfile(f"{path}.key"):
        logging.info("span statistics: none computed ahead; computed here")
        return None
    with open(f"{path}.key") as handle:
        if handle.read() != ahead_key(found, schema, rate):
            logging.info("span statistics: those computed ahead were of other files, schema or rate; computed here")
            return None
    with open(path, "rb") as handle:
        sliced = statistics_pb2.DatasetFeatureStatisticsList.FromString(handle.read())
    by_span = {int(dataset.name): dataset for dataset in sliced.datasets}
    if any(span.number not in by_span for span in found):
        return None
    logging.info("span statistics: computed ahead, in the process started with the run")
    return {span.number: statistics_pb2.DatasetFeatureStatisticsList(datasets=[by_span[span.number]])
            for span in found}


def statistics_in_memory(
    items: Sequence[T], records_of: Callable[[T], List[bytes]], schema: Optional[schema_pb2.Schema] = None,
) -> List[Optional[statistics_pb2.DatasetFeatureStatisticsList]]:
    """The statistics of each item's serialized examples (`records_of(item)`; None for
    none), an item per thread and a thread per core, each item's records decoded at once
    (by `schema`, or without one as TFX decodes them) and summarised by TFDV's in-memory
    computation: reading and decoding leave the GIL."""
    from concurrent.futures import ThreadPoolExecutor

    from tensorflow_data_validation.statistics import stats_impl
    from tfx_bsl.coders import example_coder

    serialized_schema = schema.SerializeToString() if schema is not None else None

    def statistics_of(item: T) -> Optional[statistics_pb2.DatasetFeatureStatisticsList]:
        records = records_of(item)
        if not records:
            return None
        decoded = example_coder.ExamplesToRecordBatchDecoder(serialized_schema).DecodeBatch(records)
        del records
        return stats_impl.generate_statistics_in_memory(decoded, tfdv.StatsOptions())

    with ThreadPoolExecutor(max_workers=max(1, min(len(items), os.cpu_count() or 1))) as pool:
        return list(pool.map(statistics_of, items))


def _span_statistics_in_beam(
    pipeline: beam.Pipeline, found: List[spans.Span], path: str, schema: Optional[schema_pb2.Schema], rate: float,
) -> Dict[int, statistics_pb2.DatasetFeatureStatisticsList]:
    options = tfdv.StatsOptions(experimental_slice_functions=[beam_fns.by_span])
    files = [(span.number, file) for span in found for file, _ in span.files]
    with pipeline as p:
        _ = (
            p
            | "Files" >> beam.Create(files)
            | "Spread" >> beam.Reshuffle()
            | "ReadSpanFiles" >> beam.ParDo(beam_fns.ReadSpanFile(schema, rate))
            | "Statistics" >> tfdv.GenerateStatistics(options)
            | "Write" >> tfdv.WriteStatisticsToBinaryFile(path)
        )
    sliced = tfdv.load_stats_binary(path)
    return {
        int(dataset.name): statistics_pb2.DatasetFeatureStatisticsList(datasets=[dataset])
        for dataset in sliced.datasets
        if dataset.name != tfdv.constants.DEFAULT_SLICE_KEY
    }


def split_statistics(
    statistics: standard_artifacts.ExampleStatistics, split: str
) -> statistics_pb2.DatasetFeatureStatisticsList:
    """StatisticsGen's statistics of one split (its `Split-<name>/FeatureStats.pb`)."""
    return tfdv.load_stats_binary(os.path.join(statistics.uri, f"Split-{split}", STATS_FILE))
