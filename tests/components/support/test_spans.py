"""The one spans layer: which folders are spans, which files a span holds."""

import pytest

from components.support import files, spans


def test_folder_names_parse_to_span_numbers_and_sort_by_number():
    assert spans.number("span-7") == 7 and spans.number("span-7/") == 7
    assert spans.number("span-x") is None and spans.number("notes") is None and spans.number("xspan-1") is None
    assert spans.numbered(["span-10", "span-9", "span-100", "notes", "span-x"]) == [
        (9, "span-9"), (10, "span-10"), (100, "span-100")
    ]
    # What is shown (lineage): every name kept, two of one span included, spans first.
    assert spans.by_number(["span-10", "notes", "span-9", "span-009", "span-x"]) == [
        "span-009", "span-9", "span-10", "notes", "span-x"
    ]
    paths = ["span-10/a.gz", "span-9/b.gz", "span-9/a.gz"]
    assert spans.by_number(paths) == ["span-9/a.gz", "span-9/b.gz", "span-10/a.gz"]


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
    assert found[0].pattern == str(tmp_path / "span-2" / spans.FILES_IN_SPAN)
    assert [span.number for span in spans.list_spans(str(tmp_path), only=[10])] == [10]
    assert spans.span_numbers(str(tmp_path)) == [2, 10]


def test_a_missing_data_root_is_named(tmp_path):
    with pytest.raises(spans.DataRootError, match="nowhere does not exist"):
        spans.list_spans(str(tmp_path / "nowhere"))
    with pytest.raises(spans.DataRootError, match="nowhere does not exist"):
        spans.span_numbers(str(tmp_path / "nowhere"))


# Entries people leave in span folders, and whether they are data.
SPAN_FOLDER_ENTRIES = {
    "span-1/part-0.gz": True,
    "span-1/trips-2013Q1.tfrecord.gz": True,
    "span-1/.hidden.gz": False,  # hidden
    "span-1/._part-0.gz": False,  # macOS AppleDouble copy
    "span-1/.#part-0.gz": False,  # Emacs lock file
    "span-1/part-0.gz~": False,  # editor backup
    "span-1/part-0.gz.swp": False,
    "span-1/_SUCCESS": False,  # Hadoop/Spark/Beam marker
    "span-1/.DS_Store": False,
    "span-1/trips.tfrecord": False,  # uncompressed: not read as GZIP by anyone
    "span-1/notes.txt": False,
    "span-1/old/part-0.gz": False,  # a subfolder
    "span-007/part-0.gz": True,  # zero-padded span number
    "notes/c.gz": False,
    "top.gz": False,
}


def _lay_out(root, entries):
    for name in entries:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"x")


def test_the_files_of_a_span_are_its_visible_gz_files_and_everything_else_is_listed_as_ignored(tmp_path):
    _lay_out(tmp_path, SPAN_FOLDER_ENTRIES)
    found = spans.list_spans(str(tmp_path))
    assert [(span.number, span.folder_name) for span in found] == [(1, "span-1"), (7, "span-007")]
    listed = sorted(path for span in found for path, _ in span.files)
    assert listed == sorted(str(tmp_path / name) for name, data in SPAN_FOLDER_ENTRIES.items() if data)
    ignored = set(path for span in found for path in span.ignored) | set(spans.ignored_entries(str(tmp_path)))
    # Listed as the data root or a span folder holds them: a folder as itself.
    expected = {
        str(tmp_path / name) for name, data in SPAN_FOLDER_ENTRIES.items()
        if not data and name not in ("span-1/old/part-0.gz", "notes/c.gz")
    } | {str(tmp_path / "span-1" / "old"), str(tmp_path / "notes")}
    assert ignored == expected


def test_example_gen_reads_exactly_the_files_listed(tmp_path):
    """Beam's glob (what ImportExampleGen reads) and TensorFlow's (what its driver
    fingerprints) match the files `list_spans` lists, and nothing else."""
    import tensorflow as tf
    from apache_beam.io.filesystems import FileSystems

    _lay_out(tmp_path, SPAN_FOLDER_ENTRIES)
    found = spans.list_spans(str(tmp_path))
    listed = sorted(path for span in found for path, _ in span.files)

    def beam(pattern):
        return sorted(m.path for m in FileSystems.match([str(tmp_path / pattern)])[0].metadata_list)

    assert beam(spans.ALL_SPANS_PATTERN) == listed
    assert sorted(tf.io.gfile.glob(str(tmp_path / spans.ALL_SPANS_PATTERN))) == listed
    for span in found:
        assert beam(spans.relative_pattern(span.folder_name)) == [path for path, _ in span.files]


def test_two_folders_of_one_span_number_are_refused_naming_both(tmp_path):
    for name in ("span-7", "span-007", "span-8"):
        (tmp_path / name).mkdir()
    with pytest.raises(spans.DataRootError, match="span-007 and span-7 are both span 7"):
        spans.list_spans(str(tmp_path))


def test_folders_the_pattern_matches_that_are_not_spans_are_named(tmp_path):
    for name in ("span-1", "span-old", "span-2a", "spans", "notes"):
        (tmp_path / name).mkdir()
    assert spans.stray_folders(str(tmp_path)) == [str(tmp_path / "span-2a"), str(tmp_path / "span-old")]


def test_span_numbers_round_trip_through_their_text_in_order():
    assert spans.format_numbers([3, 10, 12]) == "3,10,12"
    assert spans.parse_numbers(spans.format_numbers([12, 3, 10])) == [12, 3, 10]
    assert spans.parse_numbers(spans.format_numbers([])) == []


def test_remote_paths_are_joined_with_slashes():
    assert files.join("gs://bucket/data/", "span-1") == "gs://bucket/data/span-1"
    assert files.is_remote("gs://b") and not files.is_remote("/data")


def test_digests_follow_the_bytes_and_are_remembered_until_a_file_is_rewritten(tmp_path, monkeypatch):
    cache = str(tmp_path / "out" / "digests.json")
    data = tmp_path / "a.gz"
    data.write_bytes(b"bytes")
    with spans.remembered_digests(cache):
        first = spans.file_digest(str(data))
    reads = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda path, *a, **k: reads.append(path) or real_open(path, *a, **k))
    monkeypatch.setattr(spans, "_DIGESTS", {})  # a new process
    with spans.remembered_digests(cache):
        assert spans.file_digest(str(data)) == first
    assert str(data) not in reads  # remembered, not read again
    data.unlink()
    data.write_bytes(b"other")
    with spans.remembered_digests(cache):
        assert spans.file_digest(str(data)) != first
    assert str(data) in reads


def test_a_data_root_whose_path_globs_cannot_quote_is_refused_naming_why(tmp_path):
    root = tmp_path / "taxi [prod]"
    (root / "span-1").mkdir(parents=True)
    (root / "span-1" / "a.gz").write_bytes(b"x")
    with pytest.raises(spans.DataRootError, match=r"has \[ \] in its path: ExampleGen finds span files with glob"):
        spans.list_spans(str(root))
    (tmp_path / "taxi prod").symlink_to(root)
    assert [span.number for span in spans.list_spans(str(tmp_path / "taxi prod"))] == [1]
