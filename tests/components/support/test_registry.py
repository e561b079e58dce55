"""The model's record: what decides whether a run trains, and which versions may serve."""

import json

import pytest

from components.support import files, registry, serving_config
from components.support.registry import Candidate, Fate, Record

MODEL = "big_tip"


def _record(*candidates, serving=None, pinned=False):
    record = Record()
    for candidate in candidates:
        record.add(candidate)
    record.serving, record.pinned = serving, pinned
    return record


def test_a_run_repeats_the_version_that_serves_or_the_newest_candidate_and_nothing_older():
    served = Candidate("a", [1, 2], Fate.SERVED, version=100)
    refused = Candidate("b", [2, 3], Fate.NOT_BLESSED, run="r2")
    record = _record(served, refused, serving=100)
    assert registry.decide(record, "a", [100, 200], record.serving).candidate is served
    assert "version 100 serves" in registry.decide(record, "a", [100, 200], record.serving).says
    assert registry.decide(record, "b", [100, 200], record.serving).candidate is refused
    assert registry.decide(record, "b", [100, 200], record.serving).says.endswith("these very inputs: not blessed")
    assert registry.decide(record, "c", [100, 200], record.serving) is None
    # An older refusal is not the newest: its inputs train again.
    record.add(Candidate("c", [3, 4], Fate.SERVING_CHECK_FAILED, reason="p99 12 ms over 10 ms"))
    assert registry.decide(record, "b", [100, 200], record.serving) is None
    refused_again = registry.decide(record, "c", [100, 200], record.serving)
    assert "refused by the serving check (p99 12 ms over 10 ms)" in refused_again.says


def test_a_version_that_is_not_there_neither_serves_nor_is_repeated_but_a_later_refusal_is():
    """Deleted or moved by hand: a run makes a version that can serve; the run after it,
    refused, is repeated (decided) instead of training again and again."""
    served = Candidate("a", [1], Fate.SERVED, version=100)
    record = _record(served, serving=100)
    assert registry.decide(record, "a", [100], record.serving).serving == 100
    assert registry.decide(record, "a", [], record.serving) is None
    record.add(Candidate("a", [1], Fate.NOT_BLESSED, run="r2"))
    decision = registry.decide(record, "a", [], record.serving)
    assert (decision.candidate.run, decision.serving) == ("r2", None)
    assert decision.says.endswith("these very inputs: not blessed")


def test_a_rejection_holds_when_its_inputs_come_back_after_a_newer_candidate_and_a_refusal_does_not():
    """The span that came after a rejected candidate removed: its inputs are the rejected
    one's again, and would train the same model as a new version, which would serve."""
    rejected = Candidate("a", [1, 2], Fate.REJECTED, version=100, by="ana", reason="slice drift")
    record = _record(Candidate("old", [1], Fate.NOT_BLESSED), rejected,
                     Candidate("b", [2, 3], Fate.SERVED, version=200), serving=200)
    decision = registry.decide(record, "a", [100, 200], record.serving)
    assert decision.candidate is rejected and decision.says.endswith("these very inputs: rejected (slice drift)")
    assert registry.decide(record, "a", [200], record.serving).candidate is rejected  # its folder removed since
    assert registry.decide(record, "old", [100, 200], record.serving) is None
    # `run --force` on those inputs since: its candidate, not the rejection, is what they made last.
    record.add(Candidate("a", [1, 2], Fate.SERVED, version=300))
    record.add(Candidate("c", [3, 4], Fate.SERVED, version=400))
    record.serving = 400
    assert registry.decide(record, "a", [100, 200, 300, 400], record.serving) is None


def test_after_a_rollback_the_inputs_of_the_version_rolled_back_from_train_nothing():
    record = _record(Candidate("old", [1, 2], Fate.SERVED, version=100),
                     Candidate("new", [2, 3], Fate.SERVED, version=200), serving=100, pinned=True)
    decision = registry.decide(record, "new", [100, 200], record.serving)
    assert decision.candidate.version == 200
    assert decision.says == ("version 200 was trained on these very inputs and passed every check (served); "
                             "version 100 serves now, as an operator set it (`taxi-pipeline serving unpin` serves "
                             "version 200)")
    # Rolled back from a version that is no longer the newest candidate (a rejected one came
    # after it): its inputs still train nothing while the rollback holds, where a run would
    # push a copy of it that the pin keeps from serving; unpinned, they train again.
    record.add(Candidate("rejected", [3, 4], Fate.REJECTED, version=300))
    for pinned, expected in ((True, 200), (False, None)):
        decision = registry.decide(record, "new", [100, 200, 300], record.serving, pinned)
        assert (decision.candidate.version if decision else None) == expected
    # A version deleted since is not repeated.
    assert registry.decide(record, "new", [100, 300], record.serving, True) is None
    # Nor one an unpin would not serve (a newer version may): its inputs train again, and
    # their copy, the newest version, is what an unpin serves.
    record.add(Candidate("newer", [5], Fate.SERVED, version=400))
    assert registry.decide(record, "new", [100, 200, 300, 400], record.serving, True) is None


def test_a_candidate_that_passes_every_check_supersedes_the_one_awaiting_approval():
    record = _record(Candidate("a", [1], Fate.AWAITING_APPROVAL, version=100))
    record.add(Candidate("b", [2], Fate.NOT_BLESSED))
    assert [c.fate for c in record.candidates] == [Fate.AWAITING_APPROVAL, Fate.NOT_BLESSED]
    record.add(Candidate("c", [3], Fate.AWAITING_APPROVAL, version=300))
    assert record.candidates[0].fate is Fate.SUPERSEDED
    assert record.candidates[0].reason == "version 300 passed every check after it"
    assert [c.version for c in record.awaiting] == [300]


def test_versions_awaiting_or_rejected_never_serve_and_only_older_unknown_ones_may():
    record = _record(Candidate("a", [1], Fate.SERVED, version=100),
                     Candidate("b", [2], Fate.REJECTED, version=200),
                     Candidate("c", [3], Fate.AWAITING_APPROVAL, version=300))
    # 50: pushed before the record existed; 400: a push cut short before it was recorded.
    assert registry.servable(record, [50, 100, 200, 300, 400]) == [50, 100]
    assert registry.servable(registry.Record(), [50, 400]) == [50, 400]


def test_the_record_round_trips_and_a_foreign_file_is_named(tmp_path):
    model_dir = tmp_path / MODEL
    model_dir.mkdir()
    assert registry.read(str(model_dir)) == Record()
    record = _record(Candidate("a", [1, 2], Fate.SERVED, version=100, run="r1", at="2026-11-29T06:00:00+00:00"),
                     serving=100)
    registry.write(str(model_dir), record)
    assert registry.read(str(model_dir)) == record
    assert json.loads((model_dir / registry.RECORD_FILE).read_text())["candidates"][0]["fate"] == "served"
    (model_dir / registry.RECORD_FILE).write_text("[1, 2]")
    with pytest.raises(ValueError, match="is not a record this pipeline wrote .*: restore it from a backup, or move "
                                         "it aside .* lets any of them serve, one that awaited approval or was "
                                         "rejected too: remove those first"):
        registry.read(str(model_dir))


def test_a_record_on_object_storage_read_cut_short_is_read_again_and_a_local_one_once(tmp_path, monkeypatch):
    """The size TensorFlow's Cloud Storage client keeps for a few seconds can cut a read of
    a record another process rewrote longer: read again, as `models.config` is."""
    record = _record(Candidate("a", [1], Fate.SERVED, version=100), serving=100)
    remote, local = f"ram://{tmp_path.name}/big_tip", str(tmp_path / "big_tip")
    for model_dir in (remote, local):
        files.makedirs(model_dir)
        registry.write(model_dir, record)
    real_read, reads, waits = registry._read, [], []

    def read_cut_once(where):
        reads.append(where)
        if len(reads) == 1:
            raise ValueError("Unterminated string starting at: line 1 column 2")
        return real_read(where)

    monkeypatch.setattr(registry, "_read", read_cut_once)
    monkeypatch.setattr(files.time, "sleep", waits.append)
    assert registry.read(remote) == record and len(reads) == 2 and waits == [files.STAT_CACHE_SECONDS]
    reads.clear()
    with pytest.raises(ValueError, match="is not a record this pipeline wrote"):
        registry.read(local)
    assert len(reads) == 1


def test_inputs_change_with_each_of_their_parts():
    base = registry.inputs_digest("static", {"tfx": "1.16.0"}, "files")
    assert base == registry.inputs_digest("static", {"tfx": "1.16.0"}, "files")
    assert len({base, registry.inputs_digest("other", {"tfx": "1.16.0"}, "files"),
                registry.inputs_digest("static", {"tfx": "1.21.0"}, "files"),
                registry.inputs_digest("static", {"tfx": "1.16.0"}, "more files")}) == 4


def test_following_rollback_pin_and_retention_leave_awaiting_and_rejected_versions_alone(tmp_path):
    serving_dir = tmp_path / "serving"
    for version in (100, 200, 300, 400):
        (serving_dir / MODEL / str(version)).mkdir(parents=True)
    model_dir = str(serving_dir / MODEL)
    registry.write(model_dir, _record(Candidate("a", [1], Fate.SERVED, version=100),
                                      Candidate("b", [2], Fate.SERVED, version=200),
                                      Candidate("c", [3], Fate.REJECTED, version=300),
                                      Candidate("d", [4], Fate.AWAITING_APPROVAL, version=400)))
    serving_config.follow(str(serving_dir), MODEL)
    current = serving_config.state(str(serving_dir), MODEL)
    assert current.loaded == [100, 200] and current.serving == 200
    assert registry.read(model_dir).serving == 200
    assert serving_config.rollback_target(current, record=registry.read(model_dir)) == 100
    with pytest.raises(serving_config.ServingConfigError, match="version 400 is awaiting approval: `taxi-pipeline "
                                                                  "serving approve 400` makes it serve"):
        serving_config.pin(str(serving_dir), MODEL, 400)
    with pytest.raises(serving_config.ServingConfigError, match="version 300 is rejected: it may not serve"):
        serving_config.pin(str(serving_dir), MODEL, 300)
    assert 400 in serving_config.protected_versions(str(serving_dir), MODEL)
    serving_config.pin(str(serving_dir), MODEL, 100)
    assert (registry.read(model_dir).serving, registry.read(model_dir).pinned) == (100, True)


def test_a_rollback_with_only_barred_versions_behind_says_so(tmp_path):
    serving_dir = tmp_path / "serving"
    for version in (100, 200):
        (serving_dir / MODEL / str(version)).mkdir(parents=True)
    model_dir = str(serving_dir / MODEL)
    registry.write(model_dir, _record(Candidate("a", [1], Fate.REJECTED, version=100),
                                      Candidate("b", [2], Fate.SERVED, version=200)))
    serving_config.follow(str(serving_dir), MODEL)
    with pytest.raises(serving_config.ServingConfigError, match=r"^nothing to roll back to: no version older than "
                                                                r"200 may serve \(the record bars version 100: "
                                                                r"`taxi-pipeline serving list` says why\)$"):
        serving_config.rollback_target(serving_config.state(str(serving_dir), MODEL), record=registry.read(model_dir))


def test_a_first_candidate_awaiting_approval_is_not_what_serves(tmp_path):
    serving_dir = tmp_path / "serving"
    (serving_dir / MODEL / "100").mkdir(parents=True)
    registry.write(str(serving_dir / MODEL), _record(Candidate("a", [1], Fate.AWAITING_APPROVAL, version=100)))
    assert serving_config.after_push(str(serving_dir), MODEL).serving is None
    assert not (serving_dir / serving_config.CONFIG_FILE).exists()
