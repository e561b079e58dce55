"""Fingerprints of source code: what an edit changes.

The `components` package's fingerprint is in the cache key of every node that runs its
code (`pipeline.pipeline.create_pipeline`'s `code_version`), so an edit re-runs that node
and what follows; a compiled job's first task checks it against the code its image holds
(`components.custom.window`).
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
