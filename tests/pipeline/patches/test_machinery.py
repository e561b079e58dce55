"""The patch machinery: patches hold inside their block only, a failure inside it or in
building a patch still restores the libraries, and one setting turns them all off."""

import pytest
from apache_beam.transforms import userstate

from pipeline.patches import beam as beam_patches
from pipeline.patches import machinery


def test_a_failure_inside_the_block_still_undoes_the_patches():
    original = userstate.get_dofn_specs
    with pytest.raises(RuntimeError, match="boom"):
        with machinery.patched(beam_patches.patches()):
            raise RuntimeError("boom")
    assert userstate.get_dofn_specs is original


@pytest.mark.parametrize("value, expected", [(None, True), ("1", True), ("0", False)])
def test_one_environment_setting_turns_them_off(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv(machinery.ENV, raising=False)
    else:
        monkeypatch.setenv(machinery.ENV, value)
    assert machinery.enabled() is expected


def test_a_patch_that_fails_to_build_leaves_every_attribute_as_it_was():
    from tfx_bsl.tfxio import tf_example_record

    def broken(original):
        raise RuntimeError("cannot build")

    before = dict(vars(tf_example_record.TFExampleRecord))
    with pytest.raises(RuntimeError, match="cannot build"):
        with machinery.patched([(tf_example_record.TFExampleRecord, "BeamSource", broken)]):
            pass
    assert dict(vars(tf_example_record.TFExampleRecord)) == before

