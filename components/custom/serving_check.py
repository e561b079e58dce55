"""The serving check: the blessed candidate, loaded in a fresh process the way TF Serving
loads it, must answer its warmup requests with probabilities, fast enough, before the
Pusher may push it.

TF Serving loads a SavedModel with the C++ loader (tag `serve`) and runs a signature by
its SignatureDef's tensor names in a session. The check does the same through TF's
`compat.v1` loader and session, in a child process (a clean process, as a server's, with
nothing of the pipeline's process loaded: a model that needs something only the trainer
had fails here). It then

1. replays every request of the model's `assets.extra/tf_serving_warmup_requests` (what
   TF Serving replays when it loads the model) and checks that each answer holds one
   finite probability in [0, 1] per example;
2. times single-example requests of the `serving_default` signature, and checks their
   p99 latency against a budget (`DEFAULT_BUDGET_MS`, measured: docs/operations.md).

TFX's InfraValidator does this in a TF Serving container; it needs Docker or Kubernetes
and cannot be compiled for Kubeflow Pipelines v2. This check needs neither and compiles.

Its output is a `ModelBlessing` for the Pusher: blessed only when the Evaluator blessed
the model and the check passed, with what was measured and why it failed, if it did.
"""

# No `from __future__ import annotations`: TFX reads this component's type hints.
import json
import logging
import math
import os
import subprocess
import sys
from typing import Dict, Optional

from tfx.components.evaluator import constants as evaluator_constants
from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.types import standard_artifacts

from components.custom import recorded
from components.support import registry, serving_probe
from components.support.serving_probe import DEFAULT_BUDGET_MS

# The output: a ModelBlessing the Pusher reads (its parameter name below).
BLESSING_KEY = recorded.BLESSING_KEY
# A blessing's verdict, as the Evaluator and TFX's Pusher name it.
BLESSED_PROPERTY = recorded.BLESSED_PROPERTY
REASON_PROPERTY = recorded.SERVING_CHECK_PROPERTY
# An unblessed candidate's fate in the record (`registry.Fate`): which check refused it.
FATE_PROPERTY = recorded.FATE_PROPERTY
P99_PROPERTY = "p99_latency_ms"
# The longest the check's process may take (loading TensorFlow included).
TIMEOUT_SECONDS = 300
# The probe, run as a module in a fresh process.
PROBE_MODULE = "components.support.serving_probe"


# A probe process started ahead of the check (`start_spare`), its imports done while the
# nodes before the check ran; None when there is none. `_handed` is the model it was
# handed ahead of the check (`hand_over`), "" when none.
_spare: Optional[subprocess.Popen] = None
_handed = ""
# What the log says when one is started.
STARTED_AHEAD = "a probe process started ahead of the check"


def _probe(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", PROBE_MODULE, *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )


def start_spare() -> None:
    """Starts a probe process that imports TensorFlow now and checks the model the next
    check in this process hands it: a process as fresh as one started then, without the
    3-4 s of start-up on the check's path. A local run calls it once the data gate let the
    run through (`pipeline.run.local_runner`)."""
    global _spare
    stop_spare()
    _spare = _probe(serving_probe.WAIT_FLAG)
    logging.info("serving check: %s (pid %d)", STARTED_AHEAD, _spare.pid)


def start_spare_once() -> None:
    """`start_spare` unless a spare is already running (a run's later hooks call it again)."""
    if _spare is None or _spare.poll() is not None:
        start_spare()


def hand_over(model_dir: str) -> bool:
    """Gives the spare probe `model_dir` now, ahead of the check, to load and replay its
    warmup requests while other work runs (the check then only times its requests);
    False when there is no spare waiting for a model."""
    global _handed
    if _spare is None or _spare.poll() is not None or _handed:
        return False
    try:
        _spare.stdin.write(json.dumps({serving_probe.MODEL_FIELD: model_dir}) + "\n")
        _spare.stdin.flush()
    except OSError:  # it ended: the check will start a new one
        return False
    _handed = model_dir
    return True


def stop_spare() -> None:
    """Ends the spare probe, if a check did not take it (a run that stopped before it)."""
    global _spare, _handed
    spare, _spare, _handed = _spare, None, ""
    if spare is not None and spare.poll() is None:
        spare.kill()
        spare.communicate()


def run_in_fresh_process(model_dir: str, budget_ms: float) -> Dict[str, object]:
    """The probe (`components.support.serving_probe`) in a child process, as a server would
    load the model: the spare one if `start_spare` started it (and it was handed this model
    or none), else a new one (also when the spare gave no answer: it may have been ended
    from outside)."""
    global _spare, _handed
    spare, handed, _spare, _handed = _spare, _handed, None, ""
    if spare is not None and spare.poll() is None and handed not in ("", model_dir):
        spare.kill()
        spare.communicate()
    elif spare is not None and (spare.poll() is None or handed):
        logging.info("serving check: in the probe process started ahead (pid %d%s)", spare.pid,
                     ", its model loaded ahead" if handed else "")
        request = "" if handed else json.dumps({serving_probe.MODEL_FIELD: model_dir}) + "\n"
        findings = _findings(spare, request + json.dumps({serving_probe.BUDGET_FIELD: budget_ms}) + "\n")
        if findings.get("answered", True):
            return findings
        logging.warning("serving check: the spare probe gave no answer (%s); checking in a new one", findings["reason"])
    return _findings(_probe(model_dir, str(budget_ms)), None)


def _findings(process: subprocess.Popen, request: Optional[str]) -> Dict[str, object]:
    """What `process`, a probe, found, after sending it `request`; `answered` False when it
    printed nothing."""
    try:
        stdout, stderr = process.communicate(request, timeout=TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        return {"ok": False, "reason": f"loading and querying the model took more than {TIMEOUT_SECONDS} s"}
    lines = stdout.strip().splitlines()
    if process.returncode != 0 or not lines:
        tail = " ".join(stderr.strip().splitlines()[-3:])
        return {"ok": False, "answered": bool(lines),
                "reason": f"the model did not load or answer in a fresh process: {tail}"}
    try:
        return json.loads(lines[-1])
    except ValueError:
        return {"ok": False, "reason": f"the probe's answer was not its findings: {lines[-1][:200]}"}


@component
def ServingCheck(  # a component is named like a class
    model: InputArtifact[standard_artifacts.Model],
    model_blessing: InputArtifact[standard_artifacts.ModelBlessing],
    blessing: OutputArtifact[standard_artifacts.ModelBlessing],
    latency_budget_ms: Parameter[float] = DEFAULT_BUDGET_MS,
    code_version: Parameter[str] = "",  # read by the cache key alone: an edit to the check re-runs it
) -> None:
    """Blesses the Evaluator's blessed model for the Pusher when it serves as TF Serving
    would serve it (see the module doc)."""
    from tfx.utils import path_utils

    for key in (evaluator_constants.ARTIFACT_PROPERTY_CURRENT_MODEL_ID_KEY,
                evaluator_constants.ARTIFACT_PROPERTY_CURRENT_MODEL_URI_KEY):
        if model_blessing.has_custom_property(key):
            value = model_blessing.get_custom_property(key)
            # On Kubeflow Pipelines numbers arrive as JSON numbers: an id may be 123.0.
            if isinstance(value, (int, float)):
                blessing.set_int_custom_property(key, int(value))
            else:
                blessing.set_string_custom_property(key, str(value))
    if model_blessing.get_int_custom_property(BLESSED_PROPERTY) != 1:
        blessing.set_int_custom_property(BLESSED_PROPERTY, 0)
        blessing.set_string_custom_property(REASON_PROPERTY, "not checked: the Evaluator did not bless the model")
        blessing.set_string_custom_property(FATE_PROPERTY, registry.Fate.NOT_BLESSED.value)
        return
    findings = run_in_fresh_process(path_utils.serving_model_path(model.uri), latency_budget_ms)
    logging.info("serving check: %s", findings["reason"])
    blessing.set_int_custom_property(BLESSED_PROPERTY, int(bool(findings["ok"])))
    blessing.set_string_custom_property(REASON_PROPERTY, str(findings["reason"]))
    if not findings["ok"]:
        blessing.set_string_custom_property(FATE_PROPERTY, registry.Fate.SERVING_CHECK_FAILED.value)
    if "p99_ms" in findings and math.isfinite(float(findings["p99_ms"])):
        blessing.set_float_custom_property(P99_PROPERTY, float(findings["p99_ms"]))
