"""Work begun on a thread of its own while the caller goes on: for work whose time is
spent in code that leaves the GIL (TensorFlow's readers and ops), beside Python work
of the caller's that does not depend on it."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Callable, TypeVar

T = TypeVar("T")


def started(work: Callable[[], T], name: str) -> Future[T]:
    """`work()` begun now on a daemon thread named `name`. The future's result is its
    result, or the exception it raised. A daemon: a process that ends without reading the
    result (an error of the caller's, an interrupt) does not wait for the work to end."""
    future: Future[T] = Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(work())
        except Exception as err:  # noqa: BLE001 (handed to the reader of the result, as an executor does)
            future.set_exception(err)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future
