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


@pytest.mark.parametrize("rows, evaluator_in_workers, starting", [
    (10**4, False, {"ServingBaseline", "Transform", "Trainer"}),
    # Beside an Evaluator in the run's process, not beside the Trainer's data preparation.
    (10**6, False, {"Trainer"}),
    # Never beside the Evaluator's Beam workers.
    (10**6, True, set()),
])
def test_the_serving_probe_starts_ahead_where_no_beam_worker_stands_beside_it(rows, evaluator_in_workers,
                                                                              starting):
    from pipeline.patches import tfx as tfx_patches

    with local_runner._probe_ahead(rows, evaluator_in_workers):
        registered = {node for node, works in tfx_patches._when_done.items() if local_runner._start_probe in works}
        handed_over = {node for node, works in tfx_patches._when_done.items()
                       if local_runner._hand_over_model in works}
    assert registered == starting
    assert handed_over == {"Trainer"}
    assert not any(local_runner._start_probe in works for works in tfx_patches._when_done.values())
