"""The CSV converter: missing values, label, spans and reproducibility."""

import csv
import hashlib
import os

import pytest
import tensorflow as tf

from components.model import features
from pipeline.data import dataset

HEADER = [
    "pickup_community_area", "fare", "trip_start_month", "trip_start_hour", "trip_start_day",
    "trip_start_timestamp", "pickup_latitude", "pickup_longitude", "dropoff_latitude", "dropoff_longitude",
    "trip_miles", "pickup_census_tract", "dropoff_census_tract", "payment_type", "company", "trip_seconds",
    "dropoff_community_area", "tips",
]
ROW = dict(zip(HEADER, [
    "8", "10.0", "5", "19", "6", "1400269500", "41.9", "-87.6", "", "", "2.5", "", "17031081500",
    "Credit Card", "", "600", "", "3.0",
]))


def test_missing_values_stay_missing():
    example = dataset.row_to_example(ROW)
    present = set(example.features.feature)
    assert "dropoff_latitude" not in present
    assert "company" not in present
    assert example.features.feature["fare"].float_list.value == [10.0]
    assert example.features.feature["dropoff_census_tract"].int64_list.value == [17031081500]


def test_label_is_tip_above_a_fifth_of_the_fare_and_tips_are_dropped():
    big = dataset.row_to_example(ROW)
    small = dataset.row_to_example({**ROW, "tips": "1.0"})
    assert big.features.feature[features.LABEL_KEY].int64_list.value == [1]
    assert small.features.feature[features.LABEL_KEY].int64_list.value == [0]
    assert "tips" not in big.features.feature


def test_row_without_fare_has_no_label_and_is_skipped():
    assert dataset.row_to_example({**ROW, "fare": ""}) is None


def test_non_numeric_value_names_the_column():
    with pytest.raises(dataset.DataError, match="trip_miles"):
        dataset.row_to_example({**ROW, "trip_miles": "far"})


@pytest.mark.parametrize("timestamp, span", [(1356998400, 1), (1364774399, 1), (1364774400, 2), (1483142400, 16)])
def test_spans_are_calendar_quarters_from_2013(timestamp, span):
    assert dataset.span_of(timestamp) == span


def _write_csv(path, rows):
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=HEADER)
        writer.writeheader()
        writer.writerows(rows)


def _digest(folder):
    digest = hashlib.sha256()
    for root, _, files in sorted(os.walk(folder)):
        for name in sorted(files):
            with open(os.path.join(root, name), "rb") as handle:
                digest.update(name.encode() + handle.read())
    return digest.hexdigest()


def test_conversion_is_reproducible_and_split_by_span(tmp_path):
    rows = [ROW, {**ROW, "trip_start_timestamp": "1356998400"}, {**ROW, "fare": ""}]
    _write_csv(tmp_path / "in.csv", rows)
    report = dataset.convert(str(tmp_path / "in.csv"), str(tmp_path / "a"))
    dataset.convert(str(tmp_path / "in.csv"), str(tmp_path / "b"))
    assert report.examples_per_span == {1: 1, 6: 1}
    assert report.rows_without_label == 1
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    records = list(tf.data.TFRecordDataset(
        tf.io.gfile.glob(str(tmp_path / "a" / "span-6" / "*")), compression_type="GZIP"))
    assert len(records) == 1


def test_csv_missing_a_column_is_rejected(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("fare,tips\n1,2\n")
    with pytest.raises(dataset.DataError, match="missing columns"):
        dataset.convert(str(path), str(tmp_path / "out"))


def test_a_failure_while_swapping_the_spans_in_leaves_the_old_data_as_it_was(tmp_path, monkeypatch):
    """The swap is renames only; a rename failing halfway puts every old span back."""
    rows = [ROW, {**ROW, "trip_start_timestamp": "1356998400"}]
    _write_csv(tmp_path / "in.csv", rows)
    out = tmp_path / "data"
    dataset.convert(str(tmp_path / "in.csv"), str(out))
    (out / "README.md").write_text("kept")
    before = _digest(out)
    _write_csv(tmp_path / "new.csv", [{**ROW, "trip_start_timestamp": "1420070400"}])  # another span

    real_replace = os.replace

    def failing_replace(source, target):
        if os.path.dirname(str(target)) == str(out) and os.path.basename(str(target)) == "span-9":
            raise OSError("disk full")  # the new span cannot be moved into place
        return real_replace(source, target)

    monkeypatch.setattr(dataset.os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        dataset.convert(str(tmp_path / "new.csv"), str(out))
    monkeypatch.undo()
    assert _digest(out) == before
    assert sorted(os.listdir(out)) == ["README.md", "span-1", "span-6"]


def test_a_conversion_replaces_the_spans_and_leaves_nothing_else_behind(tmp_path):
    _write_csv(tmp_path / "in.csv", [ROW, {**ROW, "trip_start_timestamp": "1356998400"}])
    _write_csv(tmp_path / "new.csv", [{**ROW, "trip_start_timestamp": "1420070400"}])
    out = tmp_path / "data"
    dataset.convert(str(tmp_path / "in.csv"), str(out))
    dataset.convert(str(tmp_path / "new.csv"), str(out))
    assert sorted(os.listdir(out)) == ["span-9"]


def test_requests_are_the_examples_in_span_order_without_their_label(tmp_path):
    fares = {"1356998400": "4.0", "1400269500": "10.0", "1483142400": "7.0"}  # spans 1, 6, 16
    _write_csv(tmp_path / "in.csv", [{**ROW, "trip_start_timestamp": t, "fare": f} for t, f in fares.items()])
    dataset.convert(str(tmp_path / "in.csv"), str(tmp_path / "data"))
    found = [tf.train.Example.FromString(r) for r in dataset.requests(str(tmp_path / "data"))]
    assert [e.features.feature["fare"].float_list.value[0] for e in found] == [4.0, 10.0, 7.0]
    assert all(features.LABEL_KEY not in e.features.feature for e in found)
    assert [e.features.feature["fare"].float_list.value[0] for e in
            map(tf.train.Example.FromString, dataset.requests(str(tmp_path / "data"), 2))] == [4.0, 10.0]
