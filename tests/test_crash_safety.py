"""SIGKILL in the middle of a run, then a re-run: it completes with exactly one push."""

import os
import shutil
import signal
import subprocess
import sys

import pytest

from tests.test_end_to_end import SLICE_SPANS, REPO

pytestmark = pytest.mark.slow


def _command(root):
    return [os.path.join(os.path.dirname(sys.executable), "taxi-pipeline"), "run", "--data-root", str(root / "data"),
            "--output-root", str(root / "out"), "--serving-dir", str(root / "serving")]


@pytest.mark.parametrize("kill_after", ["StatisticsGen", "Transform", "Trainer"])
def test_a_run_killed_after_a_component_is_completed_by_the_next_run_with_one_push(tmp_path, kill_after):
    for span in SLICE_SPANS:
        shutil.copytree(os.path.join(REPO, "data", f"span-{span}"), tmp_path / "data" / f"span-{span}")
    process = subprocess.Popen(_command(tmp_path), stdout=subprocess.PIPE, text=True)
    seen = []
    for line in process.stdout:
        seen.append(line)
        if f"] {kill_after} " in line:
            process.send_signal(signal.SIGKILL)  # the next component is starting
            break
    process.wait()
    assert process.returncode == -signal.SIGKILL, seen
    assert not (tmp_path / "serving" / "big_tip").exists() or not os.listdir(tmp_path / "serving" / "big_tip")

    rerun = subprocess.run(_command(tmp_path), capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "Pushed a new model version" in rerun.stdout
    assert len(os.listdir(tmp_path / "serving" / "big_tip")) == 1
