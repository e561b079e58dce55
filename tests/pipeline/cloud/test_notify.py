"""The exit handler's alert: Vertex's final status and what the job pushed."""

import json

from components.support import serving_config
from pipeline import alerts
from pipeline.cloud import notify

STATUS = json.dumps({"state": "SUCCEEDED", "error": {}, "pipelineTaskName": "tfx-dag",
                     "pipelineJobResourceName": "projects/0/locations/l/pipelineJobs/j"})


def _pushed(model_dir, *candidates):
    """Version folders and a record of `candidates` (version, fate, job), in that order."""
    from components.support import registry

    record = registry.Record()
    for version, fate, job in candidates:
        (model_dir / str(version)).mkdir(parents=True)
        record.add(registry.Candidate(str(version), [1], fate, version=version, run=job))
    registry.write(str(model_dir), record)
    serving_config.follow(str(model_dir.parent), model_dir.name)


def test_the_job_s_push_is_the_version_its_record_names_by_the_job_not_another_job_s(tmp_path):
    from components.support import registry

    model_dir = tmp_path / "big_tip"
    served = registry.Fate.SERVED
    _pushed(model_dir, (1700000000, served, "job-a"), (1700000500, served, "job-b"), (1700000600, served, "job-c"))
    (model_dir / ".staging-1700000900").mkdir()
    candidate, current, determined = notify.pushed_by(str(model_dir), "job-b")
    assert (candidate.version, current.serving, current.pinned, determined) == (1700000500, 1700000600, None, True)
    # Job c pushed while job b ran, or after: job b's alert names its own version, and
    # what serves; a job that pushed nothing (its push a model already there) names none.
    assert notify.pushed_by(str(model_dir), "job-d")[::2] == (None, True)
    text = alerts.final_status_payload(STATUS, candidate.version, current.serving)["text"]
    assert text.endswith("pushed model version 1700000500 (version 1700000600 serving: pushed or approved since)")


def test_a_push_cut_short_before_its_version_was_whole_is_not_called_pushed(tmp_path):
    from components.support import registry

    model_dir = tmp_path / "big_tip"
    _pushed(model_dir, (1700000000, registry.Fate.SERVED, "job-a"), (1700000500, registry.Fate.SERVED, "job-b"))
    (model_dir / "1700000500").rename(model_dir / ".staging-1700000500")
    candidate, current, determined = notify.pushed_by(str(model_dir), "job-b")
    assert (candidate, current.serving, determined) == (None, 1700000000, True)


def test_a_pin_is_what_keeps_serving(tmp_path):
    from components.support import registry

    model_dir = tmp_path / "big_tip"
    _pushed(model_dir, (1700000000, registry.Fate.SERVED, "job-a"), (1700000500, registry.Fate.SERVED, "job-b"))
    serving_config.pin(str(tmp_path), "big_tip", 1700000000)
    candidate, current, _ = notify.pushed_by(str(model_dir), "job-b")
    assert (candidate.version, current.serving, current.pinned) == (1700000500, 1700000000, 1700000000)
    text = alerts.final_status_payload(STATUS, candidate.version, current.serving, pinned=True)["text"]
    assert text.endswith("pushed model version 1700000500 (version 1700000000 serving: a pin or rollback holds it)")


def test_a_version_awaiting_approval_is_said_to_await_it(tmp_path, monkeypatch):
    from components.support import registry

    model_dir = tmp_path / "big_tip"
    _pushed(model_dir, (1700000000, registry.Fate.SERVED, "job-a"),
            (1700000500, registry.Fate.AWAITING_APPROVAL, "job-b"))
    sent = []
    monkeypatch.setenv("ALERT_WEBHOOK", "https://hooks.example.com/x")
    monkeypatch.setattr(notify, "send", lambda url, payload: sent.append(payload) or True)
    assert notify.notify_final_status(STATUS, "env:ALERT_WEBHOOK", str(model_dir), "job-b", "") is True
    (payload,) = sent
    assert payload["text"].endswith("; model version 1700000500 awaits approval (`taxi-pipeline serving approve "
                                    "1700000500`); version 1700000000 keeps serving") and payload["awaiting_approval"]
    assert (payload["version"], payload["serving_version"]) == (1700000500, 1700000000)


def test_no_model_folder_an_unresolved_job_name_and_a_damaged_record_are_said_as_such(tmp_path):
    from components.support import registry

    candidate, current, determined = notify.pushed_by(str(tmp_path / "missing"), "job-a")
    assert (candidate, current.serving, determined) == (None, None, True)
    _pushed(tmp_path / "m", (5, registry.Fate.SERVED, "job-a"))
    candidate, current, determined = notify.pushed_by(str(tmp_path / "m"), "{{$.pipeline_job_name}}")
    assert (candidate, current.serving, determined) == (None, 5, False)
    assert notify.pushed_by("", "job-a") == (None, None, False)
    (tmp_path / "m" / registry.RECORD_FILE).write_text("{not json")
    candidate, current, determined = notify.pushed_by(str(tmp_path / "m"), "job-a")
    assert (candidate, current.serving, determined) == (None, 5, False)
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
    assert payload["text"].endswith("nothing new: span 4 is the newest, and a model was trained on it already "
                                    "(version 1700000500 keeps serving)"), payload["text"]
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
