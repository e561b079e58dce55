"""The compiled pipeline's alert: `NotifyFinalStatus`, the exit handler, runs when the
pipeline ends, even when a component failed, and posts the final status with the version
the job pushed, or the one still serving (`pipeline.alerts` posts). Vertex AI hands the
final status over as a JSON string; Kubeflow Pipelines' backend as a Struct
(`backend/src/v2/driver/resolve.go`), which TFX passes on as the protobuf it is.
The webhook's URL is read when the job ends, from where the compiled JSON points
(`pipeline.cloud.secrets`): the JSON never holds it.
"""

import datetime
import json
import logging
import os
import re
from typing import Any, Optional, Tuple

import tensorflow as tf
from google.protobuf import json_format, message
from tfx import v1 as tfx

from components.custom import window
from components.support import registry, serving_config, spans
from pipeline.alerts import final_status_payload, send
from pipeline.cloud import secrets


def pushed_since(model_dir: str, since: str) -> Tuple[Optional[int], Optional[int], bool]:
    """(the newest version of `model_dir` pushed at or after `since`, an RFC 3339 time, or
    None; the version TF Serving serves, as `models.config` says; whether the first could
    be told). Versions are the push's time in seconds (components.custom.pusher)."""
    if not model_dir:
        return None, None, False
    try:
        current = serving_config.state(os.path.dirname(model_dir.rstrip("/")), os.path.basename(model_dir.rstrip("/")))
    except (tf.errors.OpError, OSError, serving_config.ServingConfigError) as err:
        logging.warning("could not read what %s serves: %s", model_dir, err)
        return None, None, False
    newest = current.on_disk[-1] if current.on_disk else None
    # Python 3.10's fromisoformat takes at most 6 digits of a second's fraction and no "Z".
    text = re.sub(r"(\.\d{6})\d+", r"\1", since.replace("Z", "+00:00"))
    try:
        started = datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        logging.warning("the job's creation time %r is not an RFC 3339 time", since)
        return None, current.serving, False
    return (newest if newest is not None and newest >= int(started) else None), current.serving, True


def newest_span_already_served(data_root: str, model_dir: str, serving: Optional[int]) -> Optional[int]:
    """The data root's newest span, when the serving version's model card says it was
    trained on it (so the job had nothing new to train on); else None."""
    if not (data_root and model_dir and serving):
        return None
    try:
        found = spans.span_numbers(data_root)
        trained = window.trained_on(model_dir)
    except (tf.errors.OpError, OSError, ValueError) as err:
        logging.warning("could not tell whether %s holds anything new: %s", data_root, err)
        return None
    return found[-1] if found and trained and found[-1] <= max(trained) else None


# The job's creation time, which Vertex AI (and KFP) put in place of this whole-value constant.
JOB_CREATED = "{{$.pipeline_job_create_time_utc}}"


def status_text(final_status: Any) -> str:
    """The final status as the JSON text Vertex AI gives, whichever form it came in."""
    if isinstance(final_status, message.Message):
        return json.dumps(json_format.MessageToDict(final_status))
    if isinstance(final_status, dict):
        return json.dumps(final_status)
    return str(final_status)


def notify_final_status(final_status: Any, url_from: str, model_dir: str, job_created: str, data_root: str) -> bool:
    """Posts the job's final status to the webhook whose URL `url_from` names (a Secret
    Manager secret or `env:NAME`), with the version this job pushed to `model_dir`, or the
    one still serving, and whether the data root held anything that model was not trained
    on; True when it was delivered. A URL it cannot read is logged, not raised: a failure
    to notify never changes an outcome."""
    url, problem = secrets.webhook_url(url_from)
    if problem:
        logging.warning("could not notify: %s (the job's outcome is unchanged)", problem)
        return False
    pushed, serving, determined = pushed_since(model_dir, job_created)
    newest = newest_span_already_served(data_root, model_dir, serving) if determined and pushed is None else None
    return send(url, final_status_payload(status_text(final_status), pushed, serving, determined, newest,
                                          awaits(model_dir, pushed)))


def awaits(model_dir: str, version: Optional[int]) -> bool:
    """Whether the model's record says `version` awaits approval."""
    if version is None:
        return False
    candidate = registry.read(model_dir).of_version(version)
    return candidate is not None and candidate.fate is registry.Fate.AWAITING_APPROVAL


@tfx.orchestration.experimental.exit_handler
def NotifyFinalStatus(  # a component is named like a class
    final_status: tfx.dsl.components.Parameter[str],
    url_from: tfx.dsl.components.Parameter[str],
    model_dir: tfx.dsl.components.Parameter[str] = "",
    job_created: tfx.dsl.components.Parameter[str] = JOB_CREATED,
    data_root: tfx.dsl.components.Parameter[str] = "",
) -> None:
    """The compiled pipeline's exit handler (`notify_final_status`); the task succeeds
    whether or not the alert was delivered."""
    notify_final_status(final_status, url_from, model_dir, job_created, data_root)
