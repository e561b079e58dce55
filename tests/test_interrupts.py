"""Ctrl-C and a scheduler's SIGTERM, sent to the command's process group as a terminal and
a scheduler send them: one line saying what was done, exit 130 or 143, no traceback,
the lock released, nothing half-written, and the next run resumes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

import pytest

from tests.helpers import RUN_TIMEOUT_SECONDS, cli_command, last_line

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _catches_sigterm(pid) -> bool:
    """Whether the process `pid` has a handler of its own for SIGTERM (Linux's
    /proc/PID/status, SigCgt): the command's signal handlers are installed."""
    with open(f"/proc/{pid}/status") as handle:
        caught = next(line for line in handle if line.startswith("SigCgt:")).split()[1]
    return bool(int(caught, 16) & (1 << (signal.SIGTERM - 1)))


def _interrupted(args, signum, after_line=None, after_seconds=0.0):
    """Runs `taxi-pipeline *args` in a process group of its own and sends `signum` to the
    group `after_seconds` after the progress line of component `after_line` (or after the
    command's handlers are installed); returns the completed process."""
    # A terminal's foreground job: SIGINT as Python's default, whatever this suite inherited
    # (a shell ignores it in the jobs it starts in the background, and exec keeps that).
    process = subprocess.Popen(cli_command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.default_int_handler))
    seen = []
    try:
        if after_line is not None:
            for line in process.stdout:
                seen.append(line)
                if f"] {after_line} " in line:
                    break
        while process.poll() is None and not _catches_sigterm(process.pid):
            time.sleep(0.01)
        time.sleep(after_seconds)
        os.killpg(process.pid, signum)
        out, err = process.communicate(timeout=RUN_TIMEOUT_SECONDS)
    finally:
        process.kill()
    return subprocess.CompletedProcess(args, process.returncode, "".join(seen) + out, err)


def _ended_in_one_line(result, code, starts):
    assert result.returncode == code, result.stdout + result.stderr
    line = last_line(result)
    assert line.startswith(f"error: {starts}"), result.stderr
    assert "Traceback" not in result.stdout + result.stderr and "KeyboardInterrupt" not in result.stderr
    return line


def test_a_run_interrupted_in_the_trainer_then_in_the_push_resumes_and_pushes_once(
        copy_of_finished_run, finished_run, taxi_pipeline, last_run):
    ws = copy_of_finished_run
    # The finished run's own data root (read, not written): every component up to the
    # Trainer is a cache hit, and another seed makes the Trainer run.
    locations = [*ws.locations(data=finished_run.workspace.data), "--seed", "7"]
    versions = ws.versions()

    trainer = _interrupted(["run", *locations], signal.SIGINT, "Transform", after_seconds=1.5)
    line = _ended_in_one_line(trainer, 130, "run was interrupted by Ctrl-C (SIGINT) while Trainer ran (")
    assert "Transform" in line and line.endswith(
        "nothing was pushed; the next `taxi-pipeline run` resumes from the components that finished")
    assert ws.versions() == versions and trainer.stderr.splitlines()[-2].startswith("Full log: ")
    assert "KeyboardInterrupt" in (ws.out / "logs").joinpath(trainer.stderr.splitlines()[-2].rsplit("/", 1)[1]) \
        .read_text()  # the traceback is in the log

    # Sent as the Pusher starts (it takes a tenth of a second): it lands in the Pusher, or
    # just before it.
    push = _interrupted(["run", *locations], signal.SIGTERM, "ShadowCheck")
    line = _ended_in_one_line(push, 143, "run was interrupted by SIGTERM ")
    assert "Trainer" in line
    assert ("while Pusher ran (" in line and "never in part" in line) or (
        "after ShadowCheck (" in line and "nothing was pushed" in line), line
    # The version is whole or absent: nothing numbered holds part of one.
    for version in ws.versions():
        assert (ws.model_dir / version / "saved_model.pb").exists()

    resumed = taxi_pipeline("run", *locations)  # the lock was released
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert len(ws.versions()) == len(versions) + 1
    states = {node["node_id"]: node["state"] for node in last_run(ws.out)["nodes"]}
    assert states["Trainer"] == states["Evaluator"] == "cached", states


def test_a_retrain_interrupted_midway_says_so_and_releases_the_output_root(copy_of_finished_run, finished_run):
    ws = copy_of_finished_run
    locations = ws.locations(data=finished_run.workspace.data)
    versions = ws.versions()
    cut = _interrupted(["retrain", "--window", "3", *locations], signal.SIGINT, "StatisticsGen")
    _ended_in_one_line(cut, 130, "retrain was interrupted by Ctrl-C (SIGINT) ")
    assert "StatisticsGen" in last_line(cut) and "nothing was pushed" in last_line(cut)
    assert ws.versions() == versions
    assert (ws.out / "run.lock").read_text() == ""  # released: the lock file names no holder


def test_gc_predict_and_monitor_interrupted_end_in_one_line_and_leave_nothing_half_done(
        copy_of_finished_run, taxi_pipeline, tmp_path):
    ws = copy_of_finished_run
    # Enough to score that the signal lands while it scores (each span file ten times).
    inputs = tmp_path / "to-score"
    inputs.mkdir()
    for copy in range(10):
        for path in ws.data.glob("span-*/*.gz"):
            shutil.copy(path, inputs / f"{copy}-{path.parent.name}-{path.name}")
    output = tmp_path / "scores"
    predict = _interrupted(["predict", "--input", str(inputs / "*"), "--output", str(output),
                            "--serving-dir", str(ws.serving)], signal.SIGINT, after_seconds=4)
    _ended_in_one_line(predict, 130, "predict was interrupted by Ctrl-C (SIGINT): nothing was written to --output")
    assert not output.exists() and not list(tmp_path.glob("scores*"))

    # The same copies: one span's requests were monitored in about 2 s, before the signal.
    monitor = _interrupted(["monitor", "--requests", str(inputs / "*"), "--serving-dir",
                            str(ws.serving), "--output-root", str(ws.out)], signal.SIGTERM, after_seconds=4)
    _ended_in_one_line(monitor, 143, "monitor was interrupted by SIGTERM: ")

    # As soon as it handles signals: it is then importing what it needs, and the signal is
    # taken once that import is over.
    gc = _interrupted(["gc", "--keep-runs", "1", "--output-root", str(ws.out), "--serving-dir", str(ws.serving)],
                      signal.SIGINT)
    _ended_in_one_line(gc, 130, "gc was interrupted by Ctrl-C (SIGINT): what it removed stays removed")

    unchanged = taxi_pipeline("run", *ws.locations())
    assert unchanged.returncode == 0 and "Nothing changed since the last run" in unchanged.stdout
