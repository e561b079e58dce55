"""What runs inside the pipeline's components: the model (`model/`: feature spec, Transform
and Trainer code, the curated schema), our custom TFX components (`custom/`) and their
support code (`support/`). Nothing here imports `pipeline`.

`components.compat` is imported first: on the stack that needs it, it sets the Keras
switch before any module of this package imports TensorFlow (child processes, Beam
workers among them, inherit it).
"""

from components import compat  # noqa: F401


def __getattr__(name: str):
    """`components.ServedModelBlessing`, imported on first use: KFP v2 containers find a
    custom artifact type's class by its type name, `<module>.<Class>` (see
    `components.custom.pusher.ServedModelBlessing`)."""
    if name == "ServedModelBlessing":
        from components.custom.pusher import ServedModelBlessing

        return ServedModelBlessing
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
