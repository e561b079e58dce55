"""The patch to the standard library: the run's imports read the installed packages'
metadata once, where the Google clients' version checks read it on each import."""

import os
import subprocess
import sys

from pipeline.patches import machinery

COUNTED = """
import sys
from importlib import metadata

calls = []
original = metadata.packages_distributions
metadata.packages_distributions = lambda: calls.append(1) or original()
from pipeline.run import process

with process.frozen_imports(on=sys.argv[1] == "on"):
    import tensorflow  # noqa: F401
    import pipeline.run.local_runner  # noqa: F401
print(len(calls), metadata.packages_distributions is not original)
"""


def _calls(on: str) -> list:
    ran = subprocess.run([sys.executable, "-c", COUNTED, on], capture_output=True, text=True, timeout=240,
                         env={**os.environ, machinery.ENV: "1"}, cwd=os.getcwd())
    assert ran.returncode == 0, ran.stderr[-3000:]
    return ran.stdout.split()[-2:]


def test_the_google_clients_imports_scan_the_installed_packages_once():
    count, still_counted = _calls("off")
    # tfx-1.16's clients ask on each import (4 times); tfx-1.21's, on Python 3.13, not at all.
    assert still_counted == "True"
    patched, still_counted = _calls("on")
    # At most once, and the standard library's own function again after the imports.
    assert int(patched) == min(int(count), 1) and still_counted == "True"
