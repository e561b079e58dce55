"""The rows per split ImportExampleGen records, as the Trainer reads them."""

from components.model import split_rows


def test_the_rows_of_the_splits_named_by_tfx_s_patterns_are_summed(tmp_path):
    first, second = tmp_path / "1", tmp_path / "2"
    first.mkdir(), second.mkdir()
    split_rows.write(str(first), {"train": 950_026, "eval": 49_974})
    split_rows.write(str(second), {"train": 10, "eval": 2})
    assert split_rows.read(str(first)) == {"eval": 49_974, "train": 950_026}
    assert split_rows.rows_in([f"{first}/Split-train/*"]) == 950_026
    assert split_rows.rows_in([f"{first}/Split-train/*", f"{second}/Split-eval/*"]) == 950_028


def test_anything_but_a_recorded_split_s_files_is_left_to_be_counted(tmp_path):
    (tmp_path / "1").mkdir()
    split_rows.write(str(tmp_path / "1"), {"train": 5})
    assert split_rows.rows_in([f"{tmp_path}/1/Split-eval/*"]) is None  # no such split recorded
    assert split_rows.rows_in([f"{tmp_path}/2/Split-train/*"]) is None  # no record
    assert split_rows.rows_in([f"{tmp_path}/1/Split-train/*", f"{tmp_path}/2/Split-train/*"]) is None
    assert split_rows.rows_in([f"{tmp_path}/1/Split-train/data-0.gz"]) is None  # one file, not the split
    assert split_rows.rows_in([f"{tmp_path}/1/train/*"]) is None
    assert split_rows.rows_in([str(tmp_path / "examples.gz")]) is None


def test_a_record_that_is_not_a_json_object_is_left_to_be_counted(tmp_path):
    for content in ("{not json", "[1, 2]", '{"train": "many"}'):
        (tmp_path / split_rows.FILE).write_text(content)
        assert split_rows.rows_in([f"{tmp_path}/Split-train/*"]) is None, content
