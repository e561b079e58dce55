"""The in-process Beam tuning keeps Beam's answers and pipeline results the same."""

import functools

import apache_beam as beam
import pytest
from apache_beam.coders import VarIntCoder
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import userstate

from pipeline import beam_tuning


class _Counting(beam.DoFn):
    COUNT = userstate.ReadModifyWriteStateSpec("count", VarIntCoder())

    def process(self, element, count=beam.DoFn.StateParam(COUNT)):
        seen = (count.read() or 0) + 1
        count.write(seen)
        yield element[0], seen


class _Plain(beam.DoFn):
    def process(self, element):
        yield element


@pytest.fixture
def memoized(monkeypatch):
    monkeypatch.setattr(userstate, "get_dofn_specs", userstate.get_dofn_specs)
    original = userstate.get_dofn_specs
    calls = []

    @functools.wraps(original)  # another wrapper of Beam's function must not stop the memo
    def counted(dofn):
        calls.append(dofn)
        return original(dofn)

    monkeypatch.setattr(userstate, "get_dofn_specs", counted)
    beam_tuning.memoize_dofn_specs()
    return calls


def test_specs_are_computed_once_per_dofn(memoized):
    stateful, plain = _Counting(), _Plain()
    for _ in range(3):
        state_specs, timer_specs = userstate.get_dofn_specs(stateful)
        assert [spec.name for spec in state_specs] == ["count"] and not timer_specs
        assert userstate.get_dofn_specs(plain) == (set(), set())
    assert userstate.is_stateful_dofn(stateful) and not userstate.is_stateful_dofn(plain)
    assert memoized == [stateful, plain]


def test_a_new_dofn_object_is_inspected_again(memoized):
    userstate.get_dofn_specs(_Plain())
    userstate.get_dofn_specs(_Plain())
    assert len(memoized) == 2


def test_applying_twice_wraps_once(memoized):
    wrapped = userstate.get_dofn_specs
    beam_tuning.memoize_dofn_specs()
    assert userstate.get_dofn_specs is wrapped


@pytest.fixture
def memoized_views(monkeypatch):
    monkeypatch.setattr(PipelineOptions, "view_as", PipelineOptions.view_as)
    beam_tuning.memoize_option_views()


def test_option_views_are_built_once_and_share_the_values(memoized_views):
    options = PipelineOptions(["--direct_num_workers=1", "--runner=DirectRunner"])
    direct = options.view_as(DirectOptions)
    assert options.view_as(DirectOptions) is direct and direct.direct_num_workers == 1
    standard = options.view_as(StandardOptions)
    assert standard is not direct and standard.runner == "DirectRunner"
    direct.direct_num_workers = 3
    standard.runner = "FlinkRunner"
    assert options.get_all_options()["direct_num_workers"] == 3
    assert options.view_as(StandardOptions).runner == "FlinkRunner"
    other = PipelineOptions(["--direct_num_workers=2"])
    assert other.view_as(DirectOptions) is not direct and other.view_as(DirectOptions).direct_num_workers == 2


def test_stateful_pipeline_gives_the_same_results(memoized, memoized_views):
    with beam.Pipeline(argv=["--direct_running_mode=in_memory"]) as pipeline:
        counted = (
            pipeline
            | beam.Create([("a", 1), ("b", 1), ("a", 2), ("a", 3)])
            | beam.ParDo(_Counting())
            | beam.combiners.Top.PerKey(1)
        )
        assert_that(counted, equal_to([("a", [3]), ("b", [1])]))
    assert memoized  # the pipeline went through the memoized lookup
