"""The run's console summary: its outcome line says what serves as the run found it."""

from components.support import registry
from pipeline.outcome import Outcome, RunReport
from pipeline.run import commands


def _outcome_line(report: RunReport) -> str:
    return commands.summary(report, "run.log").splitlines()[-2]


def test_a_refused_first_candidate_says_no_version_serves_and_a_later_one_that_the_previous_keeps_serving():
    first = RunReport(Outcome.NOT_BLESSED, baseline=registry.NOTHING_SERVES, seconds=1.0)
    assert _outcome_line(first) == ("Model trained but NOT blessed (the run's page says which threshold it missed); "
                                    "no version serves yet. (1.0 s, exit 3)")
    # Decided from the model's record (nothing run): no baseline; nothing serves, or a version does.
    decided = RunReport(Outcome.NOT_BLESSED, reused_previous_run=True, seconds=0.0)
    assert _outcome_line(decided).endswith("; no version serves yet. (0.0 s, exit 3)")
    decided.pushed_version_dir = "/s/big_tip/1700000000"
    assert _outcome_line(decided).endswith("; the previous version keeps serving. (0.0 s, exit 3)")
    later = RunReport(Outcome.SHADOW_REFUSED, baseline="1700000000", shadow_check="flip rate 0.2", seconds=1.0)
    assert _outcome_line(later).endswith("REFUSED it (flip rate 0.2); the previous version keeps serving. "
                                         "(1.0 s, exit 8)")


def test_a_push_a_pin_keeps_from_serving_says_so():
    pushed = RunReport(Outcome.PUSHED, pushed_version_dir="/s/big_tip/1700000500", baseline="1700000000",
                       pinned_to="1700000000", seconds=1.0)
    assert _outcome_line(pushed) == (
        "Pushed a new model version: /s/big_tip/1700000500; version 1700000000 keeps serving, pinned "
        "(`taxi-pipeline serving unpin` serves the newest) (1.0 s, exit 0)")
    pushed.pinned_to = ""
    assert _outcome_line(pushed) == "Pushed a new model version: /s/big_tip/1700000500 (1.0 s, exit 0)"


def test_a_reused_decision_does_not_say_what_the_earlier_run_started_from():
    ran = RunReport(Outcome.PUSHED, baseline="1700000000", warm_start="yes: started from /s/big_tip/1700000000",
                    pushed_version_dir="/s/big_tip/1700000500", seconds=9.0)
    said = commands.summary(ran, "run.log")
    assert "Baseline (warm start and comparison): version 1700000000" in said and "Warm start: yes" in said
    ran.reused_previous_run, ran.outcome, ran.seconds = True, Outcome.UP_TO_DATE, 0.1
    said = commands.summary(ran, "run.log")
    assert "Baseline" not in said and "Warm start" not in said
    assert said.splitlines()[0] == "Nothing changed since the last run (same data, code and settings); nothing was run."
