"""Model code of the taxi pipeline: feature spec, Transform and Trainer functions.

TFX 1.16, TFT and TFMA need Keras 2 (`tf_keras`). TensorFlow 2.16 picks the Keras
version when `tf.keras` is first touched, so the switch is set here, before any
module of this package imports TensorFlow. Child processes (Beam workers) inherit it.
"""

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

# The curated schema (the data contract), in the `schema/` folder of this package.
SCHEMA_FILE = "schema.pbtxt"


def __getattr__(name: str):
    """`components.ServedModelBlessing`, imported on first use: KFP v2 containers find a
    custom artifact type's class by its type name, `<module>.<Class>` (see
    `components.pusher.ServedModelBlessing`)."""
    if name == "ServedModelBlessing":
        from components.pusher import ServedModelBlessing

        return ServedModelBlessing
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
