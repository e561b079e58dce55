"""SIGKILL in the middle of a run, then a re-run: it completes with exactly one push."""

import signal
import subprocess

import pytest

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("kill_after", ["StatisticsGen", "Transform", "Trainer"])
def test_a_run_killed_after_a_component_is_completed_by_the_next_run_with_one_push(
    slice_workspace, cli_argv, run_timeout, taxi_pipeline, last_run, kill_after
):
    ws = slice_workspace
    process = subprocess.Popen(cli_argv("run", *ws.locations()), stdout=subprocess.PIPE, text=True)
    seen = []
    try:
        for line in process.stdout:
            seen.append(line)
            if f"] {kill_after} " in line:
                process.send_signal(signal.SIGKILL)  # the next component is starting
                break
        process.wait(timeout=run_timeout)
    finally:
        process.kill()
    assert process.returncode == -signal.SIGKILL, seen
    assert ws.versions() == []

    finished = [line.split("]")[1].split()[0] for line in seen if line.startswith("[")]
    rerun = taxi_pipeline("run", *ws.locations())
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    record = last_run(ws.out)
    assert record["outcome"] == "pushed"
    assert len(ws.versions()) == 1
    # What finished before the kill is reused, not computed again (a resolver only
    # looks MLMD up, on every run).
    states = {node["node_id"]: node["state"] for node in record["nodes"]}
    assert kill_after in finished
    recomputed = [n for n in finished if states[n] != "cached" and n != "LatestBlessedModelResolver"]
    assert recomputed == [], (recomputed, states)
