"""The data gate's comparison of the newest span with the previous one."""

import pytest
import tensorflow_data_validation as tfdv
from tensorflow_metadata.proto.v0 import statistics_pb2

from components.custom import gate, span_statistics
from components.model import features, gate_thresholds
from components.support import spans
from tests.helpers import curated_schema, local_beam_pipeline

pytestmark = [pytest.mark.slow, pytest.mark.every_stack]  # Beam pipelines


def _report(data_root, output_dir):
    stats = span_statistics.compute_span_statistics(local_beam_pipeline(), data_root, [15, 16], str(output_dir))
    return gate.describe(gate.drift_anomalies(stats[16], stats[15], curated_schema()), 16, 15)


def test_schema_declares_drift_thresholds_for_categorical_and_numeric_features():
    schema = curated_schema()
    assert tfdv.get_feature(schema, "payment_type").drift_comparator.infinity_norm.threshold > 0
    assert tfdv.get_feature(schema, "fare").drift_comparator.jensen_shannon_divergence.threshold > 0


def test_every_pair_of_consecutive_real_spans_passes(repo, tmp_path):
    numbers = spans.span_numbers(str(repo / "data"))
    assert len(numbers) >= 2, numbers  # pairs to compare
    stats = span_statistics.compute_span_statistics(local_beam_pipeline(), str(repo / "data"), numbers, str(tmp_path))
    assert sorted(stats) == numbers
    assert all(stats[span].datasets[0].num_examples > 0 for span in numbers)
    for previous, newest in zip(numbers, numbers[1:]):
        found = gate.drift_anomalies(stats[newest], stats[previous], curated_schema())
        assert not found.anomaly_info, (previous, newest, gate.describe(found, newest, previous))
        assert gate.label_drift(stats[newest], stats[previous], newest, previous) == []


def test_categorical_drift_is_reported_with_its_l_infinity_distance(two_spans, tmp_path):
    def all_cash(example):
        example.features.feature["payment_type"].bytes_list.value[:] = [b"Cash"]

    report = _report(two_spans(all_cash), tmp_path)
    assert len(report) == 1
    assert "'payment_type'" in report[0] and "L_INFTY" in report[0] and "span 15 -> 16" in report[0]


def test_numeric_drift_is_reported_with_its_jensen_shannon_divergence(two_spans, tmp_path):
    def tenfold_fares(example):
        fare = example.features.feature["fare"].float_list
        fare.value[:] = [value * 10 for value in fare.value]

    report = _report(two_spans(tenfold_fares), tmp_path)
    assert any("'fare'" in line and "JENSEN_SHANNON" in line for line in report), report


def _label_lines(data_root, output_dir):
    stats = span_statistics.compute_span_statistics(local_beam_pipeline(), data_root, [15, 16], str(output_dir),
                                                    schema=curated_schema())
    return gate.label_drift(stats[16], stats[15], 16, 15)


def _set_label(example, value):
    example.features.feature[features.LABEL_KEY].int64_list.value[:] = [value]


@pytest.mark.parametrize("corruption", ["zeroed", "inverted", "any tip"])
def test_a_label_corrupted_upstream_is_named_with_its_change(two_spans, tmp_path, corruption):
    def corrupt(example):
        label = example.features.feature[features.LABEL_KEY].int64_list.value[0]
        if corruption == "zeroed":
            _set_label(example, 0)
        elif corruption == "inverted":
            _set_label(example, 1 - label)
        else:  # tips read in cents against fares in dollars: every card trip is a "big tip"
            _set_label(example, int(example.features.feature["payment_type"].bytes_list.value == [b"Credit Card"]))

    (line,) = _label_lines(two_spans(corrupt), tmp_path)
    assert line.startswith("[label span 15 -> 16] label 'big_tip': share of 1s 0.236 -> "), line
    change = float(line.split("L_INFTY=")[1].split()[0])
    threshold = float(line.split("(threshold ")[1].split(")")[0])
    assert change > threshold >= gate_thresholds.LABEL_DRIFT_THRESHOLD, line


def test_the_label_share_reads_numeric_and_categorical_statistics_alike():
    numeric = statistics_pb2.DatasetFeatureStatisticsList()
    label = numeric.datasets.add().features.add()
    label.path.step.append(features.LABEL_KEY)
    label.num_stats.mean = 0.25
    label.num_stats.common_stats.num_non_missing = 8
    categorical = statistics_pb2.DatasetFeatureStatisticsList()
    label = categorical.datasets.add().features.add()
    label.path.step.append(features.LABEL_KEY)
    for value, count in (("0", 6), ("1", 2)):
        label.string_stats.rank_histogram.buckets.add(label=value, sample_count=count)
    assert gate.label_share(numeric) == gate.label_share(categorical) == (0.25, 8)
    assert gate.label_share(statistics_pb2.DatasetFeatureStatisticsList()) is None
    zeroed = statistics_pb2.DatasetFeatureStatisticsList()
    zeroed.CopyFrom(numeric)
    zeroed.datasets[0].features[0].num_stats.mean = 0.0
    # 8 examples a span: a change of 0.25 is well within sampling noise.
    assert gate.label_drift(zeroed, numeric, 9, 8) == []
    for stats in (numeric, zeroed):
        stats.datasets[0].features[0].num_stats.common_stats.num_non_missing = 1000
    (line,) = gate.label_drift(zeroed, numeric, 9, 8)
    assert "share of 1s 0.250 -> 0.000, L_INFTY=0.250 (threshold 0.130)" in line
    assert gate.label_drift(numeric, numeric, 9, 8) == []


@pytest.mark.parametrize("given, fresh", [(1, True), ("1", True), ("1.0", True), (1.0, True),
                                          (0, False), ("0", False), ("0.0", False)])
def test_fresh_is_read_however_a_backend_renders_the_integer(given, fresh):
    assert gate.is_fresh(given) is fresh


@pytest.mark.parametrize("given", ["yes", "", None, "2", 0.5])
def test_anything_else_than_0_or_1_as_fresh_is_refused_naming_it(given):
    with pytest.raises(ValueError, match=f"fresh parameter must be 0 or 1, got {given!r}"):
        gate.is_fresh(given)


def test_the_gate_given_fresh_as_a_rendered_float_finds_nothing_new(tmp_path):
    """What a backend that renders the STRING input from the integer as "0.0" hands the gate."""
    from tfx.types import standard_artifacts

    def artifact(kind, name):
        made = kind()
        made.uri = str(tmp_path / name)
        return made

    verdict = artifact(standard_artifacts.ExampleAnomalies, "verdict")
    inputs = {"statistics": [artifact(standard_artifacts.ExampleStatistics, "statistics")],
              "schema": [artifact(standard_artifacts.Schema, "schema")],
              "anomalies": [artifact(standard_artifacts.ExampleAnomalies, "anomalies")]}
    executor = gate.DataGate.EXECUTOR_SPEC.executor_class()
    executor.Do(inputs, {"verdict": [verdict]},
                {"data_root": str(tmp_path), "spans_used": "12,13", "fresh": "0.0", "code_version": ""})
    assert verdict.get_int_custom_property(gate.BLESSED_PROPERTY) == 0
    assert verdict.get_string_custom_property(gate.REPORT_PROPERTY) == (
        "nothing new: the serving model was trained on spans 12,13")
