"""How spans are laid out under a data root: `span-<N>/` folders of TFRecord files.

The converter writes them, ExampleGen's patterns read them, the data gate and the
retrain command find the newest. No TensorFlow here: the command line uses it before
anything heavy is imported.
"""

from __future__ import annotations

import re
from typing import Iterable, List, Optional, Tuple

# Every file of every span folder (ExampleGen's pattern for the whole data root).
ALL_SPANS_PATTERN = "span-*/*"
_FOLDER = re.compile(r"^span-(\d+)/?$")


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
