"""The drift gate's comparison of the newest span with the previous one."""

import os
import shutil

import pytest
import tensorflow as tf
import tensorflow_data_validation as tfdv

from components import drift
from pipeline import config

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _schema():
    return tfdv.load_schema_text(os.path.join(config.schema_dir(), "schema.pbtxt"))


def _spans(tmp_path, edit=None):
    """spans 15 and 16 of data/; `edit` rewrites every example of span 16."""
    shutil.copytree(os.path.join(REPO, "data", "span-15"), tmp_path / "span-15")
    target = tmp_path / "span-16"
    target.mkdir()
    source = tf.io.gfile.glob(os.path.join(REPO, "data", "span-16", "*"))
    with tf.io.TFRecordWriter(str(target / "trips.tfrecord.gz"), tf.io.TFRecordOptions(compression_type="GZIP")) as out:
        for record in tf.data.TFRecordDataset(source, compression_type="GZIP"):
            example = tf.train.Example.FromString(record.numpy())
            if edit:
                edit(example)
            out.write(example.SerializeToString())
    return str(tmp_path)


def _report(data_root):
    (previous, previous_dir), (newest, newest_dir) = drift.newest_spans(data_root)
    found = drift.drift_anomalies(drift.span_statistics(newest_dir), drift.span_statistics(previous_dir), _schema())
    return drift.describe(found, newest, previous)


def test_schema_declares_drift_thresholds_for_categorical_and_numeric_features():
    schema = _schema()
    assert tfdv.get_feature(schema, "payment_type").drift_comparator.infinity_norm.threshold > 0
    assert tfdv.get_feature(schema, "fare").drift_comparator.jensen_shannon_divergence.threshold > 0


def test_every_pair_of_consecutive_real_spans_passes():
    spans = sorted(int(name.split("-")[1]) for name in os.listdir(os.path.join(REPO, "data")) if name.startswith("span-"))
    stats = {span: drift.span_statistics(os.path.join(REPO, "data", f"span-{span}")) for span in spans}
    for previous, newest in zip(spans, spans[1:]):
        found = drift.drift_anomalies(stats[newest], stats[previous], _schema())
        assert not found.anomaly_info, (previous, newest, drift.describe(found, newest, previous))


def test_categorical_drift_is_reported_with_its_l_infinity_distance(tmp_path):
    def all_cash(example):
        example.features.feature["payment_type"].bytes_list.value[:] = [b"Cash"]

    report = _report(_spans(tmp_path, all_cash))
    assert len(report) == 1
    assert "'payment_type'" in report[0] and "L_INFTY" in report[0] and "span 15 -> 16" in report[0]


def test_numeric_drift_is_reported_with_its_jensen_shannon_divergence(tmp_path):
    def tenfold_fares(example):
        fare = example.features.feature["fare"].float_list
        fare.value[:] = [value * 10 for value in fare.value]

    report = _report(_spans(tmp_path, tenfold_fares))
    assert any("'fare'" in line and "JENSEN_SHANNON" in line for line in report), report


def test_the_two_newest_spans_are_compared_by_number_not_name(tmp_path):
    for span in (2, 10, 9):
        (tmp_path / f"span-{span}").mkdir()
    (tmp_path / "notes").mkdir()
    assert [span for span, _ in drift.newest_spans(str(tmp_path))] == [9, 10]


def test_a_span_without_examples_is_an_error_naming_it(tmp_path):
    (tmp_path / "span-3").mkdir()
    with pytest.raises(ValueError, match="span-3 holds no examples"):
        drift.span_statistics(str(tmp_path / "span-3"))
