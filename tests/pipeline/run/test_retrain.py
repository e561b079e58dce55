"""`taxi-pipeline retrain`: the lock, the nothing-to-do path, the window."""

import dataclasses
import os
import shutil
import subprocess
import sys

import pytest

from pipeline import cli
from pipeline.outcome import Outcome, RunReport
from pipeline.run import commands, lock, retrain, run_state

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


def _window_plan(ws, window):
    """The plan `taxi-pipeline retrain --window N` makes for this workspace."""
    args = cli.parser().parse_args(["retrain", "--window", str(window), *ws.locations()])
    run_config = commands.run_config(args)
    return run_state.plan(dataclasses.replace(
        run_config, settings=dataclasses.replace(run_config.settings, window_size=window)))


def _record_window_run(ws, outcome, window=2, **fields):
    """Records a window run of the workspace's current inputs, as `retrain` would have."""
    plan = _window_plan(ws, window)
    report = RunReport(outcome=outcome, spans=plan.spans, window_size=window, run_id="20261121-030000-1-abc",
                       fingerprint=plan.fingerprint, finished="2026-11-21T03:04:05+00:00", **fields)
    run_state.save(str(ws.out), report)
    ws.metadata.touch()  # the run's metadata store (an empty SQLite database)
    return report


@pytest.mark.parametrize("outcome, then", [
    (Outcome.PUSHED, "pushed, exit 0"), (Outcome.NOT_BLESSED, "not blessed, exit 3 then"),
    (Outcome.DATA_REJECTED, "data rejected, exit 4 then"),
])
def test_nothing_new_exits_0_and_says_what_was_decided_when(workspace, copy_spans, taxi_pipeline, outcome, then):
    """A scheduler alerts once per decision: the call that made it exits 3 or 4, the later
    calls with nothing new exit 0 and name the run and its outcome."""
    copy_spans(workspace.data, (15, 16))
    version_dir = workspace.model_dir / "7"
    version_dir.mkdir(parents=True)
    (version_dir / "saved_model.pb").write_bytes(b"graph")  # a whole version: what serves
    _record_window_run(workspace, outcome, pushed_version_dir=str(version_dir) if outcome is Outcome.PUSHED else None)
    result = taxi_pipeline("retrain", "--window", "2", *workspace.locations())
    assert result.returncode == 0, result.stdout + result.stderr
    assert ("Nothing new: span 16 was already trained on with the same data, code and settings "
            f"(run 20261121-030000-1-abc, finished 2026-11-21T03:04:05+00:00: {then}). Nothing to do.") in result.stdout
    assert workspace.metadata.stat().st_size == 0  # checked, not written


def test_nothing_new_after_a_rejection_says_the_run_exited_0_and_a_person_rejected_since():
    previous = RunReport(outcome=Outcome.REJECTED, spans=[15, 16], run_id="r1", finished="2026-11-21T03:04:05+00:00")
    assert retrain.nothing_new(previous).note == (
        "Nothing new: span 16 was already trained on with the same data, code and settings (run r1, finished "
        "2026-11-21T03:04:05+00:00: awaiting approval, exit 0; rejected by a person since). Nothing to do.")


def test_rewritten_identical_bytes_are_no_change_and_a_changed_byte_is(workspace, copy_spans):
    copy_spans(workspace.data, (15, 16))
    _record_window_run(workspace, Outcome.NOT_BLESSED)
    (data_file,) = (workspace.data / "span-16").iterdir()
    content = data_file.read_bytes()
    data_file.unlink()
    data_file.write_bytes(content)  # a new file, a new mtime: the same data
    os.utime(data_file, (1, 1))
    assert _window_plan(workspace, 2).previous is not None
    (workspace.data / "span-16" / "more.tfrecord.gz").write_bytes(content[: len(content) // 2])
    assert _window_plan(workspace, 2).previous is None


def test_a_run_over_every_span_does_not_count_as_a_window_run(workspace, copy_spans):
    copy_spans(workspace.data, (15, 16))
    plan = _window_plan(workspace, 2)
    run_state.save(str(workspace.out), RunReport(outcome=Outcome.PUSHED, spans=[15, 16], fingerprint=plan.fingerprint))
    assert _window_plan(workspace, 2).previous is None


def test_a_run_between_two_retrains_does_not_make_the_second_retrain_again(workspace, copy_spans):
    copy_spans(workspace.data, (15, 16))
    window = _record_window_run(workspace, Outcome.NOT_BLESSED)
    run_state.save(str(workspace.out), RunReport(outcome=Outcome.PUSHED, spans=[1, 16], run_id="run"))
    again = _window_plan(workspace, 2).previous
    assert again is not None and again.run_id == window.run_id and again.outcome is Outcome.NOT_BLESSED
    assert run_state.load(str(workspace.out)).report.run_id == "run"
    copy_spans(workspace.data, (14,))  # an older span: outside the window of 2, no change
    assert _window_plan(workspace, 2).previous is not None
    shutil.copytree(workspace.data / "span-16", workspace.data / "span-17")  # a new span
    assert _window_plan(workspace, 2).previous is None


def test_a_window_of_one_span_is_refused(workspace, copy_spans, taxi_pipeline):
    copy_spans(workspace.data, (15, 16))
    result = taxi_pipeline("retrain", "--window", "1", *workspace.locations())
    assert result.returncode == 2  # a usage error, before anything is read
    assert "--window: must be at least 2, got 1" in result.stderr
    assert not workspace.metadata.exists()
