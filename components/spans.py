"""How spans are laid out under a data root: `span-<N>/` folders of TFRecord files.

The converter writes them, ExampleGen's patterns read them, the data gate and the
retrain command find the newest. No TensorFlow here: the command line uses it before
anything heavy is imported.
"""

from __future__ import annotations

import re
from typing import Iterable, List, Optional, Sequence, Tuple

# Every file of every span folder (ExampleGen's pattern for the whole data root).
# ImportExampleGen fingerprints the files, so a new or changed span is ingested again
# and an unchanged data root is served from cache.
ALL_SPANS_PATTERN = "span-*/*"
_FOLDER = re.compile(r"^span-(\d+)/?$")
# In a window, the newest span is the eval split; the older ones are train_1 (the next
# newest), train_2, ...: names fixed by the window's size, so a pipeline compiled once
# (Kubeflow, Vertex AI) names the same splits on every run, whatever spans they hold.
WINDOW_EVAL_SPLIT = "eval"


class WindowError(ValueError):
    """The data root holds fewer spans than the window needs."""


def folder(span: int) -> str:
    return f"span-{span}"


def files_pattern(span: int) -> str:
    """ExampleGen's pattern for one span's files."""
    return f"{folder(span)}/*"


def number(folder_name: str) -> Optional[int]:
    """The span number of a folder name, None if it is not a span folder."""
    match = _FOLDER.match(folder_name)
    return int(match.group(1)) if match else None


def numbered(names: Iterable[str]) -> List[Tuple[int, str]]:
    """`(span number, name)` of the span folders among `names`, oldest first."""
    return sorted((span, name.rstrip("/")) for name in names if (span := number(name)) is not None)


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
