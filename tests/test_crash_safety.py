"""SIGKILL at any point of a run, then a plain re-run: the re-run completes what the killed
run began, and the data is pushed exactly once, with the decision an uninterrupted run
makes, and MLMD says what happened."""

import json
import shutil
import signal
import subprocess

import pytest
from ml_metadata.proto import metadata_store_pb2

pytestmark = pytest.mark.slow

NODES = {
    "SpanWindow", "ImportExampleGen", "StatisticsGen", "InferredSchemaGen", "ImportSchemaGen", "ExampleValidator",
    "DataGate", "Transform", "ServingBaseline", "Trainer", "Evaluator", "ServingCheck", "ShadowCheck", "Pusher",
}


def _run_until_a_node_finishes(argv, timeout, already_killed_after, only=None):
    """Runs the command line and SIGKILLs it as soon as a node it executed (not one served
    from cache) has finished, the first not in `already_killed_after` (or node `only`);
    returns that node (None if the run ended first) and the output."""
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    seen, killed_after = [], None
    try:
        for line in process.stdout:
            seen.append(line)
            if line.startswith("["):
                node, how = line.split("]", 1)[1].split()[0], line.split()[-1]
                if how != "cached" and node not in already_killed_after and only in (None, node):
                    process.send_signal(signal.SIGKILL)  # the next node is about to start
                    killed_after = node
                    break
        process.wait(timeout=timeout)
    finally:
        process.kill()
    return killed_after, process.returncode, "".join(seen)


def test_a_run_killed_after_every_node_in_turn_ends_as_one_uninterrupted_run(
    slice_workspace, finished_run, cli_argv, run_timeout, executions, last_run
):
    """Kill after the first node, re-run, kill after the next node the re-run executes,
    and so on to after the Pusher (before the run is recorded): the final re-run pushes
    one version, blesses as the uninterrupted run did, and every node executed once."""
    ws = slice_workspace
    killed_after = []
    for _ in range(len(NODES) + 1):
        node, status, out = _run_until_a_node_finishes(cli_argv("run", *ws.locations()), run_timeout, killed_after)
        if node is None:
            break
        assert status == -signal.SIGKILL, out
        killed_after.append(node)
        assert len(ws.versions()) == (1 if "Pusher" in killed_after else 0), (killed_after, out)
        assert set(ws.serving_entries()) <= set(ws.versions()) | {".push.lock", "record.json"}  # no partial version
    assert set(killed_after) == NODES, killed_after
    assert killed_after[-1] == "Pusher"
    assert status == 0, out
    # The run killed after its Pusher stands: its candidate is in the model's record, and
    # the re-run trains nothing.
    (version,) = ws.versions()
    assert f"Nothing to train: version {version} serves, trained on these very inputs" in out, out
    (candidate,) = json.loads((ws.model_dir / "record.json").read_text())["candidates"]
    assert (candidate["fate"], candidate["version"]) == ("served", int(version))
    card = json.loads((ws.model_dir / version / "assets.extra" / "model_card.json").read_text())
    reference = last_run(finished_run.workspace.out)
    assert card["evaluation"]["overall"]["candidate"]["auc"] == pytest.approx(reference["eval_metrics"]["auc"],
                                                                              abs=1e-3)
    states = executions(ws.metadata)
    complete, cached = metadata_store_pb2.Execution.COMPLETE, metadata_store_pb2.Execution.CACHED
    canceled = metadata_store_pb2.Execution.CANCELED
    for node in NODES:
        assert states[node].count(complete) == 1, (node, states[node])
        assert set(states[node]) <= {complete, cached, canceled}, (node, states[node])


def test_a_trainer_killed_mid_training_resumes_and_a_kill_inside_the_pusher_after_its_rename_pushes_once(
    slice_workspace, cli_argv, run_timeout, taxi_pipeline, last_run, executions
):
    """SIGKILL once the Trainer has checkpointed an epoch: the re-run's Trainer (upstream
    all cached, so the same inputs) resumes from that epoch instead of starting afresh.
    That re-run is killed once its Evaluator finished, and the Pusher's rename is played
    (a version in place, unrecorded): the next re-run reuses the evaluated model and
    recognizes the version as its own."""
    import json
    import time

    ws = slice_workspace
    checkpoints = ws.out / "pipeline_root" / "Trainer" / "checkpoints"
    process = subprocess.Popen(cli_argv("run", *ws.locations()), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + run_timeout
        while not list(checkpoints.glob("*/checkpoint")) and time.monotonic() < deadline:
            assert process.poll() is None, "the run ended before the Trainer checkpointed an epoch"
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
    finally:
        process.kill()
    assert list(checkpoints.glob("*/checkpoint")), "no checkpoint was written"

    node, status, out = _run_until_a_node_finishes(cli_argv("run", *ws.locations()), run_timeout, [], "Evaluator")
    assert node == "Evaluator" and status == -signal.SIGKILL, out
    states = executions(ws.metadata)
    complete, cached = metadata_store_pb2.Execution.COMPLETE, metadata_store_pb2.Execution.CACHED
    assert sorted(states["Transform"]) == sorted([complete, cached]), states  # the re-run's came from cache
    assert states["Trainer"].count(complete) == 1 and len(states["Trainer"]) == 2, states  # killed, then ran
    summaries = sorted((ws.out / "pipeline_root" / "Trainer" / "model_run").glob("*/training_summary.json"))
    assert len(summaries) == 1  # the killed execution wrote none
    summary = json.loads(summaries[0].read_text())
    assert summary["resumed_from_epoch"] >= 1, summary
    assert not list(checkpoints.glob("*/checkpoint"))  # deleted once the model was exported
    assert ws.versions() == []
    (model,) = (ws.out / "pipeline_root" / "Trainer" / "model").glob("*/Format-Serving")
    shutil.copytree(model, ws.model_dir / "1700000000")  # what the Pusher's rename leaves

    rerun = taxi_pipeline("run", *ws.locations())
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert ws.versions() == ["1700000000"]
    record = last_run(ws.out)
    assert record["outcome"] == "pushed" and record["pushed_version_dir"] == str(ws.model_dir / "1700000000")
    states = {node["node_id"]: node["state"] for node in record["nodes"]}
    assert states["Trainer"] == states["Evaluator"] == "cached", states
