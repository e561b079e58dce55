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


def test_example_gen_patterns_match_exactly_the_files_listed(tmp_path):
    import fnmatch

    for name in ("span-1/a.gz", "span-1/.hidden", "span-2/b.gz", "notes/c.gz", "top.gz"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    every_file = [str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()]
    listed = sorted(path for span in spans.list_spans(str(tmp_path)) for path, _ in span.files)
    matched = sorted(str(tmp_path / f) for f in every_file if fnmatch.fnmatchcase(f, spans.ALL_SPANS_PATTERN))
    assert listed == matched
    one = sorted(str(tmp_path / f) for f in every_file if fnmatch.fnmatchcase(f, spans.files_pattern(1)))
    assert one == [path for path, _ in spans.list_spans(str(tmp_path), only=[1])[0].files]


def test_folders_the_pattern_matches_that_are_not_spans_are_named(tmp_path):
    for name in ("span-1", "span-old", "span-2a", "spans", "notes"):
        (tmp_path / name).mkdir()
    assert spans.stray_folders(str(tmp_path)) == [str(tmp_path / "span-2a"), str(tmp_path / "span-old")]


def test_remote_paths_are_joined_with_slashes():
    assert spans.join("gs://bucket/data/", "span-1") == "gs://bucket/data/span-1"
    assert spans.is_remote("gs://b") and not spans.is_remote("/data")
