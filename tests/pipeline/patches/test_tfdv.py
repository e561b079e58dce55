"""The patch to TFDV: the equi-width histograms from arrays stand in TFDV's place within the
run only (that they are TFDV's own: test_equi_width.py)."""

from tensorflow_data_validation.utils import quantiles_util

from pipeline.patches import machinery
from pipeline.patches import tfdv as tfdv_patches


def test_the_speed_ups_put_it_in_tfdv_s_place_within_the_run_only():
    original = quantiles_util.generate_equi_width_histogram
    assert "generate_equi_width_histogram" in quantiles_util.__dict__
    with machinery.patched(tfdv_patches.patches()):
        assert quantiles_util.generate_equi_width_histogram is not original
        assert quantiles_util.generate_equi_width_histogram.__wrapped__ is original
    assert quantiles_util.generate_equi_width_histogram is original
