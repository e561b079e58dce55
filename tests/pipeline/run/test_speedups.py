"""The speed-ups: their targets still exist on the pinned libraries, they are undone on
leaving, they compute what the originals compute, and one setting turns them off."""

import gc
import inspect

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions
from apache_beam.runners.portability.fn_api_runner import worker_handlers
from apache_beam.transforms import userstate

from pipeline.run import speedups


def test_every_patched_target_exists_with_the_shape_the_patch_expects():
    patches = speedups.beam_patches()
    assert len(patches) == 3
    for owner, name, _ in patches:
        assert name in owner.__dict__, f"{owner.__name__}.{name} moved: its speed-up must be revisited"
    assert isinstance(worker_handlers.STATE_CACHE_SIZE_MB, int) and worker_handlers.STATE_CACHE_SIZE_MB > 0
    assert list(inspect.signature(userstate.get_dofn_specs).parameters) == ["dofn"]
    assert list(inspect.signature(PipelineOptions.view_as).parameters) == ["self", "cls"]


def test_the_patches_hold_inside_the_block_only():
    originals = (worker_handlers.STATE_CACHE_SIZE_MB, userstate.get_dofn_specs, PipelineOptions.view_as)
    with speedups._patched(speedups.beam_patches()):
        assert worker_handlers.STATE_CACHE_SIZE_MB == 0
        assert userstate.get_dofn_specs is not originals[1]
        assert PipelineOptions.view_as is not originals[2]
    assert (worker_handlers.STATE_CACHE_SIZE_MB, userstate.get_dofn_specs, PipelineOptions.view_as) == originals


def test_a_failure_inside_the_block_still_undoes_the_patches():
    original = userstate.get_dofn_specs
    with pytest.raises(RuntimeError, match="boom"):
        with speedups._patched(speedups.beam_patches()):
            raise RuntimeError("boom")
    assert userstate.get_dofn_specs is original


class _Counting(beam.DoFn):
    def process(self, element):
        yield element


def test_dofn_specs_are_computed_once_per_dofn_and_equal_the_originals(monkeypatch):
    calls = []
    original = userstate.get_dofn_specs
    monkeypatch.setattr(userstate, "get_dofn_specs", lambda dofn: calls.append(dofn) or original(dofn))
    with speedups._patched(speedups.beam_patches()):
        first, second = _Counting(), _Counting()
        assert userstate.get_dofn_specs(first) == original(first)
        assert userstate.get_dofn_specs(first) == original(first)
        userstate.get_dofn_specs(second)
    assert calls == [first, second]


def test_option_views_share_their_values():
    options = PipelineOptions(["--direct_num_workers=3"])
    with speedups._patched(speedups.beam_patches()):
        view = options.view_as(DirectOptions)
        assert view is options.view_as(DirectOptions)
        view.direct_num_workers = 5
        assert options.view_as(DirectOptions).direct_num_workers == 5
    assert options.view_as(DirectOptions).direct_num_workers == 5


def test_the_heavy_import_runs_with_the_gc_paused_and_leaves_it_as_it_was(monkeypatch):
    seen = []
    monkeypatch.setattr(speedups.importlib, "import_module", lambda name: seen.append((name, gc.isenabled())))
    monkeypatch.setattr(speedups.gc, "freeze", lambda: seen.append("freeze"))
    gc.enable()
    speedups._import_frozen("some.module")
    assert seen == [("some.module", False), "freeze"] and gc.isenabled()
    gc.disable()
    try:
        speedups._import_frozen("some.module")
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.parametrize("value, expected", [(None, True), ("1", True), ("0", False)])
def test_one_environment_setting_turns_them_off(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv(speedups.ENV, raising=False)
    else:
        monkeypatch.setenv(speedups.ENV, value)
    assert speedups.enabled() is expected
