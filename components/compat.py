"""Every difference between the two supported stacks that the code branches on.

- `tfx-1.16`: TFX 1.16, TensorFlow 2.16, Keras 2 (`tf_keras`), Python 3.10.
- `tfx-1.21`: TFX 1.21, TensorFlow 2.21, Keras 3 (`keras`), Python 3.13.

The rest of the code base is the same on both: it takes Keras from here (`keras`) and
calls the few functions below where the two Keras versions differ. Differences that one
spelling valid on both absorbs are written that way where they are used (docs/stacks.md
lists them). Importing this module is cheap: it reads package versions, sets
the Keras switch where the stack needs it, and imports TensorFlow only when `keras` or a
function is first used.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from typing import Tuple


def _version(distribution: str) -> Tuple[int, ...]:
    release = importlib.metadata.version(distribution).split("+")[0]
    return tuple(int(part) for part in release.split(".")[:3] if part.isdigit())


TFX_VERSION = _version("tfx")
# The stack's name, as `make STACK=...` and the run log give it.
STACK = f"tfx-{TFX_VERSION[0]}.{TFX_VERSION[1]}"
# TFX 1.16 (TF 2.16): TFX's, TFT's and TFMA's Keras code needs Keras 2, and TF 2.16 picks
# the Keras behind `tf.keras` from this variable when `tf.keras` is first touched, so it
# is set before TensorFlow loads, for this process and the Beam workers it starts.
# TFX 1.21: the model is Keras 3. TFT 1.21 still uses Keras 2 internally, from the
# `tf_keras` package by name (it sets the variable itself when unset); nothing here
# reads `tf.keras`, so which Keras that name means does not matter.
LEGACY_KERAS = TFX_VERSION < (1, 17)
if LEGACY_KERAS:
    os.environ["TF_USE_LEGACY_KERAS"] = "1"


def describe() -> str:
    """One line naming the stack: TFX, TensorFlow, Keras and Python versions."""
    versions = {name: importlib.metadata.version(name) for name in ("tfx", "tensorflow")}
    keras_dist = "tf-keras" if LEGACY_KERAS else "keras"
    return (
        f"{STACK}: TFX {versions['tfx']}, TensorFlow {versions['tensorflow']}, "
        f"Keras {importlib.metadata.version(keras_dist)}{' (tf_keras)' if LEGACY_KERAS else ''}, "
        f"Python {sys.version.split()[0]}"
    )


def __getattr__(name: str):
    """`compat.keras`: `tf_keras` on TFX 1.16, Keras 3 on TFX 1.21; imported on first use."""
    if name == "keras":
        if LEGACY_KERAS:
            import tf_keras as keras
        else:
            import keras
        globals()["keras"] = keras
        return keras
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def adam(learning_rate: float):
    """Adam, traced as part of our own steps: Keras 2's optimizers compile their update with
    XLA on their own by default (`jit_compile`), which Keras 3's optimizers do not take."""
    keras = __getattr__("keras")
    if LEGACY_KERAS:
        return keras.optimizers.Adam(learning_rate=learning_rate, jit_compile=False)
    return keras.optimizers.Adam(learning_rate=learning_rate)


def is_loss_scaled(optimizer) -> bool:
    return isinstance(optimizer, __getattr__("keras").mixed_precision.LossScaleOptimizer)


def scale_loss(optimizer, loss):
    """The loss that the gradients are taken of: multiplied by the loss scale under mixed
    precision (Keras 2: `get_scaled_loss`; Keras 3: `scale_loss`)."""
    if not is_loss_scaled(optimizer):
        return loss
    return optimizer.get_scaled_loss(loss) if LEGACY_KERAS else optimizer.scale_loss(loss)


def apply_scaled_gradients(optimizer, gradients, variables) -> None:
    """Applies gradients of `scale_loss`'s loss. Keras 2 wants them unscaled first
    (`get_unscaled_gradients`); Keras 3's `LossScaleOptimizer` unscales them itself, and
    skips a step whose gradients are not finite, as Keras 2's does."""
    if LEGACY_KERAS and is_loss_scaled(optimizer):
        gradients = optimizer.get_unscaled_gradients(gradients)
    optimizer.apply_gradients(zip(gradients, variables))


def variable_key(variable) -> str:
    """A model variable's stable name: `<layer>/<variable>`, the same on both stacks for
    the same model. Keras 2 names a variable `<layer>/<variable>:0` (`name`); Keras 3 calls
    that path `path` and its `name` is the last part alone; a variable loaded back from a
    SavedModel written on either stack has a plain TensorFlow name."""
    name = getattr(variable, "path", None) or variable.name
    return name[:-2] if name.endswith(":0") else name


def tf_variables(variables) -> list:
    """The `tf.Variable`s behind model variables. Keras 3 wraps each in a Variable of its
    own; the TFLite converter finds those in a module but not the `tf.Variable`s the
    traced function captures, and neither freezes nor initializes them (TFLite then reads
    them uninitialized: NaN everywhere). Keras 2's variables are `tf.Variable`s."""
    import tensorflow as tf

    return [v if isinstance(v, tf.Variable) else v.value for v in variables]
