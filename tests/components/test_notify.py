"""The exit handler's alert: Vertex's final status and what the job pushed."""

import datetime
import json

from components import notify

STATUS = json.dumps({"state": "SUCCEEDED", "error": {}, "pipelineTaskName": "tfx-dag",
                     "pipelineJobResourceName": "projects/0/locations/l/pipelineJobs/j"})


def _rfc3339(seconds: int) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_a_version_pushed_after_the_job_started_is_the_job_s_push(tmp_path):
    for version in (1700000000, 1700000500):
        (tmp_path / str(version)).mkdir()
    (tmp_path / ".staging-1700000900").mkdir()
    assert notify.pushed_since(str(tmp_path), _rfc3339(1700000400)) == (1700000500, 1700000500)
    assert notify.pushed_since(str(tmp_path), _rfc3339(1700000501)) == (None, 1700000500)


def test_no_model_folder_and_an_unreadable_time_push_nothing(tmp_path):
    assert notify.pushed_since(str(tmp_path / "missing"), _rfc3339(1)) == (None, None)
    (tmp_path / "5").mkdir()
    assert notify.pushed_since(str(tmp_path), "{{$.pipeline_job_create_time_utc}}") == (None, 5)
    assert notify.pushed_since("", _rfc3339(1)) == (None, None)


def test_the_alert_names_the_push_or_what_keeps_serving():
    pushed = notify.final_status_payload(STATUS, pushed=1700000500, serving=1700000500)
    assert pushed["text"].endswith("ended: SUCCEEDED; pushed model version 1700000500")
    assert pushed["version"] == 1700000500 and pushed["exit_code"] == 0
    kept = notify.final_status_payload(STATUS, pushed=None, serving=1700000000)
    assert kept["text"].endswith("; nothing pushed (version 1700000000 keeps serving)") and kept["version"] is None
    failed = notify.final_status_payload(json.dumps({"state": "FAILED", "error": {"code": 13, "message": "task X"}}))
    assert failed["text"] == "taxi pipeline run ended: FAILED: task X; nothing pushed (no model serving)"
    assert failed["exit_code"] == 1 and failed["outcome"] == "failed"
