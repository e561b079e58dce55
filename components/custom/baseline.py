"""ServingBaseline: the model the Trainer warm-starts from and the Evaluator compares the
candidate against, which is the version that serves, pinned or following, as the serving
folder says (`serving_config.serving_version`), never as the metadata store says.

TFX's `LatestBlessedModelResolver` answered this from the store, and answered another
question: the newest model that reached serving, not the one that serves after a pin or
a rollback; only what the store of this pipeline's name recorded (a staging compile of
the same name feeding production's baseline, a push whose outputs a kill lost missing);
and as a resolver task, which Kubeflow Pipelines' own backend refuses to run. The
serving folder is the same for the local run and the compiled job, on disk or gs://.

Its output is a new `Model` artifact holding a copy of that version under TFX's
`Format-Serving` folder, where the Trainer's `base_model` and the Evaluator's
`baseline_model` are read. When nothing serves it holds no model (`SERVING_PROPERTY`
is `registry.NOTHING_SERVES`): the Trainer trains from scratch and the Evaluator
(`components.custom.evaluator`) evaluates with no baseline.

Caching. `serving` is the version by value: the cache key, so one serving version is
copied once, and a re-run (after a crash, or `--force`) reuses the copy and what was
computed from it. A local run gives the version that served when it was planned; a
compiled pipeline takes SpanWindow's (`window.SERVING_KEY`), which runs on every job.
"""

# No `from __future__ import annotations`: TFX reads this component's type hints.
import logging
import os

import tensorflow as tf
from tfx.dsl.component.experimental.annotations import OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.types import standard_artifacts
from tfx.utils import io_utils, path_utils

from components.custom import recorded
from components.support import registry, serving_config

MODEL_KEY = recorded.MODEL_KEY
# The version copied, or `registry.NOTHING_SERVES`.
SERVING_PROPERTY = recorded.SERVING_PROPERTY


def serving_now(model_dir: str) -> str:
    """The `serving` parameter for the model in `model_dir`, as it is now."""
    version = serving_config.serving_version(model_dir)
    return registry.NOTHING_SERVES if version is None else str(version)


def holds_a_model(model) -> bool:
    """Whether a baseline artifact holds a model (something served when it was made)."""
    return model.get_string_custom_property(SERVING_PROPERTY) not in ("", registry.NOTHING_SERVES)


@component
def ServingBaseline(  # a component is named like a class
    model_dir: Parameter[str],
    serving: Parameter[str],
    model: OutputArtifact[standard_artifacts.Model],
) -> None:
    """Copies version `serving` of the model in `model_dir` into `model` (see the module doc)."""
    model.set_string_custom_property(SERVING_PROPERTY, serving)
    if serving == registry.NOTHING_SERVES:
        logging.info("no baseline: no version of %s serves", model_dir)
        return
    if not serving.isdigit():
        raise ValueError(f"the serving version reached the baseline as {serving!r}, not a version number")
    source = os.path.join(model_dir, serving)
    if not tf.io.gfile.isdir(source) or not serving_config.is_whole(model_dir, int(serving)):
        raise FileNotFoundError(
            f"version {serving} of {model_dir}, which served when this run started, is no longer whole there; "
            "run again"
        )
    io_utils.copy_dir(source, path_utils.serving_model_dir(model.uri))
    logging.info("baseline and warm start: version %s of %s", serving, model_dir)
