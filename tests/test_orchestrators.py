"""The same pipeline under BeamDagRunner, and with the library speed-ups off: each is a
full run on the same data as the session's finished run, and gives the same artifacts
(the inferred schema's features in name order: see `tests.helpers.inferred_schema`)."""

import numpy as np
import pytest
import tensorflow as tf
from ml_metadata.proto import metadata_store_pb2

from tests.helpers import inferred_schema

pytestmark = pytest.mark.slow


def _probabilities(workspace, examples):
    (version,) = workspace.versions()
    loaded = tf.saved_model.load(str(workspace.model_dir / version))
    return loaded.signatures["serving_default"](examples=tf.constant(examples))["probability"].numpy()


@pytest.mark.parametrize("args, env", [
    (("--orchestrator", "beam"), {}),
    ((), {"TAXI_PIPELINE_SPEEDUPS": "0"}),
], ids=["beam-dag-runner", "speedups-off"])
def test_the_run_gives_the_artifacts_of_the_default_run(
    finished_run, slice_workspace, taxi_pipeline, executions, last_run, examples_without_label, args, env
):
    ws = slice_workspace
    result = taxi_pipeline("run", *args, *ws.locations(), env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    by_node = executions(ws.metadata)
    reference = finished_run.workspace
    assert set(by_node) == set(executions(reference.metadata))
    assert all(states == [metadata_store_pb2.Execution.COMPLETE] for states in by_node.values()), by_node
    assert len(ws.versions()) == 1
    assert inferred_schema(ws.out) == inferred_schema(reference.out)
    record, expected = last_run(ws.out), last_run(reference.out)
    assert record["spans"] == expected["spans"]
    for name, value in expected["eval_metrics"].items():
        assert record["eval_metrics"][name] == pytest.approx(value, abs=1e-6), name
    examples = examples_without_label(ws.data, 200)
    np.testing.assert_allclose(_probabilities(ws, examples), _probabilities(reference, examples), atol=1e-6)
