"""`scripts/venv --current`: whether a clone's environment was made for the present lock,
which `make` and `scripts/image` (whether it may copy the environment into an image) read.
Run on a tree of its own: the script, a lock, setup.py and the tools' pins."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT

SOURCES = ("locks/tfx-1.16.txt", "setup.py", "locks/pip-tools.txt")


@pytest.fixture
def tree(tmp_path) -> Path:
    (tmp_path / "scripts").mkdir()
    (tmp_path / "locks").mkdir()
    shutil.copy(REPO_ROOT / "scripts" / "venv", tmp_path / "scripts" / "venv")
    for source in SOURCES:
        (tmp_path / source).write_text("x\n")
        os.utime(tmp_path / source, (1_000_000, 1_000_000))
    (tmp_path / ".venv-tfx-1.16").mkdir()
    return tmp_path


def _current(tree: Path) -> int:
    return subprocess.run(["bash", str(tree / "scripts" / "venv"), "--current", "tfx-1.16", ".venv-tfx-1.16"],
                          cwd=tree, capture_output=True, text=True, timeout=60).returncode


@pytest.mark.parametrize("source", SOURCES)
def test_an_environment_stamped_before_any_one_of_what_made_it_changed_is_not_current(tree, source):
    stamp = tree / ".venv-tfx-1.16" / ".installed"
    stamp.touch()
    os.utime(stamp, (2_000_000, 2_000_000))
    assert _current(tree) == 0
    os.utime(tree / source, (3_000_000, 3_000_000))  # edited after the environment was made
    assert _current(tree) == 1


def test_an_environment_never_stamped_is_not_current(tree):
    assert _current(tree) == 1
