"""Typed run configuration, resolved once at the edge (the command line)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import Optional, Tuple

import components
from components.trainer.settings import TrainConfig
from pipeline import defaults


@dataclasses.dataclass(frozen=True)
class EvaluationConfig:
    """When a candidate model is blessed."""

    # The candidate's eval AUC must reach this, whatever the baseline.
    min_auc: float = 0.80
    # And may be at most this much below the latest blessed model's AUC.
    max_auc_drop: float = 0.005
    # Train:eval hash buckets of ExampleGen's deterministic split.
    train_buckets: int = 4
    eval_buckets: int = 1


PIPELINE_NAME = "taxi-big-tip"  # KFP v2 allows [a-z0-9-] only
MODEL_NAME = "big_tip"
# The Beam DirectRunner in one process: for data of this size, worker processes cost
# more to start and feed than they save.
DEFAULT_BEAM_ARGS: Tuple[str, ...] = (
    "--direct_running_mode=in_memory",
    "--direct_num_workers=1",
    # Beam >= 2.52 weighs every cached side input with objsize, which walks all loaded
    # modules' globals (TensorFlow's included) on each read; Beam's advice for
    # pipelines with materialized side inputs is to turn the cache off
    # (https://github.com/apache/beam/issues/30360).
    "--max_cache_memory_usage_mb=0",
    # Beam's other pickler: pickling and unpickling the pipelines' functions take 2.5 s
    # a cold run instead of dill's 3.0 s (dill also resets the cache of every logger on
    # each of its ~10,000 calls).
    "--pickle_library=cloudpickle",
)


def local_beam_args() -> Tuple[str, ...]:
    """DEFAULT_BEAM_ARGS plus this project's setup.py, when it is installed from source.

    Naming the package source for Beam is what a distributed runner needs, and it stops
    TFX from building a throwaway sdist of itself before every Beam component.
    """
    setup_py = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(components.__file__))), "setup.py")
    return DEFAULT_BEAM_ARGS + ((f"--setup_file={setup_py}",) if os.path.isfile(setup_py) else ())


def schema_dir() -> str:
    """Folder of the curated schema shipped inside the `components` package."""
    return os.path.join(os.path.dirname(components.__file__), "schema")


def source_digest(root: str) -> str:
    """Hash of the source (.py) and schema (.pbtxt) files under `root`."""
    digest = hashlib.sha256()
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".py", ".pbtxt")):
                path = os.path.join(folder, name)
                digest.update(os.path.relpath(path, root).encode())
                with open(path, "rb") as handle:
                    digest.update(handle.read())
    return digest.hexdigest()


def code_version() -> str:
    """Fingerprint of the `components` package (the user code Transform and Trainer run)."""
    return source_digest(os.path.dirname(components.__file__))[:16]


@dataclasses.dataclass(frozen=True)
class RunConfig:
    data_root: str = defaults.DATA_ROOT
    output_root: str = defaults.OUTPUT_ROOT
    serving_dir: str = defaults.SERVING_DIR
    beam_args: Tuple[str, ...] = DEFAULT_BEAM_ARGS
    pipeline_name: str = PIPELINE_NAME
    model_name: str = MODEL_NAME
    # Pushed versions kept in the serving folder (the newest always among them).
    keep_versions: int = defaults.KEEP_VERSIONS
    # Train on the newest this many spans (the newest = eval split), chosen when the
    # pipeline runs; None: all spans, hash-split.
    window_size: Optional[int] = None
    # Start training from the latest blessed model when compatible.
    warm_start: bool = True
    train: TrainConfig = TrainConfig()
    evaluation: EvaluationConfig = EvaluationConfig()

    def resolved(self) -> "RunConfig":
        """The same config with local paths made absolute."""
        return dataclasses.replace(
            self,
            data_root=_absolute(self.data_root),
            output_root=_absolute(self.output_root),
            serving_dir=_absolute(self.serving_dir),
        )

    @property
    def pipeline_root(self) -> str:
        return os.path.join(self.output_root, "pipeline_root")

    @property
    def metadata_path(self) -> str:
        return os.path.join(self.output_root, "metadata.sqlite")

    @property
    def model_serving_dir(self) -> str:
        return os.path.join(self.serving_dir, self.model_name)


def _absolute(path: str) -> str:
    return path if "://" in path else os.path.abspath(path)
