"""A file replaced whole, on a local disk or on object storage: a reader sees the old text
or the new one, never part of either (`models.config`, a pin, a model's record)."""

from __future__ import annotations

import os
import socket
import uuid

from components.support import files


def write_text(path: str, text: str) -> None:
    """Writes `text` to a temporary file beside `path`, then renames it over `path`."""
    # Unique per host and process: on Vertex every task's process may be PID 1.
    temporary = f"{path}.tmp-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    with files.open_file(temporary, "w") as handle:
        handle.write(text)
    files.replace(temporary, path)
