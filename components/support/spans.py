"""The one spans layer: how spans are laid out under a data root, and how they are listed.

A data root holds `span-<N>/` folders of GZIP TFRecord files of `tf.Example`. Every
listing in the project goes through `list_spans` (the command line's pre-flight check and
`retrain`, the SpanWindow node, the data gate, the benchmarks), and ImportExampleGen is
given the patterns of this module, so they all agree on which folders are spans and which
files a span holds.

The files of a span are the entries of its folder that match `FILES_IN_SPAN`:
`[!._]*.gz`, the GZIP files not hidden (`.DS_Store`, `._x.gz` from macOS copies,
editor swap files) and not marked as bookkeeping the way Hadoop, Spark and Beam mark it
(`_SUCCESS`, `_temporary/`). Beam reads a `.gz` file as GZIP by its extension, as the
pre-flight check does. Every other entry is ignored by both, and listed (`Span.ignored`)
so the run log can name it. `N` may be zero-padded (`span-007`); two folders of one
number (`span-7`, `span-007`) are refused.

Local paths are listed with `os` (the command line decides "nothing to do" before
TensorFlow is imported); remote ones (`gs://...`) through `tf.io.gfile`, imported only then
(`components.support.files`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import hashlib
import json
import os
import re
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple

from components.support import files

# The files of one span, relative to its folder, as ExampleGen's patterns say them
# (Beam's glob and `fnmatch` read `[!._]` alike: a first character other than . and _).
FILES_IN_SPAN = "[!._]*.gz"
# Every file of every span folder (ExampleGen's pattern for the whole data root).
# ImportExampleGen fingerprints the files, so a new or changed span is ingested again
# and an unchanged data root is served from cache.
FOLDER_PATTERN = "span-*"
ALL_SPANS_PATTERN = f"{FOLDER_PATTERN}/{FILES_IN_SPAN}"
_FOLDER = re.compile(r"^span-(\d+)/?$")
# In a window, the newest span is the eval split; the older ones are train_1 (the next
# newest), train_2, ...: names fixed by the window's size, so a pipeline compiled once
# (Kubeflow, Vertex AI) names the same splits on every run, whatever spans they hold.
WINDOW_EVAL_SPLIT = "eval"


class DataRootError(ValueError):
    """The data root is missing or holds no span files."""


class WindowError(ValueError):
    """The data root holds fewer spans than the window needs."""


@dataclasses.dataclass(frozen=True)
class Span:
    number: int
    path: str
    # Every file of the span, sorted, with its size in bytes.
    files: Tuple[Tuple[str, int], ...]
    # Entries of the span folder that are not its files (neither checked nor ingested).
    ignored: Tuple[str, ...] = ()

    @property
    def folder_name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    @property
    def pattern(self) -> str:
        """The glob ExampleGen reads this span's files with."""
        return files.join(self.path, FILES_IN_SPAN)



# Bytes hashed at a time.
_CHUNK = 1 << 20
# Digests of files already hashed, by path and stat (size, mtime, inode, ctime): the run's
# plan and ImportExampleGen's driver hash each file once between them, and with
# `remembered_digests` a file is hashed again only once any of those changed (rewriting a
# file changes its ctime, whatever its mtime says).
_DIGESTS: dict = {}
_USED: set = set()


def _stamp(path: str) -> Tuple[int, ...]:
    if files.is_remote(path):
        return files.size_and_mtime_ns(path)
    stat = os.stat(path)
    return stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_ctime_ns


@contextlib.contextmanager
def remembered_digests(cache_file: str) -> Iterator[None]:
    """Digests computed before (kept in the local `cache_file`) are reused; the cache file
    then holds those of the files hashed inside this block."""
    _USED.clear()
    try:
        with open(cache_file) as handle:
            for entry in json.load(handle):
                _DIGESTS.setdefault(tuple(entry["key"]), entry["sha256"])
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        pass  # no cache yet, or an unreadable one: hash again
    yield
    os.makedirs(os.path.dirname(cache_file) or ".", exist_ok=True)
    staged = f"{cache_file}.tmp"
    with open(staged, "w") as handle:
        json.dump([{"key": list(key), "sha256": _DIGESTS[key]} for key in sorted(_USED)], handle)
    os.replace(staged, cache_file)


def sha256(path: str) -> str:
    """SHA-256 of a file's bytes, read in chunks (local or remote)."""
    digest = hashlib.sha256()
    with files.open_file(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def file_digest(path: str) -> str:
    """SHA-256 of a data file's bytes, hashed once per stat: what decides whether data
    changed, never its mtime."""
    key = (path,) + _stamp(path)
    _USED.add(key)
    if key not in _DIGESTS:
        _DIGESTS[key] = sha256(path)
    return _DIGESTS[key]


def files_digest(paths: Iterable[str]) -> str:
    """Digest of the bytes of span files and of the span each is in, whatever the files'
    names and order (a file moved to another span is a change: spans are checked and
    windowed one by one). The run's fingerprint and ImportExampleGen's cache key."""
    digest = hashlib.sha256()
    for key in sorted(f"{number(_parent_name(path))}:{file_digest(path)}" for path in paths):
        digest.update(key.encode())
    return digest.hexdigest()


def _parent_name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 2)[-2]


def unquotable_glob_characters(path: str) -> List[str]:
    """The characters of `path` that Beam's and TensorFlow's globs read as patterns, with
    no way to quote them: a folder whose path has any cannot be globbed below."""
    return sorted({c for c in path if c in "*?[]"})


def _require_folder(data_root: str) -> None:
    if not files.isdir(data_root):
        raise DataRootError(f"data root {data_root} does not exist or is not a folder (moved, deleted or not "
                            "mounted?): point --data-root at the folder of span-<N> folders, then run again")
    special = unquotable_glob_characters(data_root)
    if special:
        raise DataRootError(
            f"data root {data_root} has {' '.join(special)} in its path: ExampleGen finds span files with "
            "glob patterns below the data root, which read these as patterns and cannot quote them; "
            "rename the folder or point a symlink without them at it"
        )


def folder(span: int) -> str:
    """The folder name `make-data` gives span `span`."""
    return f"span-{span}"


def number(folder_name: str) -> Optional[int]:
    """The span number of a folder name, None if it is not a span folder."""
    match = _FOLDER.match(folder_name)
    return int(match.group(1)) if match else None


def numbered(names: Iterable[str]) -> List[Tuple[int, str]]:
    """`(span number, name)` of the span folders among `names`, oldest first; two names
    of one number (`span-7`, `span-007`) are refused."""
    found = sorted((span, name.rstrip("/")) for name in names if (span := number(name)) is not None)
    for (first, first_name), (second, second_name) in zip(found, found[1:]):
        if first == second:
            raise DataRootError(
                f"{first_name} and {second_name} are both span {first}; keep one folder per span"
            )
    return found


def by_number(names: Iterable[str]) -> List[str]:
    """`names` (span folders, or relative paths that begin with one) with those of span
    folders first, oldest span first (span-2 before span-10), then the rest, each in name
    order. Unlike `numbered`, for showing what is recorded: it refuses nothing."""

    def order(name: str) -> Tuple[bool, int, str]:
        span = number(name.split("/", 1)[0])
        return span is None, span or 0, name

    return sorted(names, key=order)


def span_folders(data_root: str) -> List[Tuple[int, str]]:
    """`(span number, folder name)` of the spans under `data_root`, oldest first, without
    listing their files."""
    _require_folder(data_root)
    return [(span, name) for span, name in numbered(files.listdir(data_root))
            if files.isdir(files.join(data_root, name))]


def span_numbers(data_root: str) -> List[int]:
    """The span numbers under `data_root`, oldest first."""
    return [span for span, _ in span_folders(data_root)]


def stray_folders(data_root: str) -> List[str]:
    """Entries of `data_root` that ExampleGen's `span-*` pattern matches but that are not
    span folders (`span-old`, `span-1a`): their files would be ingested unchecked."""
    return sorted(
        files.join(data_root, name) for name in files.listdir(data_root)
        if fnmatch.fnmatchcase(name, FOLDER_PATTERN) and number(name) is None
    )


def refuse_strays(data_root: str) -> None:
    """Raises naming `stray_folders`, if any: a job would ingest their files unchecked."""
    _require_folder(data_root)
    strays = stray_folders(data_root)
    if strays:
        raise ValueError(
            f"{', '.join(strays)}: named like a span folder but not span-<N> with N a number; ExampleGen "
            f"would ingest its files ({ALL_SPANS_PATTERN}). Rename or move it out of {data_root}"
        )


def list_spans(data_root: str, only: Optional[Sequence[int]] = None) -> List[Span]:
    """The span folders under `data_root` (or just the `only` ones), oldest first, with
    the files ExampleGen would ingest from each."""
    _require_folder(data_root)
    found = []
    for span, name in numbered(files.listdir(data_root)):
        path = files.join(data_root, name)
        if (only is not None and span not in only) or not files.isdir(path):
            continue
        matched, ignored = [], []
        for entry in sorted(files.listdir(path)):
            entry_path = files.join(path, entry)
            if fnmatch.fnmatchcase(entry, FILES_IN_SPAN) and not files.isdir(entry_path):
                matched.append((entry_path, files.size(entry_path)))
            else:
                ignored.append(entry_path)
        found.append(Span(span, path, tuple(matched), tuple(ignored)))
    return found


def ignored_entries(data_root: str) -> List[str]:
    """Entries of `data_root` that are neither span folders nor matched by ExampleGen's
    `span-*` pattern: never read."""
    return sorted(
        files.join(data_root, name) for name in files.listdir(data_root)
        if number(name) is None and not fnmatch.fnmatchcase(name, FOLDER_PATTERN)
    )


def window_train_splits(size: int) -> List[str]:
    """The train split names of a window of `size` spans, oldest span first."""
    if size < 2:
        raise ValueError(f"a window needs at least 2 spans (train on older, evaluate on the newest), got {size}")
    return [f"train_{age}" for age in range(size - 1, 0, -1)]


def window(available: Sequence[int], size: int) -> List[Tuple[str, int]]:
    """`(split name, span)` for the newest `size` of the `available` spans, oldest first."""
    names = window_train_splits(size) + [WINDOW_EVAL_SPLIT]
    chosen = sorted(set(available))[-size:]
    if len(chosen) < size:
        raise WindowError(f"a window of {size} spans needs {size} span folders; found {len(chosen)}: {chosen}")
    return list(zip(names, chosen))


def format_numbers(numbers: Iterable[int]) -> str:
    """Span numbers as one text (`"10,11,12"`): how SpanWindow records the spans it chose
    (`spans_used`), which the data gate and the run report read back (`parse_numbers`)."""
    return ",".join(str(span) for span in numbers)


def parse_numbers(text: str) -> List[int]:
    """The span numbers of a `format_numbers` text, in its order."""
    return [int(span) for span in text.split(",") if span]


def relative_pattern(folder_name: str) -> str:
    """ExampleGen's pattern for the files of the span folder `folder_name`, relative to the
    data root."""
    return f"{folder_name}/{FILES_IN_SPAN}"
