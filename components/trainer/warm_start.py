"""Warm start: begin training from the latest blessed model's weights when they fit.

The exported SavedModel tracks the model's variables (`model_variables`, see export.py).
They are reused when every variable has the same name and shape as in the new model.
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

from components import features
from components.trainer import model as model_lib


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


def warm_start(
    keras_model: tf.keras.Model, base_model_dir: str, tf_transform_output: tft.TFTransformOutput
) -> WarmStart:
    """Loads the base model's weights into `keras_model` if they fit; says why not otherwise."""
    try:
        saved = list(tf.saved_model.load(base_model_dir).model_variables)
    except (OSError, AttributeError, ValueError) as err:
        return WarmStart(False, f"cannot read the base model's variables ({type(err).__name__}: {err})")
    current = keras_model.variables
    if [(v.name, tuple(v.shape)) for v in saved] != [(v.name, tuple(v.shape)) for v in current]:
        differ = sorted({(v.name, tuple(v.shape)) for v in current} ^ {(v.name, tuple(v.shape)) for v in saved})
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

    for variable, value in zip(current, saved):
        values = value.numpy()
        if maps and variable.name.split("/")[0] in model_lib.ID_TABLE_LAYERS:
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
