"""`scripts/stack`: which stack a machine loads, by its C library and its Pythons.

The script runs with a PATH of the test's own: a fake `getconf` says which glibc the
machine has, fake `python3.X` interpreters say which Pythons it has, and nothing else
(no pyenv) is found.
"""

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "stack"
TOOLS = ("bash", "awk", "sort", "head", "ls", "cat", "dirname", "env")


def _fake_machine(tmp_path: Path, glibc: str, pythons, broken=()) -> Path:
    """`pythons` answer the version check and print their version for `describe`; the
    `broken` ones are on PATH but fail whatever they are asked (a leftover link, say)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        (bin_dir / tool).symlink_to(shutil.which(tool))
    (bin_dir / "getconf").write_text(f"#!/bin/sh\necho glibc {glibc}\n")
    for version in pythons:
        (bin_dir / f"python{version}").write_text(f"#!/bin/sh\necho {version}.9\n")
    for version in broken:
        (bin_dir / f"python{version}").write_text("#!/bin/sh\nexit 1\n")
    for path in bin_dir.iterdir():
        if not path.is_symlink():
            path.chmod(0o755)
    return bin_dir


def _stack(bin_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(bin_dir / "bash"), str(SCRIPT), *args], capture_output=True, text=True, timeout=60,
        env={"PATH": str(bin_dir), "HOME": str(bin_dir.parent)},
    )


@pytest.mark.parametrize(
    "glibc, pythons, expected",
    [
        ("2.41", ("3.13", "3.10"), "tfx-1.21"),  # Debian 13 / Ubuntu 24.04 with both Pythons
        ("2.39", ("3.13",), "tfx-1.21"),
        ("2.36", ("3.13", "3.10"), "tfx-1.16"),  # Debian 12: TFX 1.21's wheels need glibc 2.39
        ("2.41", ("3.10",), "tfx-1.16"),  # no Python 3.13
    ],
)
def test_the_newest_stack_the_machine_loads_is_picked(tmp_path, glibc, pythons, expected):
    result = _stack(_fake_machine(tmp_path, glibc, pythons), "pick")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected


def test_a_python_that_does_not_run_is_not_taken(tmp_path):
    result = _stack(_fake_machine(tmp_path, "2.41", ("3.10",), broken=("3.13",)), "pick")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "tfx-1.16"


def test_no_stack_fits_names_what_each_one_misses(tmp_path):
    result = _stack(_fake_machine(tmp_path, "2.36", ("3.13",)), "pick")
    assert result.returncode == 2
    assert "tfx-1.21 needs glibc >= 2.39 (this machine has 2.36)" in result.stderr
    assert "tfx-1.16 needs Python 3.10" in result.stderr


def test_a_forced_stack_that_cannot_load_says_why(tmp_path):
    bin_dir = _fake_machine(tmp_path, "2.36", ("3.13", "3.10"))
    result = _stack(bin_dir, "python", "tfx-1.21")
    assert result.returncode == 2 and "glibc >= 2.39" in result.stderr
    assert _stack(bin_dir, "python", "tfx-1.16").stdout.strip() == str(bin_dir / "python3.10")
    unknown = _stack(bin_dir, "python", "tfx-2.0")
    assert unknown.returncode == 2 and "unknown stack 'tfx-2.0'" in unknown.stderr


def test_describe_names_the_stack_python_and_c_library(tmp_path):
    result = _stack(_fake_machine(tmp_path, "2.41", ("3.13",)), "describe", "tfx-1.21")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Stack tfx-1.21: Python 3.13.9, glibc 2.41")


def _make(bin_dir: Path, *args: str) -> subprocess.CompletedProcess:
    """`make -C REPO ARGS` on the fake machine; only what the Makefile reads first runs."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    return subprocess.run(
        [make, "-s", "-C", str(REPO_ROOT), *args], capture_output=True, text=True, timeout=60,
        env={"PATH": str(bin_dir), "HOME": str(bin_dir.parent)},
    )


def test_make_stops_before_installing_when_no_stack_loads(tmp_path):
    result = _make(_fake_machine(tmp_path, "2.36", ("3.13",)), "test")
    assert result.returncode != 0
    assert "tfx-1.21 needs glibc >= 2.39 (this machine has 2.36)" in result.stderr
    assert "tfx-1.16 needs Python 3.10" in result.stderr
    assert not (REPO_ROOT / ".venv-").exists()


def test_make_stops_on_an_unknown_stack(tmp_path):
    result = _make(_fake_machine(tmp_path, "2.41", ("3.13", "3.10")), "STACK=tfx-0.1", "test")
    assert result.returncode != 0
    assert "unknown stack 'tfx-0.1'; the stacks are: tfx-1.21 tfx-1.16" in result.stderr


def test_make_names_a_forced_stack_the_machine_cannot_load_and_how_to_run_it(tmp_path):
    result = _make(_fake_machine(tmp_path, "2.36", ("3.13", "3.10")), "STACK=tfx-1.21", "stack")
    assert result.returncode != 0
    assert "tfx-1.21 needs glibc >= 2.39" in result.stderr
    assert "scripts/debian-root run make STACK=tfx-1.21" in result.stderr
