"""The compiled pipeline's alert: `NotifyFinalStatus`, the exit handler, runs when the
pipeline ends, even when a component failed, and posts the final status with the version
the job pushed, or the one still serving (`pipeline.alerts` posts). Vertex AI hands the
final status over as a JSON string; Kubeflow Pipelines' backend as a Struct
(`backend/src/v2/driver/resolve.go`), which TFX passes on as the protobuf it is.
The webhook's URL is read when the job ends, from where the compiled JSON points
(`pipeline.cloud.secrets`): the JSON never holds it.
"""

import json
import logging
import os
from typing import Any, Optional, Tuple

import tensorflow as tf
from google.protobuf import json_format, message
from tfx import v1 as tfx

from components.custom import window
from components.support import registry, serving_config, spans
from pipeline.alerts import final_status_payload, send
from pipeline.cloud import compiled_fixes, secrets


def pushed_by(model_dir: str, job: str) -> Tuple[Optional[registry.Candidate], Optional[serving_config.ServingState],
                                                 bool]:
    """(the candidate job `job` pushed to `model_dir`, or None; what TF Serving serves, as
    `models.config` says, None when it could not be read; whether the first could be told). The model's record
    names each candidate by the job that made it (the Pusher's `run`,
    `compiled_fixes.pusher_names_its_job`), so another job's push while this one ran is
    not taken for this job's, and a version whose push was cut short before it was whole
    is not called pushed."""
    if not model_dir:
        return None, None, False
    base, name = os.path.split(model_dir.rstrip("/"))
    try:
        current = serving_config.state(base, name)
    except (tf.errors.OpError, OSError, serving_config.ServingConfigError) as err:
        logging.warning("could not read what %s serves: %s", model_dir, err)
        return None, None, False
    if not job or job.startswith("{{"):
        logging.warning("the job's name %r was not resolved: which version it pushed is unknown", job)
        return None, current, False
    try:
        record = registry.read(model_dir)
    except (tf.errors.OpError, OSError, ValueError) as err:
        logging.warning("could not read the record of %s: %s", model_dir, err)
        return None, current, False
    mine = [candidate for candidate in record.candidates
            if candidate.run == job and candidate.version in current.on_disk]
    return (mine[-1] if mine else None), current, True


def newest_span_already_served(data_root: str, model_dir: str, serving: Optional[int]) -> Optional[int]:
    """The data root's newest span, when the model's newest candidate (or, without a
    record, the serving version's model card) was trained on it (`window.trained_on`: the
    job had nothing new to train on); else None."""
    if not (data_root and model_dir and serving):
        return None
    try:
        found = spans.span_numbers(data_root)
        trained = window.trained_on(model_dir)
    except (tf.errors.OpError, OSError, ValueError) as err:
        logging.warning("could not tell whether %s holds anything new: %s", data_root, err)
        return None
    return found[-1] if found and trained and found[-1] <= max(trained) else None


def status_text(final_status: Any) -> str:
    """The final status as the JSON text Vertex AI gives, whichever form it came in."""
    if isinstance(final_status, message.Message):
        return json.dumps(json_format.MessageToDict(final_status))
    if isinstance(final_status, dict):
        return json.dumps(final_status)
    return str(final_status)


def notify_final_status(final_status: Any, url_from: str, model_dir: str, job: str, data_root: str) -> bool:
    """Posts the final status of job `job` (its name) to the webhook whose URL `url_from`
    names (a Secret Manager secret or `env:NAME`), with the version the job pushed to
    `model_dir`, or the one still serving, and whether the data root held anything that
    model was not trained on; True when it was delivered. A URL it cannot read is logged, not raised: a failure
    to notify never changes an outcome."""
    url, problem = secrets.webhook_url(url_from)
    if problem:
        logging.warning("could not notify: %s (the job's outcome is unchanged)", problem)
        return False
    pushed, current, determined = pushed_by(model_dir, job)
    serving = current.serving if current is not None else None
    newest = newest_span_already_served(data_root, model_dir, serving) if determined and pushed is None else None
    return send(url, final_status_payload(
        status_text(final_status), pushed.version if pushed else None, serving, determined, newest,
        awaiting=pushed is not None and pushed.fate is registry.Fate.AWAITING_APPROVAL,
        pinned=current is not None and current.pinned is not None))


@tfx.orchestration.experimental.exit_handler
def NotifyFinalStatus(  # a component is named like a class
    final_status: tfx.dsl.components.Parameter[str],
    url_from: tfx.dsl.components.Parameter[str],
    model_dir: tfx.dsl.components.Parameter[str] = "",
    job: tfx.dsl.components.Parameter[str] = compiled_fixes.PIPELINE_JOB_NAME,
    data_root: tfx.dsl.components.Parameter[str] = "",
) -> None:
    """The compiled pipeline's exit handler (`notify_final_status`); the task succeeds
    whether or not the alert was delivered."""
    notify_final_status(final_status, url_from, model_dir, job, data_root)
