"""Patches to Python's standard library, for the heavy imports of a run only
(`pipeline.run.process.frozen_imports`). What each changes and why: `patches`.

When Python or the Google clients change under it,
tests/pipeline/patches/test_stdlib.py::test_the_google_clients_imports_scan_the_installed_packages_once
fails for a `packages_distributions` that moved or that a run's imports ask more than
once with the patch. What it saves: docs/performance.md#the-runs-process.
"""

from __future__ import annotations

import functools
from typing import List

from pipeline.patches.machinery import Patch


def patches() -> List[Patch]:
    """`(owner, attribute, new value from the old one)` of each change to the standard library.

    - `importlib.metadata.packages_distributions`: google-api-core's Python version check
      asks it, on import, for the package each Google client is part of (the clients that
      TensorFlow, Beam and TFX import and a run never calls: BigQuery, its storage API,
      Pub/Sub), and each call reads every installed package's metadata (36 ms here, four
      times a run on tfx-1.16; tfx-1.21's clients do not ask). Nothing is installed
      while a run imports: answered once.
    """
    from importlib import metadata

    return [(metadata, "packages_distributions", functools.cache)]
