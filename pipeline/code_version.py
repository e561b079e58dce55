"""Fingerprints of the project's code: what an edit changes.

A run's own fingerprint holds both packages' sources (`pipeline.run.run_state`), so an
edit anywhere makes the next run a run; every cached node that runs the `components`
package's code holds that package's fingerprint in its cache key (`create_pipeline`'s
`code_version`), so an edit re-runs it and what follows (docs/running.md).
"""

from __future__ import annotations

import hashlib
import os

import components


def source_digest(root: str) -> str:
    """Hash of the source (.py) and schema (.pbtxt) files under `root`."""
    digest = hashlib.sha256()
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".py", ".pbtxt")):
                path = os.path.join(folder, name)
                digest.update(os.path.relpath(path, root).encode())
                with open(path, "rb") as handle:
                    digest.update(handle.read())
    return digest.hexdigest()


def of_components() -> str:
    """Fingerprint of the `components` package (the code the pipeline's nodes run)."""
    return source_digest(os.path.dirname(components.__file__))[:16]


def of_model() -> str:
    """Fingerprint of the code that makes a model: the `components` package and the DAG
    (`pipeline/pipeline.py`), a part of each candidate's inputs (`components.support.registry`)."""
    digest = hashlib.sha256(of_components().encode())
    with open(os.path.join(os.path.dirname(__file__), "pipeline.py"), "rb") as handle:
        digest.update(handle.read())
    return digest.hexdigest()[:16]
