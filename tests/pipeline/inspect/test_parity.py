"""Two runs' artifacts compared: what counts as the same and what does not."""

import pytest
from tensorflow_metadata.proto.v0 import statistics_pb2

from pipeline.inspect import parity


def _statistics(features, mean_of_fare=12.5, top_cash=700, quartile=5.0):
    found = statistics_pb2.DatasetFeatureStatisticsList()
    dataset = found.datasets.add(num_examples=1000)
    for name in features:
        feature = dataset.features.add()
        feature.path.step.append(name)
        if name == "fare":
            feature.num_stats.mean = mean_of_fare
            feature.num_stats.min, feature.num_stats.max = 0.0, 100.0
            feature.num_stats.common_stats.num_non_missing = 1000
            histogram = feature.num_stats.histograms.add(type=statistics_pb2.Histogram.QUANTILES)
            histogram.buckets.add(low_value=0.0, high_value=quartile, sample_count=500.0)
        else:
            top = feature.string_stats.top_values
            top.add(value="Cash", frequency=top_cash)
            top.add(value="Credit Card", frequency=1000 - top_cash)
    return found


def _numbers(statistics, decisions=None):
    numbers, texts = {}, {}
    parity.flatten(statistics, "StatisticsGen", numbers, texts)
    exact, sketched, scales = parity.split_sketches(numbers)
    return parity.RunNumbers({**(decisions or {"outcome": "pushed"}), **texts},
                             {"statistics": exact, "sketches": sketched}, scales)


def test_features_listed_in_another_order_are_the_same():
    first = _numbers(_statistics(["fare", "payment_type"]))
    second = _numbers(_statistics(["payment_type", "fare"]))
    comparison = parity.compare(first, second)
    assert comparison.same, comparison.problems()
    (statistics,) = [kind for kind in comparison.kinds if kind.kind == "statistics"]
    assert statistics.compared == statistics.equal == len(first.numbers["statistics"]) > 5
    fare = "StatisticsGen.datasets[0].features[fare].num_stats"
    assert set(first.numbers["sketches"]) == {f"{fare}.median"} | {
        f"{fare}.histograms[QUANTILES].buckets[0].{field}" for field in ("low_value", "high_value", "sample_count")}
    assert f"{fare}.histograms[QUANTILES].num_nan" in first.numbers["statistics"]
    assert "StatisticsGen.datasets[0].features[fare].num_stats.mean" in first.numbers["statistics"]
    assert "StatisticsGen.datasets[0].features[payment_type].string_stats.top_values[Cash].frequency" \
        in first.numbers["statistics"]


def test_a_last_bit_is_within_tolerance_and_a_real_difference_is_named():
    close = parity.compare(_numbers(_statistics(["fare"])), _numbers(_statistics(["fare"], mean_of_fare=12.5 + 1e-12)))
    assert close.same, close.problems()
    far = parity.compare(_numbers(_statistics(["fare"])), _numbers(_statistics(["fare"], mean_of_fare=12.6)))
    assert not far.same
    (problem,) = far.problems()
    assert "features[fare].num_stats.mean: 12.5 against 12.6" in problem


def test_a_count_that_differs_is_outside_and_a_value_only_one_run_has_is_named():
    counts = parity.compare(_numbers(_statistics(["payment_type"])),
                            _numbers(_statistics(["payment_type"], top_cash=701)))
    assert [line.split("features[payment_type].string_stats.")[1] for line in counts.problems()] == [
        "top_values[Cash].frequency: 700.0 against 701.0", "top_values[Credit Card].frequency: 300.0 against 299.0"]
    missing = parity.compare(_numbers(_statistics(["fare", "payment_type"])), _numbers(_statistics(["fare"])))
    assert any(line.startswith("only in one run: statistics StatisticsGen.datasets[0].features[payment_type]")
               for line in missing.problems())


def test_a_decision_that_differs_is_named_with_both_values():
    comparison = parity.compare(_numbers(_statistics(["fare"]), {"blessed": "True"}),
                                _numbers(_statistics(["fare"]), {"blessed": "False"}))
    assert comparison.decisions == [("blessed", "True", "False")]
    assert comparison.problems() == ["blessed: 'True' against 'False'"]


def test_tolerances_hold_inside_and_fail_outside():
    tolerance = parity.Tolerance(relative=1e-6, absolute=1e-9)
    assert tolerance.holds(1.0, 1.0 + 5e-7) and tolerance.holds(0.0, 5e-10)
    assert not tolerance.holds(1.0, 1.0 + 2e-6) and not tolerance.holds(0.0, 2e-9)
    # A metric undefined in both runs (calibration of a slice without positives) agrees.
    assert tolerance.holds(float("nan"), float("nan"))
    assert not tolerance.holds(float("nan"), 1.0) and not tolerance.holds(0.0, float("nan"))


def test_a_sketched_number_may_move_within_twice_the_sketchs_error_of_the_feature_s_range():
    """A quantile boundary of a feature ranging over 0..100: 2 epsilon of it is 2.0."""
    assert 2 * parity.SKETCH_EPSILON * 100.0 == 2.0
    near = parity.compare(_numbers(_statistics(["fare"])), _numbers(_statistics(["fare"], quartile=6.5)))
    assert near.same, near.problems()
    (sketches,) = [kind for kind in near.kinds if kind.kind == "sketches"]
    assert sketches.largest_share == pytest.approx(0.75)
    far = parity.compare(_numbers(_statistics(["fare"])), _numbers(_statistics(["fare"], quartile=7.5)))
    assert [line.split(": ", 1)[1] for line in far.problems()] == [
        "StatisticsGen.datasets[0].features[fare].num_stats.histograms[QUANTILES].buckets[0].high_value: "
        "5.0 against 7.5"]
