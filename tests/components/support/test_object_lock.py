"""The push lock held as one Cloud Storage object, against an in-memory bucket that keeps
Cloud Storage's generation preconditions (the image tests run it against the emulator)."""

from __future__ import annotations

import itertools
import json
import threading
import time

import pytest
from google.api_core import exceptions
from google.cloud import storage

from components.support import object_lock

URI = "gs://models/serving/big_tip/.push-lock"


class Bucket:
    """Objects by name: (generation, bytes); every write and delete checks its precondition."""

    def __init__(self):
        self.objects = {}
        self.guard = threading.Lock()
        self.name = "models"
        # Cloud Storage never gives a name a generation it had before, even after a delete.
        self.generations = itertools.count(1)
        # Writes whose answer is lost once they are done (the client then retries them).
        self.lost_answers = 0

    def blob(self, name):
        return Blob(self, name)

    def get_blob(self, name):
        with self.guard:
            if name not in self.objects:
                return None
            blob = Blob(self, name)
            blob.generation = self.objects[name][0]
            return blob


class Blob:
    def __init__(self, bucket, name):
        self.bucket, self.name, self.generation = bucket, name, None

    def upload_from_string(self, data, content_type, if_generation_match):
        with self.bucket.guard:
            current = self.bucket.objects.get(self.name, (0, b""))[0]
            if current != if_generation_match:
                raise exceptions.PreconditionFailed(f"{self.name}: generation {current}")
            self.generation = next(self.bucket.generations)
            self.bucket.objects[self.name] = (self.generation, data.encode())
            if self.bucket.lost_answers:
                self.bucket.lost_answers -= 1
                # What the client's retry of this very write meets.
                raise exceptions.PreconditionFailed(f"{self.name}: generation {self.generation}")

    def download_as_bytes(self):
        with self.bucket.guard:
            if self.name not in self.bucket.objects:
                raise exceptions.NotFound(self.name)
            return self.bucket.objects[self.name][1]

    def delete(self, if_generation_match):
        with self.bucket.guard:
            if self.name not in self.bucket.objects:
                raise exceptions.NotFound(self.name)
            if self.bucket.objects[self.name][0] != if_generation_match:
                raise exceptions.PreconditionFailed(self.name)
            del self.bucket.objects[self.name]


@pytest.fixture
def bucket(monkeypatch):
    shared = Bucket()

    class Client:
        def bucket(self, name):
            assert name == "models"
            return shared

    monkeypatch.setattr(storage, "Client", Client)
    monkeypatch.setattr(object_lock, "POLL_SECONDS", 0.01)
    return shared


def _record(bucket):
    return json.loads(bucket.objects["serving/big_tip/.push-lock"][1])


def test_the_lock_is_one_object_while_held_and_none_after(bucket):
    with object_lock.held(URI):
        assert _record(bucket)["expires"] > time.time()
    assert bucket.objects == {}
    with object_lock.held(URI):  # and it can be taken again
        pass


def test_a_second_pusher_waits_then_is_refused_naming_the_holder(bucket):
    with object_lock.held(URI):
        holder = _record(bucket)["holder"]
        started = time.monotonic()
        with pytest.raises(object_lock.LockBusy, match=f"another push holds {URI} \\({holder}"):
            with object_lock.held(URI, wait_seconds=0.2):
                pytest.fail("two holders at once")
        assert time.monotonic() - started >= 0.2
    assert bucket.objects == {}


def test_a_lease_that_ran_out_is_broken_and_the_lock_taken(bucket):
    dead = json.dumps({"holder": "gone:1", "expires": time.time() - 1})
    bucket.blob("serving/big_tip/.push-lock").upload_from_string(dead, "application/json", if_generation_match=0)
    with object_lock.held(URI, wait_seconds=0):
        assert _record(bucket)["holder"] != "gone:1"


def test_the_holder_renews_its_lease_over_its_own_generation_only(bucket, monkeypatch):
    monkeypatch.setattr(object_lock, "RENEW_SECONDS", 0.05)
    with object_lock.held(URI, lease_seconds=30):
        first = bucket.objects["serving/big_tip/.push-lock"][0]
        time.sleep(0.3)
        renewed = bucket.objects["serving/big_tip/.push-lock"][0]
        assert renewed > first
        # Someone else's write in between: the holder neither overwrites nor deletes it.
        other = json.dumps({"holder": "other:2", "expires": time.time() + 60})
        for _ in range(10):  # the holder may renew between the read and the write
            try:
                bucket.blob("serving/big_tip/.push-lock").upload_from_string(
                    other, "application/json", if_generation_match=bucket.objects["serving/big_tip/.push-lock"][0])
                break
            except exceptions.PreconditionFailed:
                continue
        time.sleep(0.2)
    assert _record(bucket)["holder"] == "other:2"


def test_a_holder_whose_lease_was_broken_learns_it_before_it_publishes(bucket, monkeypatch):
    """A holder stalled past its lease: another pusher broke the lock and took it. The
    stalled one's `confirm` refuses, and its release leaves the new holder's lock alone."""
    monkeypatch.setattr(object_lock, "RENEW_SECONDS", 0.05)
    stalled = object_lock.held(URI, lease_seconds=0.1)
    lease = stalled.__enter__()
    lease.confirm()  # still its own
    monkeypatch.setattr(object_lock, "RENEW_SECONDS", 60)  # it stalls: no more renewals
    time.sleep(0.3)
    with object_lock.held(URI, wait_seconds=0) as other:  # the lease ran out: broken and taken
        with pytest.raises(object_lock.LockLost, match=f"the push lock {URI} is no longer this push's"):
            lease.confirm()
        stalled.__exit__(None, None, None)
        other.confirm()  # the new holder's lock is still there, still its own
    assert bucket.objects == {}


def test_a_renewal_written_but_answered_as_refused_keeps_the_lock(bucket, monkeypatch):
    """The client retries a renewal whose answer was lost, and the retry fails its
    precondition on the holder's own write: the holder keeps the lock and releases it."""
    monkeypatch.setattr(object_lock, "RENEW_SECONDS", 0.05)
    with object_lock.held(URI, lease_seconds=30) as lease:
        bucket.lost_answers = 1
        time.sleep(0.3)
        assert bucket.lost_answers == 0
        lease.confirm()  # still its own
        assert _record(bucket)["expires"] > time.time() + 20
    assert bucket.objects == {}
