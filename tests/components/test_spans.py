"""The one spans layer: which folders are spans, which files a span holds."""

import pytest

from components import spans


def test_folder_names_parse_to_span_numbers_and_sort_by_number():
    assert spans.number("span-7") == 7 and spans.number("span-7/") == 7
    assert spans.number("span-x") is None and spans.number("notes") is None and spans.number("xspan-1") is None
    assert spans.numbered(["span-10", "span-9", "span-100", "notes", "span-x"]) == [
        (9, "span-9"), (10, "span-10"), (100, "span-100")
    ]


def test_list_spans_gives_each_span_its_files_with_sizes(tmp_path):
    (tmp_path / "span-2").mkdir()
    (tmp_path / "span-2" / "b.gz").write_bytes(b"12345")
    (tmp_path / "span-2" / "a.gz").write_bytes(b"1")
    (tmp_path / "span-10").mkdir()
    (tmp_path / "notes").mkdir()
    (tmp_path / "span-3").write_text("a file, not a folder")
    found = spans.list_spans(str(tmp_path))
    assert [span.number for span in found] == [2, 10]
    assert found[0].files == ((str(tmp_path / "span-2" / "a.gz"), 1), (str(tmp_path / "span-2" / "b.gz"), 5))
    assert found[1].files == ()
    assert found[0].pattern == str(tmp_path / "span-2" / "*")
    assert [span.number for span in spans.list_spans(str(tmp_path), only=[10])] == [10]
    assert spans.span_numbers(str(tmp_path)) == [2, 10]


def test_a_missing_data_root_is_named(tmp_path):
    with pytest.raises(spans.DataRootError, match="nowhere does not exist"):
        spans.list_spans(str(tmp_path / "nowhere"))
    with pytest.raises(spans.DataRootError, match="nowhere does not exist"):
        spans.span_numbers(str(tmp_path / "nowhere"))


def test_the_pattern_of_every_span_matches_the_pattern_of_one():
    assert spans.ALL_SPANS_PATTERN == "span-*/" + spans.FILES_IN_SPAN
    assert spans.files_pattern(4) == "span-4/" + spans.FILES_IN_SPAN


def test_remote_paths_are_joined_with_slashes():
    assert spans.join("gs://bucket/data/", "span-1") == "gs://bucket/data/span-1"
    assert spans.is_remote("gs://b") and not spans.is_remote("/data")
