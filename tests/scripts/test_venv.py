"""`scripts/venv --current`: whether a clone's environment was made for the present lock,
which `make` and `scripts/image` (whether it may copy the environment into an image) read."""

import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "venv"


def _current(venv: Path) -> int:
    return subprocess.run(["bash", str(SCRIPT), "--current", "tfx-1.16", str(venv)],
                          capture_output=True, text=True, timeout=60).returncode


@pytest.mark.parametrize("source", ["locks/tfx-1.16.txt", "setup.py", "locks/pip-tools.txt"])
def test_an_environment_stamped_before_a_change_of_what_made_it_is_not_current(tmp_path, source):
    (tmp_path / ".installed").touch()
    assert _current(tmp_path) == 0
    changed = (REPO_ROOT / source).stat().st_mtime
    os.utime(tmp_path / ".installed", (changed - 10, changed - 10))
    assert _current(tmp_path) == 1


def test_an_environment_never_stamped_is_not_current(tmp_path):
    assert _current(tmp_path) == 1
