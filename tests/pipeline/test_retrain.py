"""`taxi-pipeline retrain`: the lock, the nothing-to-do path, the window."""

import os
import subprocess
import sys

import pytest

from pipeline import lock, run_state
from pipeline.run_state import Outcome, RunReport

HOLD_LOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.pwrite(fd, b"retrain: pid %d on a host since a moment" % os.getpid(), 0)
print("held", flush=True)
time.sleep(120)
"""


def _hold_lock(output_root):
    """A process that holds the output root's lock until killed."""
    output_root.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(output_root / lock.LOCK_FILE)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


@pytest.mark.parametrize("command", ["run", "retrain"])
def test_a_held_lock_stops_run_and_retrain_with_exit_5_naming_the_holder(workspace, copy_spans, taxi_pipeline, command):
    copy_spans(workspace.data, (15, 16))
    holder = _hold_lock(workspace.out)
    try:
        result = taxi_pipeline(command, *workspace.locations())
    finally:
        holder.kill()
        holder.wait()
    assert result.returncode == 5, result.stderr
    assert f"retrain: pid {holder.pid}" in result.stderr and "try again" in result.stderr
    assert not workspace.metadata.exists()


def test_the_lock_of_a_killed_holder_is_free_at_once(tmp_path):
    holder = _hold_lock(tmp_path)
    holder.kill()  # SIGKILL: no clean-up runs
    holder.wait()
    assert "retrain: pid" in (tmp_path / lock.LOCK_FILE).read_text()  # its line is still there
    with lock.RunLock(str(tmp_path), "run"):
        assert (tmp_path / lock.LOCK_FILE).read_text().startswith(f"run: pid {os.getpid()} on ")
    assert (tmp_path / lock.LOCK_FILE).read_text() == ""


def test_a_second_holder_in_the_same_process_is_refused(tmp_path):
    with lock.RunLock(str(tmp_path), "run"):
        with pytest.raises(lock.LockHeld, match="another run holds"):
            with lock.RunLock(str(tmp_path), "retrain"):
                pass
    with lock.RunLock(str(tmp_path), "retrain"):
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
