"""Fixtures shared by the tests of the data gate and its per-span statistics."""

import pytest

from tests.helpers import REPO_ROOT, copy_span_folders, span_like, write_records


@pytest.fixture
def two_spans(tmp_path):
    """`two_spans(edit)`: spans 15 and 16 of data/ under a data root; `edit` rewrites every
    example of span 16."""

    def make(edit=None):
        copy_span_folders(tmp_path / "data", (15,))
        write_records(tmp_path / "data" / "span-16" / "trips.tfrecord.gz",
                           span_like(REPO_ROOT / "data" / "span-16", 1, edit or (lambda example: None)))
        return str(tmp_path / "data")

    return make
