"""The custom loop on small synthetic transformed data."""

import numpy as np
import pytest
import tensorflow as tf

from components import features
from components.trainer import model as model_lib
from components.trainer import train_loop

N_EXAMPLES, BATCH = 50, 16  # the last batch of each epoch holds 2 examples


def _feature_spec():
    spec = {
        f.transformed_name: tf.io.FixedLenFeature([], tf.float32 if f.kind is features.Kind.NUMERIC else tf.int64)
        for f in features.FEATURES
    }
    spec[features.transformed_label_key()] = tf.io.FixedLenFeature([], tf.int64)
    return spec


def _dataset(seed=0, poison=False):
    rng = np.random.default_rng(seed)
    columns = {}
    for f in features.FEATURES:
        if f.kind is features.Kind.NUMERIC:
            columns[f.transformed_name] = rng.normal(size=N_EXAMPLES).astype(np.float32)
        else:
            columns[f.transformed_name] = rng.integers(0, f.cardinality, size=N_EXAMPLES).astype(np.int64)
    if poison:
        columns["fare_xf"][0] = np.nan
    labels = (columns["fare_xf"] > 0).astype(np.int64)
    return tf.data.Dataset.from_tensor_slices((columns, labels)).batch(BATCH)


@pytest.fixture
def signature():
    return train_loop.input_signature(_feature_spec())


def test_signature_has_unknown_batch_dimension_and_no_label_among_features(signature):
    feature_specs, label_spec = signature
    assert features.transformed_label_key() not in feature_specs
    assert all(spec.shape.as_list() == [None] for spec in feature_specs.values())
    assert label_spec.shape.as_list() == [None]


def test_model_returns_one_logit_per_example():
    model = model_lib.build_model()
    batch, _ = next(iter(_dataset()))
    assert model(batch).shape == (BATCH,)


def test_train_step_lowers_the_loss(signature):
    model = model_lib.build_model()
    optimizer = tf.keras.optimizers.Adam(0.01, jit_compile=False)
    optimizer.build(model.trainable_variables)
    steps = train_loop.make_steps(model, optimizer, signature)
    batch, labels = next(iter(_dataset()))
    first = float(steps.train_step(batch, labels))
    for _ in range(30):
        last = float(steps.train_step(batch, labels))
    assert last < first * 0.7
    assert int(steps.step_counter) == 31


def test_one_trace_per_function_over_epochs_with_a_partial_last_batch(signature, tmp_path):
    config = train_loop.TrainConfig(epochs=3, batch_size=BATCH, early_stopping_patience=0, log_every_steps=2)
    result = train_loop.train(model_lib.build_model(), _dataset(), _dataset(1), signature, config, str(tmp_path))
    assert result.epochs_run == 3
    assert result.steps == 3 * 4
    assert result.trace_counts == {"train_step": 1, "eval_step": 1}


def test_restart_resumes_from_the_last_epoch_checkpoint(signature, tmp_path):
    first = train_loop.TrainConfig(epochs=2, batch_size=BATCH, early_stopping_patience=0)
    train_loop.train(model_lib.build_model(), _dataset(), _dataset(1), signature, first, str(tmp_path))
    more = train_loop.TrainConfig(epochs=3, batch_size=BATCH, early_stopping_patience=0)
    result = train_loop.train(model_lib.build_model(), _dataset(), _dataset(1), signature, more, str(tmp_path))
    assert result.epochs_run == 1
    assert result.steps == 3 * 4


def test_nan_loss_stops_training_with_a_clear_error(signature, tmp_path):
    config = train_loop.TrainConfig(epochs=1, batch_size=BATCH)
    with pytest.raises(train_loop.TrainingDivergedError, match="NaN or Inf"):
        train_loop.train(model_lib.build_model(), _dataset(poison=True), _dataset(1), signature, config, str(tmp_path))


def test_unknown_training_setting_is_rejected():
    with pytest.raises(ValueError, match="epoch"):
        train_loop.TrainConfig.from_custom_config({"train": {"epoch": 3}})
    assert train_loop.TrainConfig.from_custom_config({"train": {"epochs": 3}}).epochs == 3
