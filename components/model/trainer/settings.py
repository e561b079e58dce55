"""The Trainer's settings, as read from its `custom_config`. Plain dataclasses, no
TensorFlow: the command line builds them before anything heavy is imported."""

from __future__ import annotations

import dataclasses
from typing import Mapping, Optional

# TF Serving reads at most this many warmup records.
MAX_WARMUP_RECORDS = 1000
# The exported model's serving interface, by name: what `export` writes and what the
# serving check and batch scoring call, without importing TensorFlow to know it.
SERVING_SIGNATURE = "serving_default"
EXAMPLES_INPUT = "examples"
PROBABILITY_KEY = "probability"
CLASS_KEY = "class_id"
WARMUP_FILE = "assets.extra/tf_serving_warmup_requests"
# The training loop's log line after each epoch; the command line echoes it on the
# console as the Trainer's progress (`pipeline.run.logs`).
EPOCH_PROGRESS = "epoch %d of %d: train loss %.4f, eval loss %.4f, eval AUC %.4f (%.0f s)"


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    epochs: int = 8
    batch_size: int = 256
    learning_rate: float = 0.01
    # Stop when eval loss has not improved for this many epochs (0 disables).
    early_stopping_patience: int = 2
    # In-graph progress line every this many steps (0 disables).
    log_every_steps: int = 100
    run_eagerly: bool = False
    # Seeds the initial weights and the shuffling: the same data and settings train the
    # same model.
    seed: int = 42
    # A training set too small for this many batches of `batch_size` per epoch is cut
    # into smaller batches (at least 32 examples): a short window must still get steps.
    min_steps_per_epoch: int = 10
    # float16 compute with dynamic loss scaling (pays off on GPUs; runs on CPU).
    mixed_precision: bool = False
    # Compile each replica's step with XLA (the in-graph progress print stays outside).
    jit_compile: bool = False
    # Steps run inside the graph per call of the epoch loop: fewer Python round trips.
    # NaN detection and in-graph logging still act on every step.
    steps_per_call: int = 50

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
    """The Trainer's `custom_config['export']`."""

    # The name TF Serving serves the model under (the Pusher's folder name).
    model_name: str = "big_tip"
    # Warmup requests written from real eval examples (0 writes no warmup file).
    warmup_requests: int = 100
    # Also write the raw-feature model as TFLite (assets.extra/model.tflite).
    tflite: bool = False

    @classmethod
    def from_custom_config(cls, custom_config: Optional[Mapping[str, object]]) -> "ExportConfig":
        return settings_from_custom_config(cls, custom_config, "export")

    def __post_init__(self) -> None:
        if not 0 <= self.warmup_requests <= MAX_WARMUP_RECORDS:
            raise ValueError(f"warmup_requests must be in [0, {MAX_WARMUP_RECORDS}], got {self.warmup_requests}")
