"""The array form of TFDV's equi-width histogram gives TFDV's histogram to the last bit."""

import numpy as np
import pyarrow as pa
import pytest
import tensorflow_data_validation as tfdv
from tensorflow_data_validation.statistics import stats_impl
from tensorflow_data_validation.utils import quantiles_util

from pipeline.patches import equi_width


def _inputs(rng: np.random.Generator):
    """Sorted quantile boundaries (with repeats, and infinities at either end) and their
    non-decreasing cumulative counts (weighted: not always whole), as TFDV passes them."""
    size = int(rng.choice([2, 3, 11, 101, 1001]))
    kind = rng.integers(4)
    if kind == 0:
        values = rng.normal(rng.normal(0, 100), rng.uniform(0.01, 50), size)
    elif kind == 1:
        values = rng.integers(-3, 4, size).astype(float)  # few distinct values: many repeats
    elif kind == 2:
        values = np.full(size, rng.normal())  # a single value
    else:
        values = rng.exponential(rng.uniform(0.1, 1e4), size).round(int(rng.integers(0, 3)))
    values = np.sort(values)
    neg_inf, pos_inf = (int(rng.integers(0, 3)) if rng.random() < 0.3 else 0 for _ in range(2))
    if neg_inf:
        values[:neg_inf] = -np.inf
    if pos_inf:
        values[size - pos_inf:] = np.inf
    increments = rng.integers(0, 50, size).astype(float)
    if rng.random() < 0.5:
        increments = increments * rng.uniform(0.1, 3.0, size)
    counts = np.cumsum(increments)
    finite = values[np.isfinite(values)]
    finite_min, finite_max = (finite.min(), finite.max()) if finite.size else (-np.inf, np.inf)
    bounds = rng.integers(4)
    if bounds == 1:  # a float feature's, as TFDV passes them: float32
        values = values.astype(np.float32)
        finite_min, finite_max = np.float32(finite_min), np.float32(finite_max)
    elif bounds == 2 and finite.size and np.all(finite == np.round(finite)):  # an int feature's
        finite_min, finite_max = np.int64(finite_min), np.int64(finite_max)
    num_pos_inf = float(counts[-1] - counts[size - pos_inf - 1]) if pos_inf and size > pos_inf else 0.0
    return values, counts, finite_min, finite_max, int(rng.choice([1, 2, 10, 17])), num_pos_inf


def _outcome(function, args):
    try:
        return function(*args).SerializeToString(deterministic=True)
    except (AssertionError, ValueError, IndexError) as err:
        return type(err)


@pytest.mark.parametrize("seed", range(8))
def test_the_histogram_is_tfdv_s_to_the_last_bit(seed):
    rng = np.random.default_rng(seed)
    replaced = equi_width.replacing(quantiles_util.generate_equi_width_histogram)
    compared = by_arrays = 0
    for _ in range(400):
        args = _inputs(rng)
        expected = _outcome(quantiles_util.generate_equi_width_histogram, args)
        assert _outcome(replaced, args) == expected, args
        compared += isinstance(expected, bytes)
        if equi_width._wide(args[2]) and equi_width._wide(args[3]):
            assert _outcome(equi_width.equi_width_histogram, args) == expected, args
            by_arrays += 1
    assert compared > 300  # most inputs give a histogram, not an error
    assert by_arrays > 250  # and most are computed from the arrays


def test_tfdv_s_statistics_are_the_same_with_it(monkeypatch):
    rng = np.random.default_rng(7)
    batch = pa.RecordBatch.from_arrays(
        [pa.array([[float(v)] for v in rng.lognormal(2, 1, 3000)]),
         pa.array([[int(v)] for v in rng.integers(0, 24, 3000)]),
         pa.array([[float(v)] if v > 0.2 else None for v in rng.random(3000)]),
         pa.array([[float(v)] for v in rng.normal(41.9, 0.05, 3000)], type=pa.large_list(pa.float32()))],
        ["fare", "hour", "tips", "latitude"],
    )
    before = stats_impl.generate_statistics_in_memory(batch, tfdv.StatsOptions())
    monkeypatch.setattr(quantiles_util, "generate_equi_width_histogram",
                        equi_width.replacing(quantiles_util.generate_equi_width_histogram))
    after = stats_impl.generate_statistics_in_memory(batch, tfdv.StatsOptions())
    assert after.SerializeToString(deterministic=True) == before.SerializeToString(deterministic=True)
    histograms = [h for f in after.datasets[0].features for h in f.num_stats.histograms
                  if h.type == h.STANDARD]
    assert len(histograms) == 4 and all(sum(b.sample_count for b in h.buckets) > 0 for h in histograms)

