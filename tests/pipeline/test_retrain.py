"""`taxi-pipeline retrain`: the lock, the nothing-to-do path, the window."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from pipeline import retrain, run_state
from pipeline.run_state import Outcome, RunReport


def _write_lock(folder, **owner):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / retrain.LOCK_FILE).write_text(json.dumps(owner))


def _dead_pid():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_a_live_lock_stops_the_run_with_exit_5(workspace, copy_spans, taxi_pipeline):
    copy_spans(workspace.data, (15, 16))
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _write_lock(workspace.out, pid=holder.pid, host=socket.gethostname(), started=time.time())
        result = taxi_pipeline("retrain", *workspace.locations())
    finally:
        holder.kill()
        holder.wait()
    assert result.returncode == 5
    assert f"pid {holder.pid}" in result.stderr
    assert (workspace.out / retrain.LOCK_FILE).exists()  # not ours to remove


@pytest.mark.parametrize("owner", [
    {"pid": None, "host": socket.gethostname(), "started": 0},  # pid filled in below: a dead process
    {"pid": 1, "host": "another-host", "started": time.time() - retrain.STALE_LOCK_SECONDS - 60},
    None,  # half-written
])
def test_a_stale_lock_is_recovered(tmp_path, owner):
    if owner is None:
        tmp_path.joinpath(retrain.LOCK_FILE).write_text('{"pid": 12')
    else:
        owner = dict(owner, pid=owner["pid"] or _dead_pid())
        _write_lock(tmp_path, **owner)
    with retrain.RunLock(str(tmp_path)) as lock:
        assert lock.recovered_from is not None
        assert json.loads((tmp_path / retrain.LOCK_FILE).read_text())["pid"] == os.getpid()
    assert not (tmp_path / retrain.LOCK_FILE).exists()


def test_a_recent_lock_of_another_host_is_respected(tmp_path):
    _write_lock(tmp_path, pid=1, host="another-host", started=time.time())
    with pytest.raises(retrain.LockHeld, match="another-host"):
        with retrain.RunLock(str(tmp_path)):
            pass


def test_a_span_already_trained_on_means_nothing_to_do(workspace, copy_spans, taxi_pipeline):
    copy_spans(workspace.data, (15, 16))
    report = RunReport(outcome=Outcome.PUSHED, pushed_version_dir=str(workspace.model_dir / "7"),
                       spans=[15, 16], window_size=2, run_id="earlier")
    run_state.save(str(workspace.out), "an earlier fingerprint", report)
    result = taxi_pipeline("retrain", "--window", "2", *workspace.locations())
    assert result.returncode == 0, result.stderr
    assert "span 16 was already trained on; nothing to do" in result.stdout
    assert "Up to date" in result.stdout
    assert not (workspace.out / retrain.LOCK_FILE).exists()
    assert not workspace.metadata.exists()


def test_a_run_over_every_span_does_not_count_as_a_window_run(tmp_path):
    report = RunReport(outcome=Outcome.PUSHED, spans=[15, 16], window_size=None)
    run_state.save(str(tmp_path), "fingerprint", report)
    assert run_state.window_done(str(tmp_path), 16) is None


def test_a_run_between_two_retrains_does_not_make_the_second_retrain_again(tmp_path):
    window = RunReport(outcome=Outcome.PUSHED, spans=[15, 16], window_size=2, run_id="retrain")
    run_state.save(str(tmp_path), "first", window)
    run_state.save(str(tmp_path), "second", RunReport(outcome=Outcome.PUSHED, spans=[1, 16], run_id="run"))
    done = run_state.window_done(str(tmp_path), 16)
    assert done is not None and done.run_id == "retrain" and done.outcome is Outcome.UP_TO_DATE
    assert run_state.load(str(tmp_path)).report.run_id == "run"
    assert run_state.window_done(str(tmp_path), 17) is None


def test_rejected_data_is_looked_at_again(tmp_path):
    report = RunReport(outcome=Outcome.DATA_REJECTED, spans=[15, 16], window_size=2)
    run_state.save(str(tmp_path), "fingerprint", report)
    assert run_state.window_done(str(tmp_path), 16) is None


def test_a_window_of_one_span_is_refused(workspace, copy_spans, taxi_pipeline):
    copy_spans(workspace.data, (15, 16))
    result = taxi_pipeline("retrain", "--window", "1", *workspace.locations())
    assert result.returncode == 1
    assert "at least 2 spans" in result.stderr
