"""Files on a local disk or on object storage, by path: local paths through `os`, remote
ones (`gs://...`) through `tf.io.gfile`, TensorFlow imported only then. The code that
reads a data root or a serving folder goes through here, so that the command line's
quick answers (`run` with nothing new, `serving list`, `serving rollback`) cost no
TensorFlow import on a local folder."""

from __future__ import annotations

import os
import re
import time
from typing import IO, Callable, List, Tuple, Type, TypeVar

T = TypeVar("T")

# TensorFlow's Cloud Storage file system keeps an object's size for this long
# (GCS_STAT_CACHE_MAX_AGE, default 5 s) and reads that many bytes: a file another process
# rewrote longer in that time reads truncated. A file rewritten again and again (the
# serving folder's models.config, a model's record) can be outrun by the next write
# between the stat and the read, so `parsed` reads a remote file up to REMOTE_READS times
# before its error stands: a truly broken one is named after (REMOTE_READS - 1) *
# STAT_CACHE_SECONDS.
STAT_CACHE_SECONDS = 5.5
REMOTE_READS = 4


def is_remote(path: str) -> bool:
    return "://" in path


def join(folder: str, name: str) -> str:
    return f"{folder.rstrip('/')}/{name}" if is_remote(folder) else os.path.join(folder, name)


def _gfile():
    import tensorflow as tf

    return tf.io.gfile


def exists(path: str) -> bool:
    return _gfile().exists(path) if is_remote(path) else os.path.exists(path)


def isdir(path: str) -> bool:
    return _gfile().isdir(path) if is_remote(path) else os.path.isdir(path)


def listdir(folder: str, missing_ok: bool = False) -> List[str]:
    """The folder's entries; with `missing_ok`, none when it is not there."""
    if missing_ok and not isdir(folder):
        return []
    if is_remote(folder):
        return [name.rstrip("/") for name in _gfile().listdir(folder)]
    return os.listdir(folder)


def size(path: str) -> int:
    return _gfile().stat(path).length if is_remote(path) else os.path.getsize(path)


def size_and_mtime_ns(path: str) -> Tuple[int, int]:
    if is_remote(path):
        stat = _gfile().stat(path)
        return stat.length, stat.mtime_nsec
    stat = os.stat(path)
    return stat.st_size, stat.st_mtime_ns


def open_file(path: str, mode: str = "r") -> IO:
    """Text in UTF-8 whatever the locale, as `tf.io.gfile` reads and writes it."""
    if is_remote(path):
        return _gfile().GFile(path, mode)
    return open(path, mode, encoding=None if "b" in mode else "utf-8")


def read_text(path: str) -> str:
    with open_file(path) as handle:
        return handle.read()


def parsed(path: str, parse: Callable[[str], T], errors: Tuple[Type[Exception], ...]) -> T:
    """`parse(path)`, which reads and parses the file; on object storage, read again after
    the size cache's age while it raises one of `errors` (a read cut short by a stale size),
    up to REMOTE_READS reads in all; the last one's error stands."""
    for _ in range(REMOTE_READS - 1 if is_remote(path) else 0):
        try:
            return parse(path)
        except errors:
            time.sleep(STAT_CACHE_SECONDS)
    return parse(path)


def remove(path: str) -> None:
    if is_remote(path):
        _gfile().remove(path)
    else:
        os.remove(path)


def makedirs(path: str) -> None:
    if is_remote(path):
        _gfile().makedirs(path)
    else:
        os.makedirs(path, exist_ok=True)


def replace(source: str, target: str) -> None:
    """Renames `source` over `target`: one step on a local disk."""
    if is_remote(source):
        _gfile().rename(source, target, overwrite=True)
    else:
        os.replace(source, target)


def tensorflow_reason(message: str, limit: int = 200) -> str:
    """What a TensorFlow error's message says, for people: its first line without the
    internal function it ran in ("{{function_node ...}}") and the op's name ("[Op:...]")."""
    lines = message.strip().splitlines()
    text = re.sub(r"\{\{[^}]*\}\}|\[Op:[^\]]*\]|\s+name:\s*$", "", lines[0] if lines else "").strip()
    text = re.sub(r"truncated record at (\d+)' failed with EOF reached",
                  r"the file ends inside the record at byte \1", text)
    return text if len(text) <= limit else text[: limit - 1] + "…"
