"""Patches to TFDV: each numeric feature's equi-width histogram computed from arrays
(`pipeline.patches.equi_width`) instead of by TFDV's walk over protos. What it changes
and why: `patches`. IPython, which TFDV imports for its notebook display only, loads when
first used (`DEFERRED_MODULES`;
tests/pipeline/patches/test_tfma.py::test_the_modules_tfma_imports_for_nothing_load_when_first_used
fails if the run's imports load it, or if it no longer loads on first use).

When TFDV changes under it,
tests/pipeline/patches/test_tfdv.py::test_the_speed_ups_put_it_in_tfdv_s_place_within_the_run_only
fails for a function that moved, and
tests/pipeline/patches/test_equi_width.py::test_the_histogram_is_tfdv_s_to_the_last_bit
for histograms that are no longer TFDV's to the last bit (it calls TFDV's own function
on thousands of inputs, and TFDV's internals the arrays are built with). What it saves:
docs/performance.md#patches-to-tfdv.
"""

from __future__ import annotations

from typing import List

from pipeline.patches.machinery import Patch

# Modules TFDV imports and a run never calls, loaded when first used
# (`pipeline.patches.defer_imports`): IPython, whose `__init__` (its terminal, prompt_toolkit,
# Jedi) TFDV's `display_util` runs only to bind `IPython.display`'s `display` and `HTML`,
# called by its notebook display alone. Bound before TFDV imports it, so `IPython.display`
# itself still runs as TFDV imports it, and the rest of IPython when a name of the
# package is first asked for.
DEFERRED_MODULES = ("IPython",)


def patches() -> List[Patch]:
    """`(owner, attribute, new value from the old one)` of each change to TFDV.

    - `quantiles_util.generate_equi_width_histogram`: each numeric feature's standard
      histogram, added up from 1,000 quantile buckets by a walk over protos in Python;
      computed from arrays instead, to the same bits (`pipeline.patches.equi_width`), where
      the bounds are 64-bit or integers (on NumPy 2 a float feature's are float32, and
      TFDV computes those).
    """
    from tensorflow_data_validation.utils import quantiles_util

    from pipeline.patches import equi_width

    return [(quantiles_util, "generate_equi_width_histogram", equi_width.replacing)]
