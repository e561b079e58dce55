"""A lock held as one Cloud Storage object, for pushes to a `gs://` serving folder.

`fcntl.flock` holds only within one host; two Vertex jobs (a schedule's run and a
manual one) push from two machines. Cloud Storage creates an object only if it does
not exist when the upload carries the generation precondition `ifGenerationMatch=0`:
exactly one of two such uploads succeeds. The object holds who took it and until when
(a lease), renewed while the holder lives: a holder that died leaves it behind, and the
next pusher breaks it once the lease is over, within LEASE_SECONDS.

A holder that stalled past its lease (a frozen process, renewals failing for longer than
the lease) may find the lock broken and taken by another pusher. `Lease.confirm` tells it
before each step a reader would see or that deletes (the file that makes a version
whole, each deletion of a prune, the served config), so it stops instead of writing
beside the new holder. What is left open is the time between a check and the one write
or deletion it guards.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from typing import Any, Dict, Iterator, Optional, Tuple

LEASE_SECONDS = 90
RENEW_SECONDS = 20
WAIT_SECONDS = 10 * 60
POLL_SECONDS = 2.0


class LockBusy(RuntimeError):
    """Another live pusher held the lock for the whole wait."""


class LockLost(RuntimeError):
    """The lock is no longer this holder's: its lease ran out and another pusher took it."""


class Lease:
    """The lock as its holder holds it: the generation of the object it wrote last."""

    def __init__(self, blob, uri: str, lease_seconds: float):
        self.blob, self.uri, self.lease_seconds = blob, uri, lease_seconds
        self.generation: Optional[int] = blob.generation
        # Held while renewing and while confirming, so a confirm never compares the
        # object with a generation the renewal is replacing.
        self.guard = threading.Lock()

    def confirm(self) -> None:
        """Raises LockLost unless the lock object is still the one this holder wrote."""
        with self.guard:
            current = None if self.generation is None else self.blob.bucket.get_blob(self.blob.name)
            if current is None or current.generation != self.generation:
                self.generation = None
                raise LockLost(
                    f"the push lock {self.uri} is no longer this push's (it held the lock past its "
                    f"{self.lease_seconds:g} s lease and another push took it): this push stopped before its "
                    "next change to the serving folder; run again once the other push is done")


def split(uri: str) -> Tuple[str, str]:
    if not uri.startswith("gs://"):
        raise ValueError(f"not a Cloud Storage URI: {uri}")
    bucket, _, name = uri[len("gs://"):].partition("/")
    return bucket, name


@contextlib.contextmanager
def held(uri: str, wait_seconds: Optional[float] = None, lease_seconds: Optional[float] = None) -> Iterator[Lease]:
    """Holds the lock object `uri` (gs://BUCKET/NAME) for the block; waits at most
    `wait_seconds` (WAIT_SECONDS) for a live holder, then raises LockBusy naming it; a
    holder that stops renewing loses the lock after `lease_seconds` (LEASE_SECONDS), both
    read when called."""
    wait_seconds = WAIT_SECONDS if wait_seconds is None else wait_seconds
    lease_seconds = LEASE_SECONDS if lease_seconds is None else lease_seconds
    # Imported here: only a push to Cloud Storage needs the client.
    from google.api_core import exceptions
    from google.cloud import storage

    bucket_name, name = split(uri)
    blob, record = _take(storage.Client().bucket(bucket_name), name, uri, wait_seconds, lease_seconds)
    lease = Lease(blob, uri, lease_seconds)
    stop = threading.Event()
    renewer = threading.Thread(target=_renew, args=(lease, record, stop),
                               name="push-lock-lease", daemon=True)
    renewer.start()
    try:
        yield lease
    finally:
        stop.set()
        renewer.join()
        released = False
        if lease.generation is not None:
            with contextlib.suppress(exceptions.NotFound, exceptions.PreconditionFailed):
                blob.delete(if_generation_match=lease.generation)
                released = True
        if not released:
            logging.warning("the push lock %s was no longer ours when released (its lease ran out)", uri)


def _take(bucket, name: str, uri: str, wait_seconds: float, lease_seconds: float) -> Tuple[Any, Dict[str, Any]]:
    """Creates the lock object (only if none exists), breaking one whose lease ran out;
    the object and the record it holds."""
    from google.api_core import exceptions

    holder = f"{socket.gethostname()}:{os.getpid()}"
    deadline = time.monotonic() + wait_seconds
    while True:
        blob = bucket.blob(name)
        record = {"holder": holder, "expires": time.time() + lease_seconds}
        try:
            blob.upload_from_string(json.dumps(record), content_type="application/json", if_generation_match=0)
            return blob, record
        except exceptions.PreconditionFailed:
            pass
        current = bucket.get_blob(name)
        if current is None:
            continue  # released meanwhile
        try:
            other = json.loads(current.download_as_bytes())
        except (ValueError, exceptions.NotFound):
            other = {}
        expires = float(other.get("expires", 0))
        if expires < time.time():
            logging.warning("breaking the push lock %s: its holder %s let its lease run out", uri,
                            other.get("holder", "(unknown)"))
            with contextlib.suppress(exceptions.NotFound, exceptions.PreconditionFailed):
                current.delete(if_generation_match=current.generation)
            continue
        if time.monotonic() > deadline:
            raise LockBusy(f"another push holds {uri} ({other.get('holder', 'unknown holder')}, lease until "
                           f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(expires))}): nothing was pushed; "
                           "run again once it is done, or delete the object if its holder is gone")
        time.sleep(POLL_SECONDS)


def _renew(lease: Lease, record: Dict[str, Any], stop: threading.Event) -> None:
    """Extends the lease every RENEW_SECONDS until `stop`, writing only over our own
    generation of the object; stops for good once another holder wrote it."""
    from google.api_core import exceptions

    while not stop.wait(RENEW_SECONDS):
        record["expires"] = time.time() + lease.lease_seconds
        body = json.dumps(record)
        with lease.guard:
            if lease.generation is None:
                return
            try:
                lease.blob.upload_from_string(body, content_type="application/json",
                                              if_generation_match=lease.generation)
                lease.generation = lease.blob.generation
            except (exceptions.PreconditionFailed, exceptions.NotFound):
                # The client retries an upload whose answer was lost: a retry of a renewal that
                # was written fails its precondition on our own write, which holds this body.
                ours = _generation_holding(lease.blob, body)
                if ours is not None:
                    lease.generation = ours
                    continue
                logging.warning("the push lock %s was taken by another push: its lease had run out", lease.uri)
                lease.generation = None
                return
            except exceptions.GoogleAPIError as err:
                logging.warning("could not renew the push lock %s: %s", lease.uri, err)


def _generation_holding(blob, body: str) -> Optional[int]:
    """The lock object's generation if it holds exactly `body`, else None."""
    from google.api_core import exceptions

    current = blob.bucket.get_blob(blob.name)
    try:
        return current.generation if current is not None and current.download_as_bytes() == body.encode() else None
    except exceptions.NotFound:
        return None
