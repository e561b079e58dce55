"""The input pipeline: signature, raw examples through the Transform layer, batching."""

import os

import numpy as np
import pytest
import tensorflow as tf

from components.model import features
from components.model.trainer import data, settings


def test_signature_has_unknown_batch_dimension_and_no_label_among_features(synthetic):
    feature_specs, label_spec = data.input_signature(synthetic.feature_spec())
    assert features.transformed_label_key() not in feature_specs
    assert sorted(feature_specs) == sorted(f.transformed_name for f in features.FEATURES)
    assert all(spec.shape.as_list() == [None] for spec in feature_specs.values())
    assert label_spec.shape.as_list() == [None]


def test_transformed_rows_hold_every_example_in_order_with_the_documented_ids(
    examples_file, transform_output, rows
):
    columns, labels = data.transformed_rows([examples_file], data.transform_fn(transform_output))
    assert data.count_rows((columns, labels)) == len(rows)
    assert labels.numpy().tolist() == [row[features.LABEL_KEY][0] for row in rows]
    assert sorted(columns) == sorted(f.transformed_name for f in features.FEATURES)
    # Transform was analyzed on these very rows: z-scores average to 0.
    assert float(tf.reduce_mean(columns["fare_xf"])) == pytest.approx(0.0, abs=1e-5)
    company = features.FEATURES_BY_NAME["company"]
    missing = [not row["company"] for row in rows]
    ids = columns["company_xf"].numpy()
    assert (ids[missing] == company.missing_id).all()
    assert (ids[~np.array(missing)] < 2).all()  # two companies in the vocabulary
    area = features.FEATURES_BY_NAME["dropoff_community_area"]
    expected = [row["dropoff_community_area"][0] - area.low if row["dropoff_community_area"] else area.missing_id
                for row in rows]
    assert columns["dropoff_community_area_xf"].numpy().tolist() == expected


def test_no_matching_file_or_no_example_is_a_clear_error(tmp_path, transform_output):
    with pytest.raises(FileNotFoundError, match="no examples match"):
        data.list_files([str(tmp_path / "missing-*")])
    empty = str(tmp_path / "empty.tfrecord.gz")
    with tf.io.TFRecordWriter(empty, options="GZIP"):
        pass
    with pytest.raises(ValueError, match="no examples in"):
        data.transformed_rows([empty], data.transform_fn(transform_output))


def test_make_dataset_batches_the_transformed_rows(examples_file, transform_output, rows):
    dataset = data.make_dataset([examples_file], data.transform_fn(transform_output), 16)
    assert [int(labels.shape[0]) for _, labels in dataset] == [16, 16, len(rows) - 32]


def _rows(count):
    columns = {"x": tf.range(count, dtype=tf.float32), "y": tf.range(count, dtype=tf.int64) * 10}
    return columns, tf.range(count, dtype=tf.int64)


def test_batched_rows_keep_features_and_labels_together_in_order_without_a_seed():
    batches = list(data.batched(_rows(10), 4))
    assert [int(labels.shape[0]) for _, labels in batches] == [4, 4, 2]
    assert np.concatenate([labels for _, labels in batches]).tolist() == list(range(10))
    for batch_features, labels in batches:
        assert (batch_features["x"].numpy() == labels.numpy()).all()
        assert (batch_features["y"].numpy() == labels.numpy() * 10).all()


def _labels_in_order(dataset):
    return np.concatenate([labels for _, labels in dataset]).tolist()


def test_shuffled_batches_are_a_permutation_drawn_from_the_seed_alone():
    first = _labels_in_order(data.batched(_rows(100), 16, shuffle_seed=3))
    assert sorted(first) == list(range(100)) and first != list(range(100))
    assert _labels_in_order(data.batched(_rows(100), 16, shuffle_seed=4)) != first
    dataset = data.batched(_rows(100), 16, shuffle_seed=3)
    assert _labels_in_order(dataset) == _labels_in_order(dataset) == first
    # TensorFlow's global seed (set by the Trainer, and by anything else in the process)
    # plays no part: a resumed Trainer sees the batches an uninterrupted one saw.
    tf.random.set_seed(1)
    assert _labels_in_order(data.batched(_rows(100), 16, shuffle_seed=3)) == first
    tf.random.set_seed(2)
    assert _labels_in_order(data.batched(_rows(100), 16, shuffle_seed=3)) == first
    for batch_features, labels in data.batched(_rows(100), 16, shuffle_seed=3):
        assert (batch_features["y"].numpy() == labels.numpy() * 10).all()


def test_each_epoch_s_batches_come_from_its_seed_and_skip_tf_data_s_rewrites():
    rows = _rows(100)
    epochs = data.shuffled(rows, 16)
    datasets = [epochs(seed) for seed in (3, 4, 5)]
    orders = [_labels_in_order(dataset) for dataset in datasets]
    assert orders == [_labels_in_order(data.batched(rows, 16, shuffle_seed=seed)) for seed in (3, 4, 5)]
    assert len({tuple(order) for order in orders}) == 3
    # The rewrites would serialize the rows at every epoch's iterator (`_without_rewrites`).
    for dataset in datasets + [data.batched(rows, 16)]:
        assert dataset.options().experimental_optimization.apply_default_optimizations is False
        assert dataset.options().autotune.enabled is False


@pytest.mark.parametrize("rows, batch_size, sizes", [(100, 16, [16] * 6 + [4]), (64, 16, [16] * 4), (10, 16, [10])])
def test_shuffled_batches_hold_every_row_once_whatever_the_last_batch(rows, batch_size, sizes):
    batches = list(data.batched(_rows(rows), batch_size, shuffle_seed=5))
    assert [int(labels.shape[0]) for _, labels in batches] == sizes
    assert sorted(np.concatenate([labels for _, labels in batches]).tolist()) == list(range(rows))
    for batch_features, labels in batches:
        assert (batch_features["x"].numpy() == labels.numpy()).all()
        assert (batch_features["y"].numpy() == labels.numpy() * 10).all()


def test_small_training_sets_get_smaller_batches_not_fewer_steps():
    config = settings.TrainConfig(batch_size=1024, min_steps_per_epoch=10)
    assert data.effective_batch_size(config, 12_000) == 1024
    assert data.effective_batch_size(config, 430) == 43
    assert data.effective_batch_size(config, 100) == 32
    assert data.effective_batch_size(settings.TrainConfig(batch_size=1024, min_steps_per_epoch=0), 100) == 1024


def _rows_of(dataset):
    """Every (label, fare_xf) pair the dataset gives, sorted: the rows, whatever the order."""
    pairs = []
    for batch_features, labels in dataset:
        pairs += zip(labels.numpy().tolist(), batch_features["fare_xf"].numpy().round(5).tolist())
    return sorted(pairs)


def _cache(tmp_path, files, transform_output, name="cache"):
    cache_dir = str(tmp_path / name)
    assert data.write_cache(files, data.transform_fn(transform_output), cache_dir)
    return cache_dir


def test_the_cache_holds_the_rows_the_in_memory_path_holds(tmp_path, examples_file, transform_output, monkeypatch):
    monkeypatch.setattr(data, "_TRANSFORM_BATCH", 2)  # 20 chunks over 16 shards: read back in order
    in_memory = data.make_dataset([examples_file], data.transform_fn(transform_output), 8)
    cached = data.from_cache(_cache(tmp_path, [examples_file], transform_output), 8)
    assert _rows_of(cached) == _rows_of(in_memory)
    assert [int(labels.shape[0]) for _, labels in cached] == [8] * 5  # 40 rows, in file order
    in_order = [b["fare_xf"].numpy().tolist() for b, _ in in_memory]
    assert [b["fare_xf"].numpy().tolist() for b, _ in cached] == in_order


def test_cached_shuffles_are_reproducible_from_their_seed_and_differ_between_seeds(
    tmp_path, examples_file, transform_output
):
    cache_dir = _cache(tmp_path, [examples_file], transform_output)

    def order(seed):
        return [v for b, _ in data.from_cache(cache_dir, 8, shuffle_seed=seed)
                for v in b["fare_xf"].numpy().round(5).tolist()]

    assert order(1) == order(1)
    assert order(1) != order(2)
    assert sorted(order(1)) == sorted(order(2))
    assert [int(labels.shape[0]) for _, labels in data.from_cache(cache_dir, 16, shuffle_seed=1)] == [16, 16, 8]


def test_a_complete_cache_is_kept_and_one_cut_short_is_written_again(tmp_path, examples_file, transform_output):
    transform = data.transform_fn(transform_output)
    cache_dir = _cache(tmp_path, [examples_file], transform_output)
    assert not data.write_cache([examples_file], transform, cache_dir)  # complete: kept as it is
    os.remove(os.path.join(cache_dir, data._CACHE_COMPLETE))  # as a kill before the end leaves it
    with pytest.raises(FileNotFoundError, match="no complete transformed cache"):
        data.from_cache(cache_dir, 8)
    with open(os.path.join(cache_dir, "left-by-the-kill"), "w"):
        pass
    assert data.write_cache([examples_file], transform, cache_dir)
    assert not os.path.exists(os.path.join(cache_dir, "left-by-the-kill"))
    assert sum(int(labels.shape[0]) for _, labels in data.from_cache(cache_dir, 8)) == 40


def test_records_are_counted_without_parsing(examples_file, tmp_path):
    assert data.count_records([examples_file]) == 40
    with tf.io.TFRecordWriter(str(tmp_path / "more.gz"), "GZIP") as writer:
        writer.write(b"not an example")
    assert data.count_records([examples_file, str(tmp_path / "more.gz")]) == 41


def test_a_cache_killed_while_it_was_deleted_is_written_again(tmp_path, examples_file, transform_output, monkeypatch):
    transform = data.transform_fn(transform_output)
    cache_dir = _cache(tmp_path, [examples_file], transform_output)

    def killed(path):
        raise KeyboardInterrupt("killed while deleting")

    monkeypatch.setattr(tf.io.gfile, "rmtree", killed)
    with pytest.raises(KeyboardInterrupt):
        data.delete_cache(cache_dir)
    monkeypatch.undo()
    assert os.listdir(cache_dir)  # the shards are still there, the marker is not
    assert data.write_cache([examples_file], transform, cache_dir)
    data.delete_cache(cache_dir)
    assert not os.path.exists(cache_dir)


def test_cached_batches_mix_the_files(tmp_path, rows, to_example, transform_output, monkeypatch):
    """Files hold one span each: a shuffled epoch must not give one file's rows, then the
    next's, even when the files are larger than a chunk and the buffer is small."""
    monkeypatch.setattr(data, "_TRANSFORM_BATCH", 4)
    monkeypatch.setattr(data, "_MIXED_ROWS", 16)
    monkeypatch.setattr(data, "CACHE_SHUFFLE_CHUNKS", 4)
    paths = []
    for name, label in (("a", 0), ("b", 1)):
        path = str(tmp_path / f"{name}.tfrecord.gz")
        with tf.io.TFRecordWriter(path, "GZIP") as writer:
            for row in rows:
                writer.write(to_example({**row, features.LABEL_KEY: [label]}))
        paths.append(path)
    batches = list(data.from_cache(_cache(tmp_path, paths, transform_output), 16, shuffle_seed=3))
    assert sum(int(labels.shape[0]) for _, labels in batches) == 2 * len(rows)
    mixed = [set(labels.numpy().tolist()) == {0, 1} for _, labels in batches]
    assert sum(mixed) >= len(batches) // 2, mixed

