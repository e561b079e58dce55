"""`components.background`: work on a thread of its own, its result or its error kept for
the caller."""

import threading

import pytest

from components import background


def test_the_work_runs_on_a_named_daemon_thread_while_the_caller_goes_on_and_its_result_is_kept():
    release = threading.Event()
    seen = {}

    def work():
        seen["thread"] = threading.current_thread()
        release.wait(timeout=30)
        return 42

    future = background.started(work, "trainer-data")
    assert not future.done()  # the caller goes on while the work waits
    release.set()
    assert future.result(timeout=30) == 42
    assert seen["thread"].name == "trainer-data"
    assert seen["thread"].daemon
    assert seen["thread"] is not threading.current_thread()


def test_an_error_of_the_work_is_raised_to_the_reader_of_the_result():
    def work():
        raise ValueError("no rows in span 3")

    future = background.started(work, "check")
    with pytest.raises(ValueError, match="no rows in span 3"):
        future.result(timeout=30)
