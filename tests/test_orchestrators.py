"""The same pipeline under BeamDagRunner, and with the library speed-ups off: each is a
full run on the same data as the session's finished run, and gives the same artifacts:
every decision, statistic, drift distance, metric and score within the tolerances of
`pipeline.inspect.parity` (which docs/speedups-parity.md measures at a million rows)."""

import pytest
from ml_metadata.proto import metadata_store_pb2

from pipeline.inspect import parity

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("args, env", [
    (("--orchestrator", "beam"), {}),
    # The speed-ups reach into each stack's libraries.
    pytest.param((), {"TAXI_PIPELINE_SPEEDUPS": "0"}, marks=pytest.mark.every_stack),
], ids=["beam-dag-runner", "speedups-off"])
def test_the_run_gives_the_artifacts_of_the_default_run(
    finished_run, slice_workspace, taxi_pipeline, executions, examples_without_label, args, env
):
    ws = slice_workspace
    result = taxi_pipeline("run", *args, *ws.locations(), env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    by_node = executions(ws.metadata)
    reference = finished_run.workspace
    assert set(by_node) == set(executions(reference.metadata))
    assert all(states == [metadata_store_pb2.Execution.COMPLETE] for states in by_node.values()), by_node
    assert len(ws.versions()) == 1
    examples = examples_without_label(ws.data, 200)
    found, expected = parity.read(str(ws.out), examples), parity.read(str(reference.out), examples)
    comparison = parity.compare(found, expected)
    assert comparison.same, comparison.problems()
    assert len(found.numbers["scores"]) == 200 and len(found.numbers["metrics"]) > 10
    assert len(found.numbers["statistics"]) > 1000 and len(found.numbers["drift"]) > 5
    assert found.decisions["outcome"] == "pushed" and found.decisions["blessed"] == "True"
