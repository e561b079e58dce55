"""Warm start: begin training from the latest blessed model's weights when they fit.

The exported SavedModel tracks the model's variables (`model_variables`) and their names
(`model_variable_keys`, `<layer>/<variable>`; see export.py). They are reused when the new
model has the same set of names, each with the same shape, whichever stack (Keras 2 or
Keras 3) wrote the base model: variables are matched by name, not by position. A model
exported before the names were saved is read by its variables' own TensorFlow names.
Vocabularies are recomputed by every Transform run, so a token's id can change: the rows
of the shared id table that belong to vocabulary features are remapped by token (a token
new to the vocabulary keeps its fresh initial row). Anything else that does not fit means
training from scratch, with the reason logged and returned.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, List, Optional

import numpy as np
import tensorflow as tf
import tensorflow_transform as tft

from components import compat
from components.compat import keras
from components.model import features
from components.model.trainer import model as model_lib


@dataclasses.dataclass
class WarmStart:
    used: bool
    reason: str
    remapped_tokens: int = 0


def _vocabulary(path: str) -> Optional[List[bytes]]:
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path, "rb") as handle:
        return [line.rstrip(b"\n") for line in handle]


def _row_map(feature: features.Feature, old: List[bytes], new: List[bytes]) -> np.ndarray:
    """For each id of `feature` in the new model, the id it had in the old one (-1: none).

    Tokens keep their row wherever they moved; the OOV id follows the vocabulary's
    length (`Feature.oov_id`), the missing id does not move.
    """
    mapping = np.full(feature.cardinality, -1, dtype=np.int64)
    old_ids = {token: i for i, token in enumerate(old)}
    for new_id, token in enumerate(new):
        mapping[new_id] = old_ids.get(token, -1)
    mapping[feature.oov_id(len(new))] = feature.oov_id(len(old))
    mapping[feature.missing_id] = feature.missing_id
    return mapping


def _checkpoint_key(*path: object) -> str:
    return "/".join(map(str, path)) + "/.ATTRIBUTES/VARIABLE_VALUE"


def saved_variables(model_dir: str) -> Dict[str, np.ndarray]:
    """The exported model's variables by name (see the module doc).

    Read from the SavedModel's checkpoint alone, without loading its graph: a model
    exported by a newer TensorFlow may hold ops an older one cannot load, while the
    checkpoint format is the same on both stacks."""
    try:
        reader = tf.train.load_checkpoint(os.path.join(model_dir, "variables", "variables"))
    except (tf.errors.OpError, RuntimeError) as err:  # what TF's checkpoint reader raises
        raise OSError(f"no readable variables in {model_dir}: {err}") from err
    stored = reader.get_variable_to_shape_map()
    count = sum(1 for key in stored if key.startswith("model_variables/"))
    values = [reader.get_tensor(_checkpoint_key("model_variables", i)) for i in range(count)]
    if _checkpoint_key("model_variable_keys") in stored:
        keys = [key.decode() for key in reader.get_tensor(_checkpoint_key("model_variable_keys"))]
    else:
        # Exported before the names were saved: the variables' own names.
        keys = [compat.variable_key(v) for v in tf.saved_model.load(model_dir).model_variables]
    if len(set(keys)) != len(values):
        raise ValueError(f"{len(values)} variables under {len(set(keys))} distinct names")
    return dict(zip(keys, values))


def warm_start(
    keras_model: keras.Model, base_model_dir: str, tf_transform_output: tft.TFTransformOutput
) -> WarmStart:
    """Loads the base model's weights into `keras_model` if they fit; says why not otherwise."""
    try:
        saved = saved_variables(base_model_dir)
    except (OSError, AttributeError, ValueError) as err:
        return WarmStart(False, f"cannot read the base model's variables ({type(err).__name__}: {err})")
    current = {compat.variable_key(v): v for v in keras_model.variables}
    shapes = {key: tuple(v.shape) for key, v in current.items()}
    saved_shapes = {key: tuple(v.shape) for key, v in saved.items()}
    if shapes != saved_shapes:
        differ = sorted(set(shapes.items()) ^ set(saved_shapes.items()))
        return WarmStart(False, f"the model's variables changed (name, shape): {differ[:4]}")

    offsets = model_lib.table_offsets()
    maps: Dict[str, np.ndarray] = {}
    remapped = 0
    for feature in features.FEATURES:
        if feature.kind is not features.Kind.CATEGORICAL:
            continue
        vocab_name = feature.vocabulary_name
        old = _vocabulary(os.path.join(base_model_dir, "assets", vocab_name))
        new_path = tf_transform_output.vocabulary_file_by_name(vocab_name)
        new = _vocabulary(new_path) if new_path else None
        if old is None or new is None:
            return WarmStart(False, f"no vocabulary {vocab_name} to match tokens of {feature.name!r}")
        if old != new:
            maps[feature.name] = _row_map(feature, old, new)
            remapped += int(np.sum(maps[feature.name][: len(new)] != np.arange(len(new))))

    for key, variable in current.items():
        values = saved[key].copy()
        if maps and key.split("/")[0] in model_lib.ID_TABLE_LAYERS:
            initial = variable.numpy()
            for name, mapping in maps.items():
                rows = offsets[name] + np.arange(len(mapping))
                known = mapping >= 0
                old_rows = values[offsets[name] + mapping[known]]
                values[rows[~known]] = initial[rows[~known]]
                values[rows[known]] = old_rows
        variable.assign(values)
    reason = f"started from {base_model_dir}"
    if remapped:
        reason += f" ({remapped} vocabulary ids remapped by token)"
    return WarmStart(True, reason, remapped)
