"""The shadow check, between the serving check and the Pusher: the candidate and the model
that serves (the serving baseline, which the Evaluator compared against: its cache key is
that version) score the same newest logged requests (`--shadow-requests`), and a candidate
whose scores move past a threshold (`components.support.shadow`: the flip rate at the
serving threshold, the score shift) is not pushed.

Its output is the `ModelBlessing` the Pusher reads: the serving check's, passed on as it
is when that refused the candidate; else blessed unless the shadow check refused it, with
what it measured (`MEASURES_PROPERTY`, with both models' score histograms, which the run
page draws side by side) and why. Without `--shadow-requests`, or before any model
serves, it passes and says so. Traffic it cannot judge (a glob that matches no file, as
when request logging stopped; too many malformed records; a feature of another type than
the model reads) refuses the push: a switch nobody could check is not made.
"""

# No `from __future__ import annotations`: TFX reads this component's type hints.
import json
import logging

from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.types import standard_artifacts

from components.custom import baseline as serving_baseline
from components.custom import recorded, serving_check
from components.support import registry, shadow

BLESSING_KEY = recorded.BLESSING_KEY
# What was measured (`shadow.Measures.to_json`), and the check's finding in one line.
MEASURES_PROPERTY = recorded.SHADOW_MEASURES_PROPERTY
REASON_PROPERTY = recorded.SHADOW_CHECK_PROPERTY


def _pass_on(given, blessing) -> None:
    """The serving check's blessing, every property as it came."""
    for key, value in given.mlmd_artifact.custom_properties.items():
        blessing.mlmd_artifact.custom_properties[key].CopyFrom(value)


@component
def ShadowCheck(  # a component is named like a class
    model: InputArtifact[standard_artifacts.Model],
    model_blessing: InputArtifact[standard_artifacts.ModelBlessing],
    baseline: InputArtifact[standard_artifacts.Model],
    blessing: OutputArtifact[standard_artifacts.ModelBlessing],
    requests: Parameter[str] = "",
    sample_size: Parameter[int] = 2000,
    max_flip_rate: Parameter[float] = 0.05,
    max_score_shift: Parameter[float] = 0.3,
    max_malformed: Parameter[float] = 0.01,
    code_version: Parameter[str] = "",  # read by the cache key alone: an edit to the check re-runs it
) -> None:
    """Refuses a candidate whose scores on the newest logged requests move past a
    threshold from those of the model that serves, `baseline` (`components.custom.baseline`:
    the version the Evaluator compared against; see the module doc)."""
    from tfx.utils import path_utils

    from components.model.trainer.export import DECISION_THRESHOLD

    _pass_on(model_blessing, blessing)
    if model_blessing.get_int_custom_property(serving_check.BLESSED_PROPERTY) != 1:
        return

    def said(reason: str, refused: bool = False) -> None:
        logging.info("shadow check: %s", reason)
        blessing.set_string_custom_property(REASON_PROPERTY, reason)
        if refused:
            blessing.set_int_custom_property(serving_check.BLESSED_PROPERTY, 0)
            blessing.set_string_custom_property(serving_check.FATE_PROPERTY, registry.Fate.SHADOW_REFUSED.value)

    if not requests:
        said("passed, not checked: no --shadow-requests given")
        return
    if not serving_baseline.holds_a_model(baseline):
        said("passed, not checked: no model serves yet")
        return
    serving = int(baseline.get_string_custom_property(serving_baseline.SERVING_PROPERTY))
    found = shadow.sample(requests, sample_size, max_malformed)
    if found.problem:
        said(f"the traffic was not judged: {found.problem} ({requests})", refused=True)
        return
    measures = shadow.measure(shadow.score(path_utils.serving_model_path(model.uri), found.examples),
                              shadow.score(path_utils.serving_model_path(baseline.uri), found.examples),
                              DECISION_THRESHOLD)
    blessing.set_string_custom_property(MEASURES_PROPERTY, json.dumps({**measures.to_json(), "serving": serving}))
    against = f"the {measures.requests} newest requests, against version {serving}"
    said(*shadow.judged(measures, max_flip_rate, max_score_shift, against))
