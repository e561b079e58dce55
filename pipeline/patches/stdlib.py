"""Patches to Python's standard library, for the heavy imports only, wherever they are
frozen (`pipeline.run.process.frozen_imports`: a local run's, a compiled task's), with the
speed-ups on. What each changes and why: `patches`.

When Python or the Google clients change under it,
tests/pipeline/patches/test_stdlib.py::test_the_google_clients_imports_scan_the_installed_packages_once
fails for a `packages_distributions` that moved, that tfx-1.16's imports no longer ask, or
that a run's two import blocks ask more than once with the patch. What it saves: docs/performance.md#the-runs-process.
"""

from __future__ import annotations

import functools
from typing import Callable, Dict, List

from pipeline.patches.machinery import Patch


def patches() -> List[Patch]:
    """`(owner, attribute, new value from the old one)` of each change to the standard library.

    - `importlib.metadata.packages_distributions`: google-api-core's Python version check
      asks it, on import, for the package each Google client is part of (the clients that
      TensorFlow, Beam and TFX import and a run never calls: BigQuery, its storage API,
      Pub/Sub), and each call reads every installed package's metadata (36 ms here, four
      times a run on tfx-1.16; tfx-1.21's clients do not ask). Nothing is installed
      while a run imports: answered once. Since Beam's Google Cloud IO block is imported
      when first used (`beam.deferred_io_block`), a run on tfx-1.16 asks once; the
      answer is kept for a process that loads that block after all.
    """
    from importlib import metadata

    return [(metadata, "packages_distributions", _answered_once)]


# The one answer of each original, kept across the run's import blocks (TensorFlow's, then
# the local runner's).
_ANSWERS: Dict[Callable, Callable] = {}


def _answered_once(original: Callable) -> Callable:
    return _ANSWERS.setdefault(original, functools.cache(original))
