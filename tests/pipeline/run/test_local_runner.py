"""The local runner's compiled pipeline: every node cached, SpanWindow by the spans found."""

import pytest

from pipeline import config
from pipeline.run import local_runner


def _caching(ir):
    return {node.pipeline_node.node_info.id: node.pipeline_node.execution_options.caching_options.enable_cache
            for node in ir.nodes}


@pytest.mark.parametrize("window_size", [None, 3])
def test_locally_the_span_window_is_cached_by_the_spans_found_when_planning(tmp_path, window_size):
    run_config = config.RunConfig(
        output_root=str(tmp_path), settings=config.Settings(window_size=window_size)
    ).resolved()
    ir = local_runner.compile_ir(run_config, ["span-3", "span-04", "span-9"], "run-42")
    caching = _caching(ir)
    assert caching and all(caching.values())
    (window_node,) = [n.pipeline_node for n in ir.nodes if n.pipeline_node.node_info.id == "SpanWindow"]
    listing = window_node.parameters.parameters["listing"].field_value.string_value
    assert listing == "span-3,span-04,span-9"
    assert "run-42" in str(ir)
