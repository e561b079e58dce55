"""The line a command ends on when a signal stops it (the signals themselves, sent to real
runs: tests/test_interrupts.py)."""

import os
import signal

import pytest

from pipeline import interrupts
from pipeline.outcome import ExitCode


def test_sigterm_raises_in_the_main_thread_as_ctrl_c_does_and_a_second_signal_is_ignored():
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        interrupts.raise_on_sigterm()
        with pytest.raises(interrupts.Terminated) as raised:
            os.kill(os.getpid(), signal.SIGTERM)
            signal.sigtimedwait([], 0)  # let the handler run
        assert interrupts.exit_code(raised.value) == ExitCode.TERMINATED == 143
        assert interrupts.exit_code(KeyboardInterrupt()) == ExitCode.INTERRUPTED == 130
        interrupts.ignore()
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)  # ignored: nothing raised
    finally:
        signal.signal(signal.SIGTERM, before[0])
        signal.signal(signal.SIGINT, before[1])


@pytest.mark.parametrize("running, finished, said", [
    (None, [], "run was interrupted by Ctrl-C (SIGINT) before any component ran: nothing was trained or pushed"),
    ("Trainer", ["Transform"], "run was interrupted by Ctrl-C (SIGINT) while Trainer ran (1 component(s) finished: "
                               "Transform): nothing was pushed; the next `taxi-pipeline run` resumes"),
    ("Pusher", ["ServingCheck"], "while Pusher ran (1 component(s) finished: ServingCheck): the Pusher was cut "
                                 "short: its version is whole in the serving folder or absent, never in part"),
    (None, ["ServingCheck", "Pusher"], "after Pusher (2 component(s) finished: ServingCheck, Pusher): the Pusher had "
                                       "finished, so its decision stands; the next run records it"),
])
def test_a_run_says_where_it_was_and_whether_anything_was_pushed(running, finished, said):
    assert said in interrupts.message(KeyboardInterrupt(), "run", running, finished)


def test_other_commands_say_what_they_leave():
    assert interrupts.message(interrupts.Terminated(), "predict") == (
        "predict was interrupted by SIGTERM: nothing was written to --output (a local output is moved into place "
        "whole); score again")
    assert interrupts.message(KeyboardInterrupt(), "serving").endswith(": it stopped before it finished; run it again")
