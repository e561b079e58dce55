"""What a run would repeat, decided from the model's record before anything is imported
(the runs themselves: tests/test_decisions.py)."""

import shutil

import pytest

from components.model.trainer.settings import SAVED_MODEL_FILE
from components.support import registry, serving_config
from components.support.registry import Candidate, Fate
from pipeline import config
from pipeline.outcome import ExitCode, Outcome, RunReport
from pipeline.run import run_state


def _model_dir(tmp_path, *candidates, serving=None, pinned=False):
    """A model folder with `candidates` in its record, each one pushed a whole version."""
    model_dir = tmp_path / "serving" / "big_tip"
    model_dir.mkdir(parents=True)
    record = registry.Record()
    for candidate in candidates:
        record.add(candidate)
        if candidate.version is not None:
            (model_dir / str(candidate.version)).mkdir()
            (model_dir / str(candidate.version) / SAVED_MODEL_FILE).write_bytes(b"graph")
    record.serving, record.pinned = serving, pinned
    registry.write(str(model_dir), record)
    return str(model_dir)


@pytest.mark.parametrize("fate, outcome, code", [
    (Fate.NOT_BLESSED, Outcome.NOT_BLESSED, ExitCode.NOT_BLESSED),
    (Fate.SERVING_CHECK_FAILED, Outcome.SERVING_CHECK_FAILED, ExitCode.SERVING_CHECK_FAILED),
    (Fate.SHADOW_REFUSED, Outcome.SHADOW_REFUSED, ExitCode.SHADOW_REFUSED),
    (Fate.REJECTED, Outcome.REJECTED, ExitCode.REJECTED),
    (Fate.AWAITING_APPROVAL, Outcome.AWAITING_APPROVAL, ExitCode.OK),
])
def test_a_run_of_the_newest_candidates_inputs_ends_with_its_fates_outcome(tmp_path, fate, outcome, code):
    version = 300 if fate.pushed else None
    model_dir = _model_dir(tmp_path, Candidate("a", [1], Fate.SERVED, version=100),
                           Candidate("b", [2], fate, version=version, run="run-2"), serving=100)
    report = run_state.decided_before(None, "fingerprint", "b", model_dir)
    assert (report.outcome, report.exit_code, report.run_id) == (outcome, code, "run-2")
    assert report.note.startswith("Nothing to train: ") and report.note.endswith("(`--force` trains anyway).")
    # What it names: the version awaiting approval, else the one that serves.
    assert report.pushed_version_dir == f"{model_dir}/{300 if fate is Fate.AWAITING_APPROVAL else 100}"
    assert run_state.decided_before(None, "fingerprint", "c", model_dir) is None
    # When its run finished: the candidate's time, unless a person's decision set it since.
    for by, finished in (("", "T"), ("ana", "")):
        decided = _model_dir(tmp_path / f"decided-{by}", Candidate("b", [2], fate, run="run-2", at="T", by=by))
        assert run_state.decided_before(None, "fingerprint", "b", decided).finished == finished
    # Its page: the deciding run's, when this output root has it.
    assert not report.page
    page = tmp_path / "out" / "reports" / "run-2.html"
    page.parent.mkdir(parents=True)
    page.write_text("<html></html>")
    assert run_state.decided_before(None, "fingerprint", "b", model_dir, str(tmp_path / "out")).page == str(page)


def test_the_last_run_decides_only_for_a_refused_data_or_a_folder_without_a_record(tmp_path):
    rejected = RunReport(outcome=Outcome.DATA_REJECTED, fingerprint="f", run_id="run-9")
    model_dir = _model_dir(tmp_path, Candidate("a", [1], Fate.SERVED, version=100), serving=100)
    assert run_state.decided_before(rejected, "f", "other", model_dir).outcome is Outcome.DATA_REJECTED
    pushed = RunReport(outcome=Outcome.PUSHED, fingerprint="f", run_id="run-9")
    assert run_state.decided_before(pushed, "f", "other", model_dir) is None  # the record says: new inputs
    empty = tmp_path / "empty" / "big_tip"
    empty.mkdir(parents=True)
    assert run_state.decided_before(pushed, "f", "other", str(empty)) is None  # no whole version to serve


def test_nothing_was_decided_when_the_version_the_record_says_serves_is_gone(tmp_path):
    """Deleted or moved by hand: a run must make a model that can serve, not report one
    that cannot (the run itself: tests/test_decisions.py)."""
    model_dir = _model_dir(tmp_path, Candidate("a", [1], Fate.SERVED, version=100, run="run-1"), serving=100)
    assert run_state.decided_before(None, "fingerprint", "a", model_dir).outcome is Outcome.UP_TO_DATE
    shutil.rmtree(tmp_path / "serving" / "big_tip" / "100")
    assert run_state.decided_before(None, "fingerprint", "a", model_dir) is None


def test_a_run_pinned_to_a_version_that_is_gone_stops_before_it_reads_the_data(tmp_path):
    serving_dir = tmp_path / "serving"
    _model_dir(tmp_path, Candidate("a", [1], Fate.SERVED, version=100), Candidate("b", [2], Fate.SERVED, version=200))
    serving_config.pin(str(serving_dir), "big_tip", 100)
    shutil.rmtree(serving_dir / "big_tip" / "100")
    run_config = config.RunConfig(data_root=str(tmp_path / "no-data"), output_root=str(tmp_path / "out"),
                                  serving_dir=str(serving_dir))
    with pytest.raises(serving_config.ServingConfigError,
                       match=r"pinned to version 100, which is not there .*`taxi-pipeline serving unpin`"):
        run_state.plan(run_config)
    serving_config.follow(str(serving_dir), "big_tip")  # unpinned: the run goes on to the data
    with pytest.raises(ValueError, match="no-data"):
        run_state.plan(run_config)


def test_a_held_candidate_is_said_held_by_its_run_and_not_by_a_later_one_after_a_decision(tmp_path):
    from pipeline.run import commands

    held = "judged against version 100, but version 200 serves since the run started: …"
    report = RunReport(outcome=Outcome.AWAITING_APPROVAL, pushed_version_dir="/s/big_tip/300", held=held,
                       run_id="run-2", fingerprint="f")
    assert f"Held for approval: {held}\nModel passed every check and awaits approval" in commands.summary(report, "l")
    # Approved since: the next run with its inputs repeats the decision, not the hold.
    model_dir = _model_dir(tmp_path, Candidate("a", [1], Fate.SERVED, version=200),
                           Candidate("b", [2], Fate.APPROVED, version=300, run="run-2", reason=held), serving=300)
    again = run_state.decided_before(RunReport.from_json(report.to_json()), "f", "b", model_dir)
    assert again.outcome is Outcome.UP_TO_DATE and again.held == ""
    assert "Held for approval" not in commands.summary(again, "l")
