"""Warm start from an exported model: same weights when compatible, reasons when not."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft

from components import features
from components.trainer import export, model as model_lib, warm_start


@pytest.fixture(scope="module")
def base_model_dir(tmp_path_factory, transform_output_dir):
    tf.keras.utils.set_random_seed(11)
    model = model_lib.build_model()
    path = str(tmp_path_factory.mktemp("base") / "1")
    export.export_serving_model(model, export.TransformGraph(tft.TFTransformOutput(transform_output_dir)), path)
    return path, [v.numpy() for v in model.variables]


def test_a_compatible_model_starts_from_the_base_weights(base_model_dir, transform_output):
    path, weights = base_model_dir
    tf.keras.utils.set_random_seed(12)
    model = model_lib.build_model()
    started = warm_start.warm_start(model, path, transform_output)
    assert started.used, started.reason
    for variable, expected in zip(model.variables, weights):
        np.testing.assert_array_equal(variable.numpy(), expected)


def test_a_changed_architecture_trains_from_scratch_and_says_why(base_model_dir, transform_output):
    path, _ = base_model_dir
    model = model_lib.build_model(model_lib.ModelConfig(hidden_units=(16,)))
    before = [v.numpy() for v in model.variables]
    started = warm_start.warm_start(model, path, transform_output)
    assert not started.used
    assert "variables changed" in started.reason
    for variable, value in zip(model.variables, before):
        np.testing.assert_array_equal(variable.numpy(), value)


def test_an_unreadable_base_model_trains_from_scratch(tmp_path, transform_output):
    started = warm_start.warm_start(model_lib.build_model(), str(tmp_path), transform_output)
    assert not started.used and "cannot read" in started.reason


def test_vocabulary_ids_are_remapped_by_token():
    company = features.FEATURES_BY_NAME["company"]
    mapping = warm_start._row_map(company, old=[b"a", b"b", b"c"], new=[b"c", b"a", b"z"])
    assert list(mapping[:3]) == [2, 0, -1]  # z is new: it keeps its fresh row
    assert mapping[3] == 3  # OOV to OOV
    assert mapping[company.size + 1] == company.size + 1  # missing to missing
