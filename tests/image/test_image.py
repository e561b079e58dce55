"""What each image holds, whichever way its packages got there (scripts/image-venv copies a
clone's environment; `docker build` elsewhere installs the lock with pip): this package,
the lock's versions of its dependencies, and nothing from its test extras."""

from __future__ import annotations

import importlib.metadata
import re

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.helpers import REPO_ROOT
from tests.image import schedule
from tests.image.vertex import Image

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

PACKAGE = "taxi-tfx-pipeline"
# Each fact on a line of its own prefix: the container runtime may add lines of its own
# (crun's "Close_Fd sealing memfd copy: Device or resource busy", for one).
REPORT = ('echo "stack=$TAXI_PIPELINE_STACK"; '
          'python -c "import platform; print(\'python=\' + platform.python_version())"; '
          "pip list --format=freeze --exclude pip --exclude setuptools --exclude wheel")


@pytest.mark.parametrize("env", [schedule.IMAGE_ENV, schedule.OTHER_IMAGE_ENV])
def test_the_image_holds_the_locks_versions_and_no_test_packages(env, tmp_path):
    image = schedule.image_named(env, "image")
    log = tmp_path / "report.log"
    assert Image(image, {}).run(["sh", "-c", REPORT], str(log), timeout=120) == 0, log.read_text()
    lines = [line.strip() for line in log.read_text().splitlines()]
    (stack,) = [line.removeprefix("stack=") for line in lines if line.startswith("stack=")]
    (python,) = [line.removeprefix("python=") for line in lines if line.startswith("python=")]
    installed = _pins(lines)
    lock = _pins((REPO_ROOT / "locks" / f"{stack}.txt").read_text().splitlines())

    assert installed.pop(canonicalize_name(PACKAGE), None) == importlib.metadata.version(PACKAGE), lines
    assert {name: (version, lock.get(name)) for name, version in installed.items() if lock.get(name) != version} == {}
    requirements = [Requirement(text) for text in importlib.metadata.requires(PACKAGE) or ()]
    test_only = {canonicalize_name(r.name) for r in requirements if r.marker and "extra" in str(r.marker)}
    assert "pytest" in test_only and not test_only & installed.keys(), test_only & installed.keys()
    environment = {"python_version": ".".join(python.split(".")[:2]), "python_full_version": python, "extra": ""}
    needed = {canonicalize_name(r.name) for r in requirements if r.marker is None or r.marker.evaluate(environment)}
    assert needed and needed <= installed.keys(), needed - installed.keys()


def _pins(lines) -> dict:
    """name -> version of each `name==version` line (comments and other forms left out)."""
    matches = (re.fullmatch(r"([A-Za-z0-9_.\-]+)==(\S+)", line.strip()) for line in lines)
    return {canonicalize_name(m.group(1)): m.group(2) for m in matches if m}
