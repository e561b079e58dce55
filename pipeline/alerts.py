"""Run-end alerts: a JSON summary POSTed to a Slack-compatible webhook, with the Python
standard library alone, so that a command that imports neither TensorFlow nor TFX (an
unchanged re-run, a failure before the pipeline started) alerts in milliseconds.

Locally, `taxi-pipeline run|retrain --notify URL` posts when the command ends, whatever
the outcome; on Vertex AI the compiled pipeline's exit handler (`pipeline.cloud.notify`)
posts Vertex's final status. Either way a failure to notify is logged, and changes
neither the run's outcome nor its exit status, and a webhook that does not answer costs
at most `TIMEOUT_SECONDS` in all (connect, send and read).

The body has Slack's `text` (one line a person reads) and the fields a program reads.
"""

import http.client
import json
import logging
import threading
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, List, Optional

from pipeline.outcome import ExitCode

# Seconds a webhook has, in all, to take an alert before it is given up on.
TIMEOUT_SECONDS = 5.0


def url_problem(url: str) -> Optional[str]:
    """What is wrong with a webhook URL, said without quoting it (its path and query hold
    its credential); None for a URL an alert can be posted to. A token pasted with a
    blank, a line break or a character outside ASCII is caught here, where the URL is
    read, not by the HTTP client when the run ends."""
    for character in url:
        if character == " ":
            return "it holds a blank"
        if ord(character) < 32 or ord(character) == 127:
            return "it holds a control character (a line break or a tab?)"
        if ord(character) > 126:
            return "it holds a character outside ASCII (percent-encode it)"
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 -- raises on a port that is not a number
    except ValueError:
        return "it does not parse as a URL"
    if parts.scheme not in ("https", "http"):
        return "it must start with https:// or http://"
    if not parts.hostname:
        return "it names no host"
    return None


def _post(request: urllib.request.Request, timeout: float, problem: List[Optional[str]]) -> None:
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
        problem[0] = None
    except urllib.error.HTTPError as err:
        problem[0] = f"the webhook answered HTTP {err.code}"
    except (urllib.error.URLError, OSError) as err:
        if isinstance(err, TimeoutError) or isinstance(getattr(err, "reason", None), TimeoutError):
            # The socket's own timeout, which may end the request a moment before `post`
            # stops waiting: the same silence, said the same way.
            problem[0] = f"the webhook did not answer within {timeout:g} s"
            return
        problem[0] = f"the webhook could not be reached: {getattr(err, 'reason', err)}"
    except (http.client.HTTPException, ValueError) as err:  # their messages may quote the URL: the class only
        problem[0] = f"the webhook could not be reached ({type(err).__name__})"


def post(url: str, payload: Dict[str, Any], timeout: float = TIMEOUT_SECONDS) -> Optional[str]:
    """POSTs `payload` as JSON; returns None when the webhook took it, else why not.
    Returns within `timeout` seconds whatever the webhook does: urllib's own timeout
    bounds each socket operation, not a server that trickles its answer, so the request
    runs in a daemon thread that is left behind when time is up."""
    wrong = url_problem(url)
    if wrong:
        return f"the webhook's URL is not one an alert can be posted to: {wrong}"
    try:
        request = urllib.request.Request(
            url, data=json.dumps(payload).encode(), method="POST", headers={"Content-Type": "application/json"}
        )
    except ValueError:  # its message would quote the URL, credential and all
        return "the webhook's URL does not parse as a URL"
    problem: List[Optional[str]] = [f"the webhook did not answer within {timeout:g} s"]
    worker = threading.Thread(target=_post, args=(request, timeout, problem), daemon=True)
    worker.start()
    worker.join(timeout)
    return problem[0] if not worker.is_alive() else f"the webhook did not answer within {timeout:g} s"


def shown(url: str) -> str:
    """`url` as logs and messages name it: its scheme and host only, since a webhook's
    path and query carry its credential (Slack's, Teams' and PagerDuty's do)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # one that does not parse is named by nothing of it
        return "(a webhook)"
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}/…" if parts.scheme and parts.netloc else "(a webhook)"


def send(url: str, payload: Dict[str, Any]) -> bool:
    """`post`, with the failure logged (never raised); True when it was delivered."""
    problem = post(url, payload)
    if problem is None:
        logging.info("notified %s", shown(url))
        return True
    logging.warning("could not notify %s: %s (the run's outcome is unchanged)", shown(url),
                    problem.replace(url, shown(url)))
    return False


def run_payload(command: str, exit_code: int, report: Any, error: str, outcome: str = "error") -> Dict[str, Any]:
    """The alert for a local `run` or `retrain` that ended with `exit_code`, with its
    report (`pipeline.outcome.RunReport`) when it reached one, else the error and the
    `outcome` its exit status names (`error`, `locked`)."""
    if report is None:
        text = f"taxi-pipeline {command} failed (exit {exit_code}, {outcome}): {error or 'see its log'}"
        return {"text": text, "outcome": outcome, "exit_code": exit_code, "error": error}
    version = report.pushed_version
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


def monitor_failed_payload(error: str) -> Dict[str, Any]:
    """The webhook body of a `monitor` that failed (a missing path, say) before judging anything."""
    return {"text": f"taxi-pipeline monitor failed: {error}", "command": "monitor",
            "exit_code": int(ExitCode.ERROR), "error": error}


def final_status_payload(final_status: str, pushed: Optional[int] = None, serving: Optional[int] = None,
                         determined: bool = True, newest_span: Optional[int] = None,
                         awaiting: bool = False, pinned: bool = False) -> Dict[str, Any]:
    """The alert for Vertex's final status (`PipelineTaskFinalStatus` as JSON), with the
    version this job pushed (`pushed`; `awaiting`: it awaits approval) and the one serving
    (`serving`; `pinned`: a pin or rollback holds it); `determined` False when whether the
    job pushed could not be told; `newest_span` the newest span of the data root when a
    model was trained on it already (nothing new)."""
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
    elif pushed is not None and awaiting:
        text += (f"; model version {pushed} awaits approval (`taxi-pipeline serving approve {pushed}`); "
                 f"{f'version {serving} keeps serving' if serving else serving_text}")
    elif pushed is not None:
        text += f"; pushed model version {pushed}"
        if serving != pushed:
            text += f" ({serving_text}: {'a pin or rollback holds it' if pinned else 'pushed or approved since'})"
    elif newest_span is not None and serving and state == "SUCCEEDED":
        text += f"; nothing new: span {newest_span} is the newest, and a model was trained on it already " \
                f"(version {serving} keeps serving)"
    else:
        text += f"; nothing pushed ({f'version {serving} keeps serving' if serving else serving_text})"
    return {"text": text, "outcome": state.lower(),
            "exit_code": int(ExitCode.OK if state == "SUCCEEDED" else ExitCode.ERROR),
            "pipeline_job": job, "error": error, "version": pushed if determined else None,
            "awaiting_approval": awaiting, "serving_version": serving,
            "nothing_new": pushed is None and newest_span is not None}
