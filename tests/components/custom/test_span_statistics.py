"""The data gate's per-span statistics: from the spans' files, sampled, in this process
or by a Beam pass."""

import glob

import pytest
import tensorflow as tf
import tensorflow_data_validation as tfdv
from apache_beam.options.pipeline_options import PipelineOptions

from components.custom import beam_fns, span_statistics
from tests.helpers import curated_schema, local_beam_pipeline

pytestmark = [pytest.mark.slow, pytest.mark.every_stack]  # Beam pipelines


def test_spans_that_left_the_data_root_since_they_were_ingested_are_named(two_spans, tmp_path):
    data_root = two_spans()
    with pytest.raises(ValueError, match=r"spans \[15, 16, 17\] were ingested but are no longer all under"):
        span_statistics.compute_span_statistics(local_beam_pipeline(), data_root, [15, 16, 17], str(tmp_path))


def test_the_sample_is_deterministic_and_near_its_rate():
    records = [f"record {i}".encode() for i in range(20_000)]
    kept = [r for r in records if beam_fns.in_sample(r, 0.25)]
    assert kept == [r for r in reversed(records) if beam_fns.in_sample(r, 0.25)][::-1]  # order does not matter
    assert abs(len(kept) / len(records) - 0.25) < 0.01
    assert all(beam_fns.in_sample(r, 1.0) for r in records)


@pytest.mark.parametrize(
    "total, span_count, expected",
    [(15_002, 16, 1.0), (span_statistics.SPAN_SAMPLE_ROWS * 8, 8, 1.0),
     (span_statistics.SPAN_SAMPLE_ROWS * 80, 8, 0.1), (0, 3, 1.0)],
)
def test_spans_are_sampled_only_above_the_rows_per_span_limit(total, span_count, expected):
    assert span_statistics.sample_rate(total, span_count) == pytest.approx(expected)


def test_batches_that_disagree_on_optional_columns_make_one_span_statistics(repo, tmp_path):
    """A span whose first records lack an optional feature and whose later ones have it
    (batches with different columns, which Arrow refuses to combine unless decoded by
    the schema)."""
    source = glob.glob(str(repo / "data" / "span-16" / "*"))
    examples = [tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset(source, "GZIP")]
    with_company = [e for e in examples if "company" in e.features.feature]
    target = tmp_path / "data" / "span-1"
    target.mkdir(parents=True)
    with tf.io.TFRecordWriter(str(target / "trips.tfrecord.gz"), "GZIP") as out:
        for _ in range(9):  # more than a decode batch without the column, then as many with it
            for example in with_company:
                stripped = tf.train.Example()
                stripped.CopyFrom(example)
                del stripped.features.feature["company"]
                out.write(stripped.SerializeToString())
        for example in with_company * 9:
            out.write(example.SerializeToString())
    workers = local_beam_pipeline("--direct_running_mode=multi_processing", "--direct_num_workers=2")
    stats = span_statistics.compute_span_statistics(workers, str(tmp_path / "data"), [1], str(tmp_path),
                                                    schema=curated_schema())
    dataset = stats[1].datasets[0]
    assert dataset.num_examples == 18 * len(with_company) > 2 * beam_fns.DECODE_BATCH
    company = next(f for f in dataset.features if f.path.step == ["company"])
    assert company.string_stats.common_stats.num_non_missing == 9 * len(with_company)


def test_sampled_span_statistics_read_about_the_rate_and_the_same_rows_each_time(repo, tmp_path):
    numbers = [15, 16]
    for name in "abc":
        (tmp_path / name).mkdir()
    first = span_statistics.compute_span_statistics(local_beam_pipeline(), str(repo / "data"), numbers,
                                                    str(tmp_path / "a"), schema=curated_schema(), rate=0.5)
    again = span_statistics.compute_span_statistics(local_beam_pipeline(), str(repo / "data"), numbers,
                                                    str(tmp_path / "b"), schema=curated_schema(), rate=0.5)
    full = span_statistics.compute_span_statistics(local_beam_pipeline(), str(repo / "data"), numbers,
                                                   str(tmp_path / "c"))
    for span in numbers:
        sampled, total = first[span].datasets[0].num_examples, full[span].datasets[0].num_examples
        assert sampled == again[span].datasets[0].num_examples
        assert 0.4 * total < sampled < 0.6 * total


def _rounded(value):
    if isinstance(value, float):
        return float(f"{value:.9g}")
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_rounded(item) for item in value]
    return value


@pytest.mark.parametrize("rate", [1.0, 0.5])
def test_span_statistics_in_process_are_the_beam_pass_s_and_written_the_same_way(repo, tmp_path, rate):
    from google.protobuf import json_format

    numbers = [14, 15, 16]
    beam_dir, here_dir = tmp_path / "beam", tmp_path / "here"
    beam_dir.mkdir()
    in_beam = span_statistics.compute_span_statistics(local_beam_pipeline(), str(repo / "data"), numbers, str(beam_dir),
                                                      schema=curated_schema(), rate=rate)
    in_process = span_statistics.compute_span_statistics(_unused_pipeline(), str(repo / "data"), numbers, str(here_dir),
                                                         schema=curated_schema(), rate=rate, in_process=True)
    assert sorted(in_process) == numbers
    for span in numbers:
        assert in_process[span].datasets[0].num_examples == in_beam[span].datasets[0].num_examples > 0
        assert _rounded(json_format.MessageToDict(in_process[span])) == _rounded(
            json_format.MessageToDict(in_beam[span])), span
    written = tfdv.load_stats_binary(str(here_dir / f"span-{span_statistics.STATS_FILE}"))
    assert [dataset.name for dataset in written.datasets] == ["14", "15", "16"]
    assert written.datasets[2] == in_process[16].datasets[0]


def test_span_statistics_in_process_name_a_span_without_examples(tmp_path):
    (tmp_path / "data" / "span-3").mkdir(parents=True)
    with tf.io.TFRecordWriter(str(tmp_path / "data" / "span-3" / "empty.tfrecord.gz"), "GZIP"):
        pass
    with pytest.raises(ValueError, match=r"spans \[3\] under .* hold no examples"):
        span_statistics.compute_span_statistics(_unused_pipeline(), str(tmp_path / "data"), [3], str(tmp_path / "out"),
                                                schema=curated_schema(), in_process=True)


def _unused_pipeline():
    """A pipeline that fails the test if it is run."""
    pipeline = local_beam_pipeline()
    pipeline.run = lambda *args, **kwargs: pytest.fail("the Beam pass ran")
    return pipeline


def test_in_process_statistics_count_categorical_values_exactly_as_far_as_the_gate_uses_them():
    from tensorflow_data_validation.statistics import stats_impl

    assert span_statistics.EXACT_DISTINCT_VALUES == stats_impl._DEFAULT_MG_SKETCH_SIZE


def test_a_span_with_more_distinct_values_than_counted_exactly_gets_the_beam_pass_s_statistics(repo, tmp_path):
    source = glob.glob(str(repo / "data" / "span-16" / "*"))[0]
    example = tf.train.Example.FromString(next(iter(tf.data.TFRecordDataset(source, "GZIP"))).numpy())
    target = tmp_path / "data" / "span-1"
    target.mkdir(parents=True)
    distinct = span_statistics.EXACT_DISTINCT_VALUES + 100
    with tf.io.TFRecordWriter(str(target / "trips.tfrecord.gz"), "GZIP") as out:
        for index in range(distinct):
            example.features.feature["company"].bytes_list.value[:] = [f"company {index}".encode()]
            out.write(example.SerializeToString())
    beam_dir = tmp_path / "beam"
    beam_dir.mkdir()
    in_beam = span_statistics.compute_span_statistics(local_beam_pipeline(), str(tmp_path / "data"), [1], str(beam_dir),
                                                      schema=curated_schema())
    chosen = span_statistics.compute_span_statistics(local_beam_pipeline(), str(tmp_path / "data"), [1],
                                                     str(tmp_path / "here"), schema=curated_schema(), in_process=True)
    company = next(f for f in chosen[1].datasets[0].features if f.path.step == ["company"])
    assert company.string_stats.unique == distinct
    assert chosen[1] == in_beam[1]


@pytest.mark.parametrize("args, here", [
    ([], True),
    (["--runner=apache_beam.runners.portability.fn_api_runner.FnApiRunner"], True),
    (["--runner=DirectRunner", "--direct_running_mode=multi_threading"], True),
    (["--runner=DirectRunner", "--direct_running_mode=multi_processing", "--direct_num_workers=2"], False),
    (["--runner=PortableRunner", "--job_endpoint=localhost:8099"], False),
    (["--runner=DataflowRunner"], False),
    (["--runner=FlinkRunner"], False),
])
def test_the_gate_computes_in_its_process_only_where_beam_runs_in_it(args, here):
    assert span_statistics.beam_runs_here(PipelineOptions(args)) is here


@pytest.mark.parametrize("total_rows, spans_count, here", [
    (15_000, 16, True),  # data/: every row
    (300_000, 12, True),  # every row (25,000 a span), at the limit
    (300_012, 12, True),  # a sample of 25,000 rows a span: 300,000 rows, at the limit
    (529_279, 12, True),  # the same, where the rate times the rows is a little above 300,000 in floating point
    (300_001, 13, False),  # every row (23,077 a span), beyond the limit
    (1_000_000, 8, True),  # a sample of 25,000 rows a span: 200,000 rows
    (10_000_000, 8, True),
    (10_000_000, 20, False),  # a sample of 500,000 rows
])
def test_the_gate_computes_in_its_process_up_to_a_number_of_rows_read_after_sampling(total_rows, spans_count, here):
    rate = span_statistics.sample_rate(total_rows, spans_count)
    assert span_statistics.computed_in_process(total_rows, rate, PipelineOptions([])) is here
    assert not span_statistics.computed_in_process(total_rows, rate, PipelineOptions(["--runner=DataflowRunner"]))
