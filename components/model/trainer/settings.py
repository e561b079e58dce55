"""The Trainer's settings, as read from its `custom_config`. Plain dataclasses, no
TensorFlow: the command line builds them before anything heavy is imported."""

from __future__ import annotations

import dataclasses
from typing import Mapping, Optional

from components.setting import setting

# TF Serving reads at most this many warmup records.
MAX_WARMUP_RECORDS = 1000
# The exported model's serving interface, by name: what `export` writes and what the
# serving check and batch scoring call, without importing TensorFlow to know it.
SERVING_SIGNATURE = "serving_default"
EXAMPLES_INPUT = "examples"
PROBABILITY_KEY = "probability"
CLASS_KEY = "class_id"
WARMUP_FILE = "assets.extra/tf_serving_warmup_requests"
# Between a refusal's message and the rows of the request it names (`export.refuse_invalid`):
# `pipeline.failures` finds a refusal in an error by it.
REFUSED_ROWS = "in rows"
# The SavedModel's graph: a version folder holding it is whole (written last, removed first).
SAVED_MODEL_FILE = "saved_model.pb"
# In the Trainer's `model_run` output: the config, the warm start and the result of training.
TRAINING_SUMMARY_FILE = "training_summary.json"
# The training loop's log line after each epoch; the command line echoes it on the
# console as the Trainer's progress (`pipeline.run.logs`).
EPOCH_PROGRESS = "epoch %d of %d: train loss %.4f, eval loss %.4f, eval AUC %.4f (%.0f s)"


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """The Trainer's `custom_config['train']`; each setting is also a flag of `run`,
    `retrain` and `compile` (`components.setting`)."""

    epochs: int = setting(8, "passes over the training split at most (see --early-stopping-patience)", minimum=1)
    batch_size: int = setting(256, "examples per training step", minimum=1)
    learning_rate: float = setting(0.01, "Adam's learning rate")
    early_stopping_patience: int = setting(
        2, "stop when the eval loss has not improved for this many epochs (0: never stop early)", minimum=0)
    log_every_steps: int = setting(100, "an in-graph progress line every this many steps (0: none)", minimum=0)
    run_eagerly: bool = setting(False, "run the Trainer's tf.functions eagerly (debugging; much slower)")
    # The same data and settings train the same model.
    seed: int = setting(42, "seeds the initial weights and the shuffling")
    # A short window must still get steps.
    min_steps_per_epoch: int = setting(
        10, "a training set too small for this many batches per epoch is cut into smaller batches (at least 32 "
            "examples)", minimum=0)
    # Pays off on GPUs; runs on CPU.
    mixed_precision: bool = setting(False, "float16 compute with dynamic loss scaling")
    # The in-graph progress print stays outside the compiled step.
    jit_compile: bool = setting(False, "compile each replica's training step with XLA")
    # Fewer Python round trips; NaN detection and in-graph logging still act on every step.
    steps_per_call: int = setting(50, "training steps run inside the graph per call of the epoch loop", minimum=1)

    @classmethod
    def from_custom_config(cls, custom_config: Optional[Mapping[str, object]]) -> "TrainConfig":
        """The Trainer's `custom_config['train']` as a TrainConfig; unknown keys are an error."""
        return settings_from_custom_config(cls, custom_config, "train")


def settings_from_custom_config(cls: type, custom_config: Optional[Mapping[str, object]], section: str):
    """Builds dataclass `cls` from `custom_config[section]`, rejecting unknown keys."""
    values = dict((custom_config or {}).get(section, {}))
    known = {field.name for field in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"unknown {section} settings {unknown}; known: {sorted(known)}")
    return cls(**values)


@dataclasses.dataclass(frozen=True)
class ExportConfig:
    """The Trainer's `custom_config['export']`; each setting is also a flag
    (`components.setting`)."""

    model_name: str = setting("big_tip", "the name TF Serving serves the model under: its folder in the serving folder")
    warmup_requests: int = setting(
        100, f"warm-up requests for TF Serving written from real eval examples (0: none; at most {MAX_WARMUP_RECORDS})",
        minimum=0)
    tflite: bool = setting(False, "also write the raw-feature model as TFLite (assets.extra/model.tflite)")

    @classmethod
    def from_custom_config(cls, custom_config: Optional[Mapping[str, object]]) -> "ExportConfig":
        return settings_from_custom_config(cls, custom_config, "export")

    def __post_init__(self) -> None:
        if not 0 <= self.warmup_requests <= MAX_WARMUP_RECORDS:
            raise ValueError(f"warmup_requests must be in [0, {MAX_WARMUP_RECORDS}], got {self.warmup_requests}")
