"""The line a command ends on when a signal stops it (the signals themselves, sent to real
runs: tests/test_interrupts.py)."""

import os
import signal
import sys
import time

import pytest

from pipeline import interrupts
from pipeline.outcome import ExitCode


def test_sigterm_raises_in_the_main_thread_as_ctrl_c_does_and_a_second_signal_is_ignored():
    before, finders = (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)), list(sys.meta_path)
    try:
        interrupts.raise_on_signals()
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
        sys.meta_path[:] = finders


class _SlowImports:
    """Modules `_slow_*` whose import takes a while, for the signal to land inside the
    import; `_slow_then_more` imports `_slow_more` once the signal was sent."""

    def find_spec(self, name, path=None, target=None):
        import importlib.util
        if not name.startswith("_slow_"):
            return None
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        if module.__name__ != "_slow_more":
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.3)
        module.imported = True
        if module.__name__ == "_slow_then_more":
            import _slow_more  # noqa: F401


@pytest.fixture
def slow_imports():
    before, finders = signal.getsignal(signal.SIGINT), list(sys.meta_path)
    # A shell starts a background job with SIGINT ignored, which raise_on_signals keeps:
    # the tests need it handled whoever started pytest.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.meta_path.insert(0, _SlowImports())
    interrupts.raise_on_signals()
    yield
    sys.meta_path[:] = finders
    for name in [name for name in sys.modules if name.startswith("_slow_")]:
        del sys.modules[name]
    signal.signal(signal.SIGINT, before)


def test_a_signal_inside_an_import_is_raised_once_the_import_is_over(slow_imports):
    with pytest.raises(KeyboardInterrupt):
        import _slow_alone  # noqa: F401
        assert sys.modules["_slow_alone"].imported  # whole, then interrupted
        time.sleep(5)
    assert sys.modules["_slow_alone"].imported


def test_a_signal_inside_an_import_is_raised_as_the_next_import_starts_and_imports_still_work(slow_imports):
    sys.meta_path.insert(0, sys.meta_path.pop(1))  # another finder came first since
    interrupts.raise_on_signals()  # called again: it is first again
    with pytest.raises(KeyboardInterrupt):
        import _slow_then_more  # noqa: F401
    # Raised out of the import statement, as any error in a module: the module is not
    # left half made, and no module lock is left held.
    assert "_slow_then_more" not in sys.modules and "_slow_more" not in sys.modules
    import _slow_more  # noqa: F401,F811
    assert sys.modules["_slow_more"].imported


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
    assert interrupts.message(KeyboardInterrupt(), "gc").startswith(
        "gc was interrupted by Ctrl-C (SIGINT): what it removed stays removed, and a gc cut short leaves nothing")
