"""`taxi-pipeline make-data --rows N`: synthetic spans, deterministic, consistent labels."""

import csv
import os

import pytest
import tensorflow as tf

from components.model import features
from pipeline.data import synthetic


def _records(folder):
    files = sorted(tf.io.gfile.glob(os.path.join(str(folder), "*.gz")))
    return [r.numpy() for r in tf.data.TFRecordDataset(files, "GZIP")]


def _config(out, **overrides):
    return synthetic.SyntheticConfig(**{"rows": 1003, "out_dir": str(out), "spans": 3, "rows_per_file": 200,
                                        **overrides})


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("synthetic")
    counts = synthetic.write(_config(out))
    return out, counts


def test_rows_are_split_into_spans_of_several_files(written):
    out, counts = written
    assert counts == {1: 335, 2: 334, 3: 334}
    assert sorted(os.listdir(out)) == [synthetic.README_FILE, "span-1", "span-2", "span-3"]
    assert len(os.listdir(out / "span-1")) == 2  # 200 + 135 rows
    assert [len(_records(out / f"span-{n}")) for n in (1, 2, 3)] == [335, 334, 334]
    assert "not for judging a model" in (out / synthetic.README_FILE).read_text()


def test_spans_keep_the_source_time_order(written):
    out, _ = written

    def timestamps(span):
        return [tf.train.Example.FromString(r).features.feature["trip_start_timestamp"].int64_list.value[0]
                for r in _records(out / f"span-{span}")]

    assert max(timestamps(1)) <= min(timestamps(2)) and max(timestamps(2)) <= min(timestamps(3))


def test_the_bytes_parse_as_complete_examples_of_the_feature_spec(written):
    out, _ = written
    parsed = tf.io.parse_example(_records(out / "span-2"), features.raw_feature_spec(include_label=True))
    assert parsed[features.LABEL_KEY].shape == (334, 1)
    assert set(parsed[features.LABEL_KEY].numpy().ravel()) <= {0, 1}
    assert float(tf.reduce_min(parsed["fare"])) >= 0


def test_the_same_seed_writes_the_same_bytes_and_another_seed_others(written, tmp_path):
    out, _ = written
    synthetic.write(_config(tmp_path / "again"))
    synthetic.write(_config(tmp_path / "other", seed=1))
    assert _records(tmp_path / "again" / "span-3") == _records(out / "span-3")
    assert _records(tmp_path / "other" / "span-3") != _records(out / "span-3")


def test_the_label_is_recomputed_from_the_noisy_fare_and_tip(written, tmp_path):
    """The CSV of the same rows carries the tip: its rows give each example's label and
    noisy fare."""
    out, _ = written
    csv_path = tmp_path / "rows.csv"
    assert synthetic.write_csv(_config(out), str(csv_path)) == 1003
    with open(csv_path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    examples = [tf.train.Example.FromString(r) for n in (1, 2, 3) for r in _records(out / f"span-{n}")]
    for row, example in zip(rows, examples):
        feature = example.features.feature
        assert feature["fare"].float_list.value[0] == pytest.approx(float(row["fare"]), rel=1e-6)
        big_tip = float(row["tips"]) > features.BIG_TIP_FRACTION * float(row["fare"])
        assert feature[features.LABEL_KEY].int64_list.value[0] == int(big_tip)
    assert 0.2 < sum(e.features.feature[features.LABEL_KEY].int64_list.value[0] for e in examples) / 1003 < 0.8


def test_noise_changes_the_numeric_fields_by_a_few_percent(written):
    out, _ = written
    fares = [tf.train.Example.FromString(r).features.feature["fare"].float_list.value[0]
             for r in _records(out / "span-1")]
    assert len(set(fares)) > 300  # drawn with replacement from ~1,900 rows, each with its own noise


@pytest.mark.parametrize("rows, spans, message", [(2, 3, "at least the number of spans"), (10, 0, "at least 1")])
def test_impossible_sizes_are_refused(tmp_path, rows, spans, message):
    with pytest.raises(ValueError, match=message):
        synthetic.SyntheticConfig(rows=rows, out_dir=str(tmp_path), spans=spans)
