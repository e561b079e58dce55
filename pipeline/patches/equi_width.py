"""TFDV's equi-width histogram of a numeric feature, computed with arrays.

TFDV derives each numeric feature's standard (equi-width) histogram from its quantiles:
it builds a histogram proto of 1,000 quantile buckets, then, for each of the 10 output
buckets, walks those protos in Python to add up how much of each falls inside. That walk
was most of the data gate's time and a part of StatisticsGen's
(docs/performance.md#patches-to-tfdv). `equi_width_histogram` computes the same sums from the bucket
bounds as arrays: the same overlap of each bucket (the same cases, in the same order), the
same terms, added one after another in the same order, so the histogram is TFDV's to the
last bit (tests/pipeline/patches/test_equi_width.py compares them on thousands of inputs,
on both stacks). Histograms whose bounds are float32 are left to TFDV (`replacing`).
"""

from __future__ import annotations

import functools
from typing import Callable

import numpy as np
from tensorflow_data_validation.utils import quantiles_util
from tensorflow_metadata.proto.v0 import statistics_pb2


def replacing(original: Callable[..., statistics_pb2.Histogram]) -> Callable[..., statistics_pb2.Histogram]:
    """`equi_width_histogram` in the place of TFDV's `original`, which still computes the
    histograms whose bounds are not 64-bit: with NumPy 2 (tfx-1.21), float32 bounds (a float
    feature's minimum and maximum) make TFDV's walk compare and add in float32, which
    these arrays do not reproduce."""

    @functools.wraps(original)
    def generate_equi_width_histogram(quantiles, cumulative_counts, finite_min, finite_max, num_buckets,
                                      num_pos_inf):
        compute = equi_width_histogram if _wide(finite_min) and _wide(finite_max) else original
        return compute(quantiles, cumulative_counts, finite_min, finite_max, num_buckets, num_pos_inf)

    return generate_equi_width_histogram


def _wide(bound) -> bool:
    """A Python number, a 64-bit float or an integer: NumPy computes with it in float64."""
    dtype = np.asarray(bound).dtype
    return dtype == np.float64 or dtype.kind in "iub"


def equi_width_histogram(
    quantiles: np.ndarray, cumulative_counts: np.ndarray, finite_min: float, finite_max: float,
    num_buckets: int, num_pos_inf: float,
) -> statistics_pb2.Histogram:
    """`quantiles_util.generate_equi_width_histogram`, with its arguments and result, for
    64-bit or integer bounds (see `replacing`)."""
    result = statistics_pb2.Histogram()
    result.type = statistics_pb2.Histogram.STANDARD
    if not np.isfinite(finite_min) and not np.isfinite(finite_max):
        result.buckets.add(low_value=finite_min, high_value=finite_max, sample_count=cumulative_counts[-1])
        return result
    assert np.isfinite(finite_min)
    assert np.isfinite(finite_max)
    assert np.all(quantiles[:-1] <= quantiles[1:])
    quantiles, cumulative_counts, num_neg_inf = quantiles_util._strip_infinities(
        quantiles, cumulative_counts, finite_max, num_pos_inf)
    # The buckets of TFDV's quantiles histogram, as the doubles its proto would hold.
    lows, highs, counts = (np.asarray(column, dtype=np.float64)
                           for column in quantiles_util._get_bin_weights(quantiles, cumulative_counts))
    if finite_min == finite_max:
        boundaries = np.array([finite_min, finite_max])
    else:
        boundaries = np.linspace(finite_min, finite_max, num_buckets + 1)
        if not np.isfinite(boundaries).all():
            return result
    if num_neg_inf:
        result.buckets.add(low_value=float("-inf"), high_value=float("-inf"), sample_count=num_neg_inf)
    start = 0
    for i in range(boundaries.size - 1):
        low_bound, high_bound = boundaries[i], boundaries[i + 1]
        terms, start = _overlapping(lows[start:], highs[start:], counts[start:], low_bound, high_bound, i == 0, start)
        sample_count = 0
        for term in terms:
            sample_count += term
        result.buckets.add(low_value=low_bound, high_value=high_bound, sample_count=sample_count)
    if num_pos_inf:
        result.buckets.add(low_value=float("inf"), high_value=float("inf"), sample_count=num_pos_inf)
    return result


def _overlapping(lows, highs, counts, low_bound, high_bound, first_bucket: bool, start: int):
    """The terms TFDV's walk adds for one output bucket, from bucket `start` on, and where
    its next walk starts (the last bucket that lay wholly before this one)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        point_on_edge = (highs == lows) & (lows == low_bound)
        case0 = point_on_edge if first_bucket else np.zeros_like(point_on_edge)
        case0_before = point_on_edge & (not first_bucket)
        undecided = ~(case0 | case0_before)
        case1 = undecided & (highs < low_bound)
        undecided &= ~case1
        follows = undecided & (lows > high_bound)
        end = int(np.argmax(follows)) if follows.any() else follows.size
        undecided = undecided[:end] & ~follows[:end]
        lows, highs, counts = lows[:end], highs[:end], counts[:end]
        case3 = undecided & (low_bound <= lows) & (high_bound >= highs)
        undecided &= ~case3
        case4 = undecided & (low_bound <= lows)
        undecided &= ~case4
        case5 = undecided & (high_bound >= highs)
        undecided &= ~case5
        case6 = undecided & (low_bound > lows) & (high_bound < highs)
        undecided &= ~case6
        if undecided.any():
            index = int(np.argmax(undecided))
            raise ValueError(f"Unable to compute overlap between ({low_bound:f}, {high_bound:f}) and "
                             f"low_value: {lows[index]:f} high_value: {highs[index]:f}")
        width = highs - lows
        overlap = np.where(case0[:end] | case3, 1.0, 0.0)
        overlap = np.where(case4, (high_bound - lows) / width, overlap)
        overlap = np.where(case5, (highs - low_bound) / width, overlap)
        overlap = np.where(case6, (high_bound - low_bound) / width, overlap)
    before = np.flatnonzero((case0_before | case1)[:end])
    next_start = start + int(before[-1]) if before.size else start
    return (overlap * counts).tolist(), next_start
