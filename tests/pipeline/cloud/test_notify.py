"""The exit handler's alert: Vertex's final status and what the job pushed."""

import datetime
import json

from components.support import serving_config
from pipeline import alerts
from pipeline.cloud import notify

STATUS = json.dumps({"state": "SUCCEEDED", "error": {}, "pipelineTaskName": "tfx-dag",
                     "pipelineJobResourceName": "projects/0/locations/l/pipelineJobs/j"})


def _rfc3339(seconds: int) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_a_version_pushed_after_the_job_started_is_the_job_s_push(tmp_path):
    model_dir = tmp_path / "big_tip"
    for version in (1700000000, 1700000500):
        (model_dir / str(version)).mkdir(parents=True)
    (model_dir / ".staging-1700000900").mkdir()
    assert notify.pushed_since(str(model_dir), _rfc3339(1700000400)) == (1700000500, 1700000500, True)
    assert notify.pushed_since(str(model_dir), _rfc3339(1700000501)) == (None, 1700000500, True)
    # RFC 3339 with nanoseconds, as Google's APIs write it (Python 3.10 takes at most 6 digits).
    assert notify.pushed_since(str(model_dir), "2023-11-14T22:21:40.123456789Z") == (1700000500, 1700000500, True)


def test_a_pin_is_what_keeps_serving(tmp_path):
    model_dir = tmp_path / "big_tip"
    for version in (1700000000, 1700000500):
        (model_dir / str(version)).mkdir(parents=True)
    serving_config.pin(str(tmp_path), "big_tip", 1700000000)
    assert notify.pushed_since(str(model_dir), _rfc3339(1700000400)) == (1700000500, 1700000000, True)
    text = alerts.final_status_payload(STATUS, 1700000500, 1700000000)["text"]
    assert text.endswith("pushed model version 1700000500 (version 1700000000 serving: a pin or rollback holds it)")


def test_a_version_awaiting_approval_is_said_to_await_it(tmp_path):
    from components.support import registry

    model_dir = tmp_path / "big_tip"
    for version in (1700000000, 1700000500):
        (model_dir / str(version)).mkdir(parents=True)
    record = registry.Record()
    record.add(registry.Candidate("a", [1], registry.Fate.SERVED, version=1700000000))
    record.add(registry.Candidate("b", [2], registry.Fate.AWAITING_APPROVAL, version=1700000500))
    registry.write(str(model_dir), record)
    serving_config.follow(str(tmp_path), "big_tip")
    pushed, serving, _ = notify.pushed_since(str(model_dir), _rfc3339(1700000400))
    assert (pushed, serving, notify.awaits(str(model_dir), pushed)) == (1700000500, 1700000000, True)
    payload = alerts.final_status_payload(STATUS, pushed, serving, awaiting=True)
    assert payload["text"].endswith("; model version 1700000500 awaits approval (`taxi-pipeline serving approve "
                                    "1700000500`); version 1700000000 keeps serving") and payload["awaiting_approval"]


def test_no_model_folder_and_an_unreadable_time_are_said_as_such(tmp_path):
    assert notify.pushed_since(str(tmp_path / "missing"), _rfc3339(1)) == (None, None, True)
    (tmp_path / "m" / "5").mkdir(parents=True)
    assert notify.pushed_since(str(tmp_path / "m"), "{{$.pipeline_job_create_time_utc}}") == (None, 5, False)
    assert notify.pushed_since("", _rfc3339(1)) == (None, None, False)
    unknown = alerts.final_status_payload(STATUS, None, 5, determined=False)
    assert unknown["text"].endswith("; whether it pushed is unknown (version 5 serving)") and unknown["version"] is None


def test_the_alert_names_the_push_or_what_keeps_serving():
    pushed = alerts.final_status_payload(STATUS, pushed=1700000500, serving=1700000500)
    assert pushed["text"].endswith("ended: SUCCEEDED; pushed model version 1700000500")
    assert pushed["version"] == 1700000500 and pushed["exit_code"] == 0
    kept = alerts.final_status_payload(STATUS, pushed=None, serving=1700000000)
    assert kept["text"].endswith("; nothing pushed (version 1700000000 keeps serving)") and kept["version"] is None
    failed = alerts.final_status_payload(json.dumps({"state": "FAILED", "error": {"code": 13, "message": "task X"}}))
    assert failed["text"] == "taxi pipeline run ended: FAILED: task X; nothing pushed (no model serving)"
    assert failed["exit_code"] == 1 and failed["outcome"] == "failed"


def test_nothing_new_is_said_when_the_serving_model_was_trained_on_the_newest_span(tmp_path):
    from components.custom import model_card

    data_root, model_dir = tmp_path / "data", tmp_path / "serving" / "big_tip"
    for span in (3, 4):
        (data_root / f"span-{span}").mkdir(parents=True)
    card = model_dir / "1700000500" / model_card.CARD_DIR / model_card.JSON_FILE
    card.parent.mkdir(parents=True)
    card.write_text(json.dumps({"model": {"name": "big_tip", "version": 1700000500},
                                "training_data": {"spans": [3, 4]}}))
    assert notify.newest_span_already_served(str(data_root), str(model_dir), 1700000500) == 4
    payload = alerts.final_status_payload(STATUS, None, 1700000500, True, 4)
    assert payload["nothing_new"] and payload["version"] is None
    assert payload["text"].endswith("nothing new: span 4 is the newest, and version 1700000500, which keeps serving, "
                                    "was trained on it"), payload["text"]
    # A span the model has not seen: not "nothing new" (the gate or a failure held it back).
    (data_root / "span-5").mkdir()
    assert notify.newest_span_already_served(str(data_root), str(model_dir), 1700000500) is None
    assert notify.newest_span_already_served(str(data_root), str(model_dir), None) is None
    assert notify.newest_span_already_served(str(tmp_path / "nowhere"), str(model_dir), 1700000500) is None


def test_the_final_status_reads_the_same_as_kubeflow_s_struct_and_vertex_s_text(tmp_path, monkeypatch):
    from google.protobuf import struct_pb2

    status = struct_pb2.Struct()
    status.update(json.loads(STATUS))
    sent = []
    monkeypatch.setenv("ALERT_WEBHOOK", "https://hooks.example.com/x")
    monkeypatch.setattr(notify, "send", lambda url, payload: sent.append(payload) or True)
    for given in (STATUS, status):
        assert notify.notify_final_status(given, "env:ALERT_WEBHOOK", str(tmp_path / "m"), "", "") is True
    assert sent[0] == sent[1] and sent[0]["outcome"] == "succeeded"
    assert sent[0]["text"].startswith("taxi pipeline projects/0/locations/l/pipelineJobs/j ended: SUCCEEDED")
