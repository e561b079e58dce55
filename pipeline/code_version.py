"""The fingerprint of the code that makes a model.

A run's own fingerprint holds both packages' sources (`pipeline.run.run_state`), so an
edit anywhere makes the next run a run; every cached node that runs the `components`
package's code holds that package's fingerprint (`components.support.source`) in its
cache key, so an edit re-runs it and what follows (docs/running.md).
"""

from __future__ import annotations

import hashlib
import os

from components.support import source


def of_model() -> str:
    """Fingerprint of the code that makes a model: the `components` package and the DAG
    (`pipeline/pipeline.py`), a part of each candidate's inputs (`components.support.registry`)."""
    digest = hashlib.sha256(source.of_components().encode())
    with open(os.path.join(os.path.dirname(__file__), "pipeline.py"), "rb") as handle:
        digest.update(handle.read())
    return digest.hexdigest()[:16]
