"""TensorFlow's Cloud Storage client under `cloud_storage.BOUNDS`, against a Cloud Storage
that accepts connections and never answers: the read ends within the bound, after the
tries the bounds allow, with the line `failures.explain` gives for it. The client's host
names resolve to that listener in a mount namespace of the probe's own (its /etc/hosts)."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time

import pytest

from pipeline import cloud_storage, failures
from tests.helpers import SilentSocket, assert_one_clear_line, cli_command

PROBE = """
import json, sys, time
import tensorflow as tf
from pipeline import failures
started = time.monotonic()
try:
    tf.io.gfile.exists("gs://taxi-bucket/data/span-1")
except Exception as err:
    print(json.dumps({"seconds": time.monotonic() - started, "explained": failures.explain(err)}))
    sys.exit(0)
sys.exit("the silent Cloud Storage answered")
"""
TRIES = int(cloud_storage.BOUNDS["GCS_RETRY_CONFIG_MAX_RETRIES"]) + 1
# The bounds' waits, shortened here to keep the test short: the client reads them all
# the same way.
SHORTER = {"GCS_REQUEST_CONNECTION_TIMEOUT_SECS": "3", "GCS_REQUEST_IDLE_TIMEOUT_SECS": "3",
           "GCS_RETRY_CONFIG_MAX_DELAY_TIME_US": "2000000"}


def _bound_seconds(bounds) -> float:
    """The longest one operation may wait: each try the connect or the idle bound, then the
    back-offs, doubling from 1 s up to their cap."""
    wait = max(int(bounds["GCS_REQUEST_CONNECTION_TIMEOUT_SECS"]), int(bounds["GCS_REQUEST_IDLE_TIMEOUT_SECS"]))
    cap = int(bounds["GCS_RETRY_CONFIG_MAX_DELAY_TIME_US"]) / 1e6
    return TRIES * wait + sum(min(2 ** attempt, cap) for attempt in range(TRIES - 1))


BOUND_SECONDS = _bound_seconds({**cloud_storage.BOUNDS, **SHORTER})


def test_the_bounds_end_an_operation_within_four_minutes():
    # TensorFlow adds up to a second of jitter to each back-off.
    assert _bound_seconds(cloud_storage.BOUNDS) + TRIES - 1 <= 240


def _silent_listener() -> SilentSocket:
    """A socket on port 443 of a loopback address of its own that accepts and never answers."""
    for _ in range(20):
        with contextlib.suppress(OSError):  # that address's port 443 is taken
            return SilentSocket(f"127.0.{random.randint(1, 254)}.{random.randint(1, 254)}", 443)
    pytest.fail("no free loopback address for port 443")


def _silent_storage(tmp_path, argv, env, timeout):
    """`argv` run where Cloud Storage's host names lead to a listener that never answers
    (a mount namespace with its own /etc/hosts); how it ended, and the listener."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare, for a mount namespace with its own /etc/hosts")
    listener = _silent_listener()
    hosts = tmp_path / "hosts"
    hosts.write_text(f"{listener.host} www.googleapis.com storage.googleapis.com oauth2.googleapis.com\n"
                     "127.0.0.1 localhost\n")
    # Inside the Debian 13 root (scripts/debian-root) the command already runs in a private
    # mount namespace, whose root is no mount point: its propagation cannot be set again.
    propagation = "unchanged" if os.environ.get("TAXI_STACK_ROOT") else "private"
    try:
        return subprocess.run(
            ["unshare", "--mount", "--propagation", propagation, "--", "sh", "-c",
             'mount --bind "$0" /etc/hosts && exec "$@"', str(hosts), *argv],
            env=env, capture_output=True, text=True, timeout=timeout), listener
    finally:
        listener.close()


@pytest.mark.slow
@pytest.mark.every_stack
@pytest.mark.timeout(BOUND_SECONDS + 240)
def test_a_cloud_storage_that_never_answers_ends_a_read_within_the_bound(tmp_path):
    env = {name: value for name, value in os.environ.items() if not name.startswith("GCS_")}
    env.update(GOOGLE_AUTH_TOKEN_FOR_TESTING="token", NO_GCE_CHECK="true", TF_CPP_MIN_LOG_LEVEL="3")
    cloud_storage.bound(env)
    env.update(SHORTER)
    done, listener = _silent_storage(tmp_path, [sys.executable, "-c", PROBE], env, BOUND_SECONDS + 180)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["seconds"] <= BOUND_SECONDS + TRIES + 10
    assert len(listener.held) == TRIES
    assert found["explained"].startswith(
        "Cloud Storage did not answer reading or writing gs://taxi-bucket/data/span-1 in time")
    assert failures.NOTHING_CHANGED in found["explained"]


# -- Before the work: a bucket that does not answer is named in seconds -----------------------


@pytest.fixture
def storage_at(monkeypatch):
    """`storage_at(port)`: Cloud Storage is on 127.0.0.1:`port`, and waited for 1 s."""
    def place(port: int) -> None:
        monkeypatch.setattr(cloud_storage, "HOST", "127.0.0.1")
        monkeypatch.setattr(cloud_storage, "PORT", port)
        monkeypatch.setattr(cloud_storage, "PROBE_SECONDS", 1.0)
    return place


def test_a_bucket_that_never_answers_is_named_with_the_option_within_the_probe_time(storage_at):
    with SilentSocket() as silent:
        storage_at(silent.port)
        started = time.monotonic()
        with pytest.raises(ValueError, match=r"^--serving-dir gs://taxi-bucket/serving: Cloud Storage \(127.0.0.1\) "
                                             r"did not answer within 1 s: check the network route"):
            cloud_storage.require_answer("gs://taxi-bucket/serving", "--serving-dir", environ={})
        assert time.monotonic() - started < 3
        assert len(silent.held) == 1


def test_a_refused_connection_is_named_and_any_answer_will_do(storage_at):
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    storage_at(port)
    with pytest.raises(ValueError, match=r"^--output gs://b/scores: Cloud Storage \(127.0.0.1\) did not answer "
                                         r"\(\[Errno 111\] Connection refused\)"):
        cloud_storage.require_answer("gs://b/scores", "--output", environ={})

    def plain_http(connection) -> bool:  # not TLS: still something that answers
        connection.recv(1024)
        connection.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
        return True

    with SilentSocket(answer=plain_http) as answering:
        storage_at(answering.port)
        cloud_storage.require_answer("gs://b/scores", "--output", environ={})


def test_through_a_proxy_nothing_is_probed(storage_at):
    with SilentSocket() as silent:
        storage_at(silent.port)
        cloud_storage.require_answer("gs://b/serving", "--serving-dir", environ={"https_proxy": "http://proxy:3128"})
        assert silent.held == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_run_whose_serving_bucket_never_answers_ends_before_the_work_naming_it(tmp_path, copy_spans):
    copy_spans(tmp_path / "data", (15, 16))
    argv = cli_command("run", "--data-root", str(tmp_path / "data"), "--output-root", str(tmp_path / "out"),
                       "--serving-dir", "gs://taxi-bucket/serving")
    started = time.monotonic()
    done, listener = _silent_storage(tmp_path, argv, dict(os.environ), 90)
    assert time.monotonic() - started < cloud_storage.PROBE_SECONDS + 15
    assert_one_clear_line(done, 1, "--serving-dir gs://taxi-bucket/serving: Cloud Storage (storage.googleapis.com) "
                                   "did not answer within 15 s")
    assert len(listener.held) == 1
    assert not (tmp_path / "out").exists()  # nothing was started
