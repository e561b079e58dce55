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
import subprocess
import sys

import pytest

from pipeline import cloud_storage, failures
from tests.helpers import SilentSocket

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
SHORTER = {"GCS_REQUEST_CONNECTION_TIMEOUT_SECS": "3", "GCS_REQUEST_IDLE_TIMEOUT_SECS": "3"}


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


@pytest.mark.slow
@pytest.mark.every_stack
@pytest.mark.timeout(BOUND_SECONDS + 240)
def test_a_cloud_storage_that_never_answers_ends_a_read_within_the_bound(tmp_path):
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare, for a mount namespace with its own /etc/hosts")
    listener = _silent_listener()
    hosts = tmp_path / "hosts"
    hosts.write_text(f"{listener.host} www.googleapis.com storage.googleapis.com oauth2.googleapis.com\n"
                     "127.0.0.1 localhost\n")
    env = {name: value for name, value in os.environ.items() if not name.startswith("GCS_")}
    env.update(GOOGLE_AUTH_TOKEN_FOR_TESTING="token", NO_GCE_CHECK="true", TF_CPP_MIN_LOG_LEVEL="3")
    cloud_storage.bound(env)
    env.update(SHORTER)
    # Inside the Debian 13 root (scripts/debian-root) the command already runs in a private
    # mount namespace, whose root is no mount point: its propagation cannot be set again.
    propagation = "unchanged" if os.environ.get("TAXI_STACK_ROOT") else "private"
    try:
        done = subprocess.run(
            ["unshare", "--mount", "--propagation", propagation, "--", "sh", "-c",
             'mount --bind "$0" /etc/hosts && exec "$@"', str(hosts), sys.executable, "-c", PROBE],
            env=env, capture_output=True, text=True, timeout=BOUND_SECONDS + 180)
    finally:
        listener.close()
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["seconds"] <= BOUND_SECONDS + TRIES + 10
    assert len(listener.held) == TRIES
    assert found["explained"].startswith(
        "Cloud Storage did not answer reading or writing gs://taxi-bucket/data/span-1 in time")
    assert failures.NOTHING_CHANGED in found["explained"]
