"""The local runner's compiled pipeline."""

from pipeline import config as config_lib
from pipeline import local_runner


def _caching(run_config):
    ir = local_runner.compile_without_window_cache(local_runner.build_pipeline(run_config))
    return {node.pipeline_node.node_info.id: node.pipeline_node.execution_options.caching_options.enable_cache
            for node in ir.nodes}


def test_only_the_span_window_runs_every_time(tmp_path):
    run_config = config_lib.RunConfig(output_root=str(tmp_path), window_size=3).resolved()
    caching = _caching(run_config)
    assert caching.pop("SpanWindow") is False
    assert caching and all(caching.values())


def test_without_a_window_there_is_no_span_window(tmp_path):
    caching = _caching(config_lib.RunConfig(output_root=str(tmp_path)).resolved())
    assert "SpanWindow" not in caching and caching["ImportExampleGen"] is True
