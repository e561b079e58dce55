"""Fixtures shared by the tests of the data gate and its per-span statistics."""

import glob

import pytest
import tensorflow as tf


@pytest.fixture
def two_spans(tmp_path, repo, copy_spans):
    """`two_spans(edit)`: spans 15 and 16 of data/ under a data root; `edit` rewrites every
    example of span 16."""

    def make(edit=None):
        copy_spans(tmp_path / "data", (15,))
        target = tmp_path / "data" / "span-16"
        target.mkdir()
        source = glob.glob(str(repo / "data" / "span-16" / "*"))
        options = tf.io.TFRecordOptions(compression_type="GZIP")
        with tf.io.TFRecordWriter(str(target / "trips.tfrecord.gz"), options) as out:
            for record in tf.data.TFRecordDataset(source, compression_type="GZIP"):
                example = tf.train.Example.FromString(record.numpy())
                if edit:
                    edit(example)
                out.write(example.SerializeToString())
        return str(tmp_path / "data")

    return make
