"""Warm start from an exported model: same weights when compatible, reasons when not."""

import shutil

import numpy as np
import pytest

from components import compat
from components.compat import keras
from components.model import features
from components.model.trainer import export, warm_start
from components.model.trainer import model as model_lib


@pytest.fixture(scope="module")
def base_model_dir(tmp_path_factory, transform_output):
    keras.utils.set_random_seed(11)
    model = model_lib.build_model()
    path = str(tmp_path_factory.mktemp("base") / "1")
    export.export_serving_model(model, transform_output, path)
    return path, [v.numpy() for v in model.variables]


def test_a_compatible_model_starts_from_the_base_weights(base_model_dir, transform_output):
    path, weights = base_model_dir
    keras.utils.set_random_seed(12)
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
    assert (mapping[4 : company.size + 1] == -1).all()  # ids no token had


def test_the_oov_row_follows_a_vocabulary_that_grew():
    company = features.FEATURES_BY_NAME["company"]
    mapping = warm_start._row_map(company, old=[b"a"], new=[b"a", b"b"])
    assert list(mapping[:3]) == [0, -1, 1]  # OOV moved from id 1 to id 2
    assert mapping[company.missing_id] == company.missing_id
    assert len(mapping) == company.cardinality


def test_id_table_rows_are_remapped_when_a_vocabulary_changed(base_model_dir, transform_output, tmp_path):
    """The base model's company vocabulary lists its tokens in the other order: after warm
    start each token's rows of the id table are the ones it had in the base model."""
    path, weights = base_model_dir
    changed = tmp_path / "base"
    shutil.copytree(path, changed)
    company = features.FEATURES_BY_NAME["company"]
    vocabulary = changed / "assets" / company.vocabulary_name
    tokens = vocabulary.read_bytes().splitlines()
    assert len(tokens) == 2
    vocabulary.write_bytes(b"\n".join(reversed(tokens)) + b"\n")

    model = model_lib.build_model()
    started = warm_start.warm_start(model, str(changed), transform_output)
    assert started.used and started.remapped_tokens == 2, started.reason
    offset = model_lib.table_offsets()[company.name]
    by_name = {compat.variable_key(v): w for v, w in zip(model.variables, weights)}
    for layer in model_lib.ID_TABLE_LAYERS:
        table = model.get_layer(layer).embeddings
        before = by_name[compat.variable_key(table)]
        after = table.numpy()
        np.testing.assert_array_equal(after[offset + 0], before[offset + 1])
        np.testing.assert_array_equal(after[offset + 1], before[offset + 0])
        np.testing.assert_array_equal(after[offset + 2], before[offset + 2])  # OOV
        np.testing.assert_array_equal(after[offset + company.missing_id], before[offset + company.missing_id])
        others = np.delete(np.arange(len(after)), offset + np.arange(company.cardinality))
        np.testing.assert_array_equal(after[others], before[others])
