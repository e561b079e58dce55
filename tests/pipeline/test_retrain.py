"""`taxi-pipeline retrain`: the lock, the nothing-to-do path, the window."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from pipeline import cli, retrain
from pipeline.run_record import Outcome, RunReport

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _write_lock(folder, **owner):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / retrain.LOCK_FILE).write_text(json.dumps(owner))


def _dead_pid():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _retrain(tmp_path, *extra):
    return cli.main(["retrain", "--data-root", str(tmp_path / "data"), "--output-root", str(tmp_path / "out"),
                     "--serving-dir", str(tmp_path / "serving"), *extra])


def _spans(tmp_path, *numbers):
    for span in numbers:
        shutil.copytree(os.path.join(REPO, "data", f"span-{span}"), tmp_path / "data" / f"span-{span}")


def test_a_live_lock_stops_the_run_with_exit_5(tmp_path, capsys):
    _spans(tmp_path, 15, 16)
    _write_lock(tmp_path / "out", pid=os.getpid(), host=socket.gethostname(), started=time.time())
    assert _retrain(tmp_path) == retrain.EXIT_LOCKED == 5
    assert f"pid {os.getpid()}" in capsys.readouterr().err
    assert (tmp_path / "out" / retrain.LOCK_FILE).exists()  # not ours to remove


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


def test_a_span_already_trained_on_means_nothing_to_do(tmp_path, capsys):
    _spans(tmp_path, 15, 16)
    (tmp_path / "out").mkdir()
    report = RunReport(outcome=Outcome.PUSHED, pushed_version_dir=str(tmp_path / "serving" / "big_tip" / "7"),
                       spans=[15, 16])
    (tmp_path / "out" / retrain.STATE_FILE).write_text(
        json.dumps({"trained_through_span": 16, "report": report.to_json()}))
    assert _retrain(tmp_path, "--window", "2") == 0
    out = capsys.readouterr().out
    assert "span 16 was already trained on; nothing to do" in out
    assert "Up to date" in out
    assert not (tmp_path / "out" / retrain.LOCK_FILE).exists()
    assert not (tmp_path / "out" / "metadata.sqlite").exists()


def test_spans_are_ordered_by_number(tmp_path):
    for name in ("span-10", "span-9", "span-100", "notes", "span-x"):
        (tmp_path / name).mkdir()
    assert retrain.span_numbers(str(tmp_path)) == [9, 10, 100]


def test_a_window_of_one_span_is_refused(tmp_path, capsys):
    _spans(tmp_path, 15, 16)
    assert _retrain(tmp_path, "--window", "1") == 1
    assert "at least 2 spans" in capsys.readouterr().err
