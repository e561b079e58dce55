"""The patch to the standard library: the run's imports read the installed packages'
metadata once, where the Google clients' version checks read it on each import."""

import os
import subprocess
import sys

from pipeline.patches import machinery

COUNTED = """
import sys
from importlib import metadata

from components import compat

calls = []
original = metadata.packages_distributions
metadata.packages_distributions = counting = lambda: calls.append(1) or original()
from pipeline.run import process

on = sys.argv[1] == "on"
# The run's two blocks: TensorFlow's import (`commands._run_pipeline`), then the local runner's.
with process.frozen_imports(on):
    import tensorflow  # noqa: F401
process.import_frozen("pipeline.run.local_runner", on)
print(len(calls), metadata.packages_distributions is counting, compat.TFX_VERSION < (1, 17))
"""


def _calls(on: str) -> list:
    ran = subprocess.run([sys.executable, "-c", COUNTED, on], capture_output=True, text=True, timeout=240,
                         env={**os.environ, machinery.ENV: "1"}, cwd=os.getcwd())
    assert ran.returncode == 0, ran.stderr[-3000:]
    return ran.stdout.split()[-3:]


def test_the_google_clients_imports_scan_the_installed_packages_once():
    count, restored, tfx_1_16 = _calls("off")
    # tfx-1.16's clients ask on each import (4 times); tfx-1.21's, on Python 3.13, not at all.
    assert restored == "True" and (int(count) > 1 if tfx_1_16 == "True" else int(count) == 0)
    patched, restored, _ = _calls("on")
    # At most once over both blocks, and the standard library's own function back after.
    assert int(patched) == min(int(count), 1) and restored == "True"
