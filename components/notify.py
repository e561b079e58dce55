"""Run-end alerts: a JSON summary POSTed to a Slack-compatible webhook.

Locally, `taxi-pipeline run|retrain --notify URL` posts when the command ends, whatever
the outcome. On Vertex AI, `NotifyFinalStatus` is the compiled pipeline's exit handler:
it runs when the pipeline ends, even when a component failed, and posts Vertex's final
status. Either way a failure to notify is logged, and changes neither the run's outcome
nor its exit status.

The body has Slack's `text` (one line a person reads) and the fields a program reads.
"""

import datetime
import json
import logging
import os
import re
import urllib.error
import urllib.request
from typing import Any, Dict, Optional, Tuple

import tensorflow as tf
from tfx import v1 as tfx

from components import serving_config

# Seconds before a webhook that does not answer is given up on.
TIMEOUT_SECONDS = 10


def post(url: str, payload: Dict[str, Any], timeout: float = TIMEOUT_SECONDS) -> Optional[str]:
    """POSTs `payload` as JSON; returns None when the webhook took it, else why not."""
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
    except urllib.error.HTTPError as err:
        return f"the webhook answered HTTP {err.code}"
    except (urllib.error.URLError, OSError, ValueError) as err:
        return f"the webhook could not be reached: {getattr(err, 'reason', err)}"
    return None


def send(url: str, payload: Dict[str, Any]) -> bool:
    """`post`, with the failure logged (never raised); True when it was delivered."""
    problem = post(url, payload)
    if problem is None:
        logging.info("notified %s", url)
        return True
    logging.warning("could not notify %s: %s (the run's outcome is unchanged)", url, problem)
    return False


def run_payload(command: str, exit_code: int, report: Any, error: str, outcome: str = "error") -> Dict[str, Any]:
    """The alert for a local `run` or `retrain` that ended with `exit_code`, with its
    report (`pipeline.run_state.RunReport`) when it reached one, else the error and the
    `outcome` its exit status names (`error`, `locked`)."""
    if report is None:
        text = f"taxi-pipeline {command} failed (exit {exit_code}, {outcome}): {error or 'see its log'}"
        return {"text": text, "outcome": outcome, "exit_code": exit_code, "error": error}
    version = os.path.basename(report.pushed_version_dir or "") or None
    text = f"taxi-pipeline {command}: {report.outcome.value} (exit {exit_code})"
    if version:
        text += f", model version {version}"
    if "auc" in report.eval_metrics:
        text += f", AUC {report.eval_metrics['auc']:.4f}"
    if report.anomalies:
        text += f"; {len(report.anomalies)} finding(s): {report.anomalies[0]}"
    if report.page:
        text += f"; report {report.page}"
    return {
        "text": text, "outcome": report.outcome.value, "exit_code": exit_code, "run_id": report.run_id,
        "spans": report.spans, "metrics": report.eval_metrics, "version": version,
        "report": report.page or None, "anomalies": report.anomalies, "error": error,
    }


def final_status_payload(final_status: str, pushed: Optional[int] = None, serving: Optional[int] = None,
                         determined: bool = True) -> Dict[str, Any]:
    """The alert for Vertex's final status (`PipelineTaskFinalStatus` as JSON), with the
    version this job pushed (`pushed`) and the one serving (`serving`); `determined`
    False when whether the job pushed could not be told."""
    try:
        status = json.loads(final_status)
    except ValueError:
        status = {"state": "UNKNOWN", "raw": final_status}
    state = status.get("state", "UNKNOWN")
    job = status.get("pipelineJobResourceName") or status.get("pipeline_job_resource_name", "")
    error = status.get("error") or {}
    text = f"taxi pipeline {job or 'run'} ended: {state}"
    if error.get("message"):
        text += f": {error['message']}"
    serving_text = f"version {serving} serving" if serving else "no model serving"
    if not determined:
        text += f"; whether it pushed is unknown ({serving_text})"
    elif pushed is not None:
        text += f"; pushed model version {pushed}"
        if serving != pushed:
            text += f" ({serving_text}: a pin or rollback holds it)"
    else:
        text += f"; nothing pushed ({f'version {serving} keeps serving' if serving else serving_text})"
    return {"text": text, "outcome": state.lower(), "exit_code": 0 if state == "SUCCEEDED" else 1,
            "pipeline_job": job, "error": error, "version": pushed if determined else None,
            "serving_version": serving}


def pushed_since(model_dir: str, since: str) -> Tuple[Optional[int], Optional[int], bool]:
    """(the newest version of `model_dir` pushed at or after `since`, an RFC 3339 time, or
    None; the version TF Serving serves, as `models.config` says; whether the first could
    be told). Versions are the push's time in seconds (components.pusher)."""
    if not model_dir:
        return None, None, False
    try:
        current = serving_config.state(os.path.dirname(model_dir.rstrip("/")), os.path.basename(model_dir.rstrip("/")))
    except (tf.errors.OpError, serving_config.ServingConfigError) as err:
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


# The job's creation time, which Vertex AI (and KFP) put in place of this whole-value constant.
JOB_CREATED = "{{$.pipeline_job_create_time_utc}}"


@tfx.orchestration.experimental.exit_handler
def NotifyFinalStatus(  # a component is named like a class
    final_status: tfx.dsl.components.Parameter[str],
    url: tfx.dsl.components.Parameter[str],
    model_dir: tfx.dsl.components.Parameter[str] = "",
    job_created: tfx.dsl.components.Parameter[str] = JOB_CREATED,
) -> None:
    """The compiled pipeline's exit handler: posts the run's final status to `url`, with
    the version this job pushed to `model_dir`, or the one still serving."""
    send(url, final_status_payload(final_status, *pushed_since(model_dir, job_created)))
