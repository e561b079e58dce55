"""Warm start from a model exported on either stack, whichever stack the suite runs on.

`exported_by/<stack>/` holds what warm start reads of a model that `taxi-pipeline run`
pushed on that stack (its `variables/` and `assets/`; see the README there): Keras 2
names its variables `<layer>/<variable>:0`, Keras 3 `<layer>/<variable>` (`path`). Each
must warm-start the model of this stack, matched by name.
"""

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from components import compat
from components.model import features
from components.model.trainer import model as model_lib
from components.model.trainer import warm_start

EXPORTED_BY = Path(__file__).parent / "exported_by"


@pytest.mark.parametrize("stack", ["tfx-1.16", "tfx-1.21"])
def test_a_model_exported_on_either_stack_warm_starts_this_stack(stack, transform_output):
    base = EXPORTED_BY / stack
    saved = warm_start.saved_variables(str(base))
    model = model_lib.build_model()
    started = warm_start.warm_start(model, str(base), transform_output)
    assert started.used, started.reason
    assert {compat.variable_key(v) for v in model.variables} == set(saved)
    for variable in model.variables:
        key = compat.variable_key(variable)
        if key.split("/")[0] in model_lib.ID_TABLE_LAYERS:
            continue  # rows remapped by token against this test's vocabularies
        np.testing.assert_array_equal(np.asarray(variable), saved[key], err_msg=key)


def test_the_two_stacks_export_the_same_variables_under_the_same_names():
    by_stack = {stack: warm_start.saved_variables(str(EXPORTED_BY / stack)) for stack in ("tfx-1.16", "tfx-1.21")}
    shapes = [{key: value.shape for key, value in saved.items()} for saved in by_stack.values()]
    assert shapes[0] == shapes[1]
    assert "hidden_0/kernel" in shapes[0]


def test_a_base_model_without_readable_variables_is_refused_with_the_reason(tmp_path, transform_output):
    (tmp_path / "variables").mkdir()
    (tmp_path / "variables" / "variables.index").write_bytes(b"not a checkpoint")
    started = warm_start.warm_start(model_lib.build_model(), str(tmp_path), transform_output)
    assert not started.used and "cannot read" in started.reason
    assert tf.io.gfile.exists(str(tmp_path / "variables" / "variables.index"))


def _save_with_vocabularies(module: tf.Module, path: Path, transform_output) -> None:
    """`module` as a SavedModel in `path`, with the vocabularies warm start reads in its assets."""
    tf.saved_model.save(module, str(path))
    (path / "assets").mkdir(exist_ok=True)
    for feature in features.FEATURES:
        if feature.kind is features.Kind.CATEGORICAL:
            tf.io.gfile.copy(transform_output.vocabulary_file_by_name(feature.vocabulary_name),
                             str(path / "assets" / feature.vocabulary_name))


def test_a_model_exported_before_variable_names_were_saved_warm_starts_by_its_variable_names(
    tmp_path, transform_output
):
    """Exports made before `model_variable_keys` existed (TFX 1.16 only) track the model's
    variables alone; Keras 2 named them `<layer>/<variable>:0`, which warm start reads."""
    keras_model = model_lib.build_model()
    module = tf.Module()
    module.model_variables = [
        tf.Variable(np.asarray(v) + 1.0, name=compat.variable_key(v)) for v in keras_model.variables
    ]
    _save_with_vocabularies(module, tmp_path, transform_output)
    started = warm_start.warm_start(keras_model, str(tmp_path), transform_output)
    assert started.used, started.reason
    for variable, saved in zip(keras_model.variables, module.model_variables):
        np.testing.assert_array_equal(np.asarray(variable), saved.numpy())


def test_variables_are_matched_by_name_not_by_position(tmp_path, transform_output):
    """A base model whose variables are stored in another order (as another Keras may
    order them) still gives each variable its own values."""
    keras_model = model_lib.build_model()
    keys = [compat.variable_key(v) for v in keras_model.variables]
    values = {key: np.asarray(v) + float(i + 1) for i, (key, v) in enumerate(zip(keys, keras_model.variables))}
    module = tf.Module()
    module.model_variables = [tf.Variable(values[key]) for key in reversed(keys)]
    module.model_variable_keys = tf.Variable(list(reversed(keys)))
    _save_with_vocabularies(module, tmp_path, transform_output)
    started = warm_start.warm_start(keras_model, str(tmp_path), transform_output)
    assert started.used, started.reason
    for key, variable in zip(keys, keras_model.variables):
        np.testing.assert_array_equal(np.asarray(variable), values[key], err_msg=key)
