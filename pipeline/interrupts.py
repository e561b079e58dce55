"""Ctrl-C (SIGINT) and a scheduler's SIGTERM are input too: every command ends on them
with one line saying what was done and what to do, and the exit status a shell gives a
process those signals end (`ExitCode.INTERRUPTED`, `ExitCode.TERMINATED`), never a
traceback on the console (it goes to the log).

SIGINT raises KeyboardInterrupt in the main thread; SIGTERM is made to raise `Terminated`
there the same way, so that both unwind through every `finally` and `with`: the output
root's lock is released, a Pusher's staged copy and `predict`'s staging folder are
removed, and nothing half-written is left (a version becomes whole by one rename, a run's
record by one `os.replace`).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import List, Optional

from components.custom.recorded import NodeId
from pipeline.outcome import ExitCode


class Terminated(BaseException):
    """SIGTERM, raised in the main thread (a BaseException, as KeyboardInterrupt is:
    `except Exception` blocks do not swallow it)."""


# An exception raised while the main thread is inside the import machinery can leave a
# module lock held (CPython reports it as "Exception ignored in ... _get_module_lock") and
# the process then hangs on the next import of that module: a Ctrl-C in the seconds
# TensorFlow takes to import would never end the command. A signal that lands there is
# kept (`_pending`) and raised at the next safe point: where the next import starts
# (`_AtNextImport`, an ordinary exception out of an import statement), or, when no other
# import comes, once this one is over (the signal is sent again until then). A command
# that imports one module after another, as `gc` does for most of its life, would
# otherwise find no moment outside an import.
_REDELIVER_SECONDS = 0.05
_pending: Optional[int] = None
# The signal sent again and not yet handled. The timer checks `_pending` and sends under
# `_lock`, and the import that raises the kept signal clears `_pending` under it, so a
# signal sent again after that is never sent; one sent just before arrives with
# `_pending` already cleared and is dropped, instead of interrupting a second time.
# Only one is ever in flight: each one handled inside an import starts the next timer.
_lock = threading.Lock()
_sent_again = False


def _importing(frame) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


# The interrupt the handler raised last. Raised while a library's C++ code had called back
# into Python, it can come out of that code as an error of the library's own (TensorFlow's
# `nest.flatten` under a Keras layer's constructor gave a bare TypeError): the command still
# ended on the signal (`raised`).
_raised: Optional[BaseException] = None


def _interrupt(signum: int) -> BaseException:
    global _raised
    _raised = Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
    return _raised


def raised() -> Optional[BaseException]:
    """The interrupt a signal raised since the command began (`begin`), if one did: what
    ended the command, whatever error it surfaced as."""
    return _raised


def begin() -> None:
    """A command begins: no signal has interrupted it yet."""
    global _raised
    _raised = None


def _raise(signum, frame) -> None:
    # No lock here: the handler runs in the main thread, which may hold `_lock` already.
    global _pending, _sent_again
    again, _sent_again = _sent_again, False
    if again and _pending is None:
        return
    if _importing(frame):
        _pending = signum
        timer = threading.Timer(_REDELIVER_SECONDS, _send_again, (signum,))
        timer.daemon = True
        timer.start()
        return
    _pending = None
    raise _interrupt(signum)


def _send_again(signum: int) -> None:
    """The signal again, unless the next import raised it meanwhile."""
    global _sent_again
    with _lock:
        if _pending == signum:
            _sent_again = True
            os.kill(os.getpid(), signum)


class _AtNextImport:
    """First on `sys.meta_path`: raises a signal kept during an import as the next import
    starts, before any module lock of it is taken."""

    def find_spec(self, name, path=None, target=None):
        global _pending
        with _lock:
            signum, _pending = _pending, None
        if signum is not None:
            raise _interrupt(signum)
        return None


def raise_on_signals() -> None:
    """From now on SIGINT raises KeyboardInterrupt and SIGTERM `Terminated` in the main
    thread, never inside the import machinery. A SIGINT the process was started ignoring
    (a shell's background job, nohup) stays ignored."""
    # First, even when called again after other finders were added: a finder before it
    # that answers the next import would let that import start with the signal kept.
    sys.meta_path[:] = [_AtNextImport()] + [finder for finder in sys.meta_path
                                             if not isinstance(finder, _AtNextImport)]
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _raise)


def ignore() -> None:
    """Once a command is ending on a signal, a second one (Ctrl-C pressed twice) must not
    interrupt the line that says so."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)


def exit_code(interrupt: BaseException) -> ExitCode:
    return ExitCode.TERMINATED if isinstance(interrupt, Terminated) else ExitCode.INTERRUPTED


def _named(interrupt: BaseException) -> str:
    return "SIGTERM" if isinstance(interrupt, Terminated) else "Ctrl-C (SIGINT)"


# What each command that writes leaves when it is cut short, and what to do.
_AFTERWARDS = {
    "predict": "nothing was written to --output (a local output is moved into place whole); score again",
    "gc": "what it removed stays removed, and a gc cut short leaves nothing a run reads; run `taxi-pipeline gc` "
          "again to finish",
    "monitor": "no finding was recorded; run it again",
}


def message(interrupt: BaseException, command: str, running: Optional[str] = None,
            finished: Optional[List[str]] = None) -> str:
    """The line a command ends on when `interrupt` stopped it; for `run` and `retrain`
    with the component that was `running` and those `finished` before it."""
    said = f"{command} was interrupted by {_named(interrupt)}"
    if command not in ("run", "retrain"):
        return f"{said}: {_AFTERWARDS.get(command, 'it stopped before it finished; run it again')}"
    finished = finished or []
    if running is None and not finished:
        return f"{said} before any component ran: nothing was trained or pushed; run it again"
    where = f" while {running} ran" if running else f" after {finished[-1]}"
    done = f" ({len(finished)} component(s) finished: {', '.join(finished)})" if finished else ""
    if NodeId.PUSHER in finished:
        pushed = "the Pusher had finished, so its decision stands; the next run records it"
    elif running == NodeId.PUSHER:
        pushed = ("the Pusher was cut short: its version is whole in the serving folder or absent, never in part, "
                  "and the next run completes or redoes the push")
    else:
        pushed = "nothing was pushed"
    return (f"{said}{where}{done}: {pushed}; the next `taxi-pipeline {command}` resumes from the components "
            "that finished")
