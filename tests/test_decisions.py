"""One decision from blessed to serving, tried as an operator would (docs/operations.md,
"From blessed to serving: one decision"): a run trains only when an input changed, a pin
or a rollback is not undone by the next run, `--promotion approval` leaves a candidate
awaiting a person, and the shadow check refuses a candidate whose scores move on logged
traffic, as the serving check refuses one that is too slow."""

from __future__ import annotations

import json

import pytest

from tests.helpers import edited, served_models, span_like, unknown_payment, write_records

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _record(ws) -> dict:
    return json.loads((ws.model_dir / "record.json").read_text())


def _serving(ws) -> list:
    (entry,) = served_models(str(ws.serving))
    return sorted(entry.model_version_policy.specific.versions)


def test_an_edit_the_gate_refused_then_reverted_trains_nothing(copy_of_finished_run, taxi_pipeline):
    ws = copy_of_finished_run
    versions = ws.versions()
    bad = write_records(ws.data / "span-16" / "unknown-payment.gz", span_like(ws.data / "span-16", 5, unknown_payment))
    refused = taxi_pipeline("run", *ws.locations())
    assert refused.returncode == 4, refused.stdout + refused.stderr
    bad.unlink()
    reverted = taxi_pipeline("run", *ws.locations())
    assert reverted.returncode == 0, reverted.stdout + reverted.stderr
    assert f"Nothing to train: version {versions[-1]} serves, trained on these very inputs" in reverted.stdout
    assert ws.versions() == versions and len(_record(ws)["candidates"]) == 1

    # The version that serves, deleted by hand: the next run is not "up to date" with it,
    # it makes a version that can serve, and says what it found.
    (ws.model_dir / versions[-1]).rename(ws.root / "moved-aside")
    pushed = taxi_pipeline("run", *ws.locations())
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    assert (f"When the run started, models.config loaded version {versions[-1]} of {ws.model_dir}, which was not "
            "there (deleted or moved?): the run's baseline was none. models.config no longer names it."
            ) in pushed.stdout
    (new,) = ws.versions()
    assert _serving(ws) == [int(new)] and f"Pushed a new model version: {ws.model_dir / new}" in pushed.stdout

    # Deleted again: now every component's output is cached for these inputs, the Pusher's
    # too, which executes all the same and pushes the model again.
    (ws.model_dir / new).rename(ws.root / "moved-aside-again")
    again = taxi_pipeline("run", *ws.locations())
    assert again.returncode == 0, again.stdout + again.stderr
    (newer,) = ws.versions()
    assert newer != new and _serving(ws) == [int(newer)], again.stdout
    assert f"Pushed a new model version: {ws.model_dir / newer}" in again.stdout and "Trainer " in again.stdout
    assert all(line.endswith("cached") for line in again.stdout.splitlines()
               if line.startswith("[") and " Pusher " not in line), again.stdout


def test_a_rollback_holds_and_a_candidate_awaits_approval_until_a_person_approves_it(
        copy_of_finished_run, finished_run, taxi_pipeline):
    ws = copy_of_finished_run
    (first,) = ws.versions()
    # The finished run's data (read, never written): the steps before the Trainer from cache.
    locations = ws.locations(data=finished_run.workspace.data)
    pushed = taxi_pipeline("run", *locations, "--seed", "7")
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    second = ws.versions()[-1]
    rollback = taxi_pipeline("serving", "rollback", "--serving-dir", str(ws.serving))
    assert rollback.returncode == 0 and _serving(ws) == [int(first)], rollback.stdout + rollback.stderr

    # The inputs of the version rolled back from: nothing trains, nothing is pushed.
    again = taxi_pipeline("run", *locations, "--seed", "7")
    assert again.returncode == 0, again.stdout + again.stderr
    assert (f"Nothing to train: version {second} was trained on these very inputs and passed every check "
            f"(served); version {first} serves now, as an operator set it (`taxi-pipeline serving unpin` serves "
            f"version {second})") in again.stdout
    assert ws.versions() == [first, second]

    # Blessed whatever this seed's AUC: the drop allowed only judges, it is no input.
    waiting = taxi_pipeline("run", *locations, "--seed", "8", "--promotion", "approval", "--max-auc-drop", "1")
    assert waiting.returncode == 0, waiting.stdout + waiting.stderr
    third = ws.versions()[-1]
    assert f"awaits approval: {ws.model_dir / third}" in waiting.stdout
    assert f"(`taxi-pipeline serving approve {third}`, or `serving reject {third} --note WHY`)" in waiting.stdout
    # Warm-started from and compared against the version rolled back to, not the newest pushed.
    assert f"Baseline (warm start and comparison): version {first}, which served" in waiting.stdout
    assert _serving(ws) == [int(first)]  # TF Serving's config did not change
    listed = taxi_pipeline("serving", "list", "--serving-dir", str(ws.serving))
    assert f"{third}  pushed " in listed.stdout and "AWAITING APPROVAL" in listed.stdout

    # Nothing new while it awaits; the settings that only judge are not inputs.
    unchanged = taxi_pipeline("run", *locations, "--seed", "8", "--min-auc", "0.5")
    assert unchanged.returncode == 0, unchanged.stdout + unchanged.stderr
    assert f"version {third} was trained on these very inputs: awaiting approval" in unchanged.stdout
    assert f"awaits approval: {ws.model_dir / third}" in unchanged.stdout

    wrong = taxi_pipeline("serving", "approve", second, "--serving-dir", str(ws.serving))
    assert wrong.returncode == 1
    assert wrong.stderr.strip().endswith(f"version {second} is served; awaiting approval: version {third}")
    approved = taxi_pipeline("serving", "approve", third, "--note", "shadow traffic reviewed", "--by", "ana",
                             "--serving-dir", str(ws.serving))
    assert approved.returncode == 0, approved.stdout + approved.stderr
    assert _serving(ws) == [int(third)]  # the pin moved to it
    candidate = _record(ws)["candidates"][-1]
    assert (candidate["version"], candidate["fate"], candidate["by"], candidate["reason"]) == (
        int(third), "approved", "ana", "shadow traffic reviewed")
    card = json.loads((ws.model_dir / third / "assets.extra" / "model_card.json").read_text())
    assert card["decision"]["fate"] == "approved" and card["decision"]["by"] == "ana"
    history = taxi_pipeline("history", "--output-root", str(ws.out))
    (line,) = [line for line in history.stdout.splitlines() if line.endswith(f"version {third}")]
    assert "awaiting approval  then approved by ana at " in line and ": shadow traffic reviewed  auc " in line


def _night(example) -> bool:
    return example.features.feature["trip_start_hour"].int64_list.value[0] < 6


def test_a_candidate_the_evaluator_blesses_but_whose_scores_move_on_logged_traffic_is_not_pushed(
        copy_of_finished_run, taxi_pipeline, tmp_path, webhook):
    """Trained on spans where night trips (hours 0-5, an eighth of the rows) were all
    relabelled big tippers, while the logged traffic is night trips as they were. The same
    candidate is then refused by the serving check, and at last pushed."""
    import tensorflow as tf

    ws = copy_of_finished_run
    url, received = webhook
    versions = ws.versions()
    traffic = []
    for span in sorted(ws.data.glob("span-*")):
        records = span_like(span, 1, lambda example: None)
        traffic += [r for r in records if _night(tf.train.Example.FromString(r))]

        def relabel(example):
            if _night(example):
                example.features.feature["big_tip"].int64_list.value[:] = [1]

        for path in span.glob("*.gz"):
            path.unlink()
        write_records(span / "relabelled.gz", edited(records, relabel))
    write_records(tmp_path / "requests" / "night.gz", traffic)
    shadowed = ["--shadow-requests", str(tmp_path / "requests" / "*.gz")]

    refused = taxi_pipeline("run", *ws.locations(), *shadowed)
    assert refused.returncode == 8, refused.stdout + refused.stderr
    line = next(line for line in refused.stdout.splitlines() if "shadow check REFUSED it" in line)
    assert "flip rate " in line or "score shift " in line, line
    assert " over its threshold " in line and f"newest requests, against version {versions[-1]}" in line
    page = next(line for line in refused.stdout.splitlines() if line.startswith("Report: "))[len("Report: "):]
    text = open(page).read()
    assert 'id="shadow-check"' in text and "both models' scores of the logged requests" in text
    assert ws.versions() == versions
    candidate = _record(ws)["candidates"][-1]
    assert candidate["fate"] == "refused by the shadow check" and candidate["version"] is None
    raised = ("--max-flip-rate", "1", "--max-score-shift", "1")

    # The same candidate (the Trainer's output reused) against a latency budget no model
    # meets: the budget only judges a model, so --force; exit 6, the reason said and alerted.
    slow = taxi_pipeline("run", *ws.locations(), *shadowed, *raised, "--force", "--latency-budget-ms", "0.0001",
                         "--notify", url)
    assert slow.returncode == 6, slow.stdout + slow.stderr
    assert "FAILED the serving check (too slow: " in slow.stdout and "budget 0.0001 ms" in slow.stdout
    assert ws.versions() == versions
    (alert,) = received
    assert alert["outcome"] == "failed the serving check" and alert["exit_code"] == 6
    assert _record(ws)["candidates"][-1]["fate"] == "refused by the serving check"

    # The same candidate (the Trainer's output reused), judged with the thresholds raised.
    passed = taxi_pipeline("run", *ws.locations(), *shadowed, *raised, "--force")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert len(ws.versions()) == len(versions) + 1
