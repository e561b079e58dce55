"""Where Beam's work runs: the one answer the gate, the patches and the run's log read."""

import pytest
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from components.support import beam_place
from components.support.beam_place import Place


@pytest.mark.parametrize("args, where", [
    ((), Place.PROCESS),
    (("--runner=direct",), Place.PROCESS),
    (("--runner=apache_beam.runners.portability.fn_api_runner.FnApiRunner",), Place.PROCESS),
    (("--runner", "DirectRunner", "--direct_running_mode=multi_threading"), Place.PROCESS),
    (("--runner=BundleBasedDirectRunner",), Place.PROCESS),
    (("--direct_running_mode=multi_processing", "--direct_num_workers=2"), Place.MACHINE),
    (("--runner=PrismRunner",), Place.MACHINE),
    (("--runner=PortableRunner", "--job_endpoint=localhost:8099"), Place.ELSEWHERE),
    (("--runner=FlinkRunner", "--direct_running_mode=in_memory"), Place.ELSEWHERE),
    (("--runner=DataflowRunner",), Place.ELSEWHERE),
    # The last --runner wins, as in Beam.
    (("--runner=DataflowRunner", "--runner", "DirectRunner"), Place.PROCESS),
])
def test_each_runner_and_mode_has_one_place(args, where):
    assert beam_place.place_of(args) is where
    # Read the same through Beam's own options, as the gate reads them.
    options = PipelineOptions(list(args))
    assert beam_place.place(options.view_as(StandardOptions).runner,
                            options.view_as(DirectOptions).direct_running_mode) is where
