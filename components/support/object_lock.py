"""A lock held as one Cloud Storage object, for pushes to a `gs://` serving folder.

`fcntl.flock` holds only within one host; two Vertex jobs (a schedule's run and a
manual one) push from two machines. Cloud Storage creates an object only if it does
not exist when the upload carries the generation precondition `ifGenerationMatch=0`:
exactly one of two such uploads succeeds. The object holds who took it and until when
(a lease), renewed while the holder lives: a holder that died leaves it behind, and the
next pusher breaks it once the lease is over, within LEASE_SECONDS.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from typing import Any, Dict, Iterator, Tuple

LEASE_SECONDS = 90
RENEW_SECONDS = 20
WAIT_SECONDS = 10 * 60
POLL_SECONDS = 2.0


class LockBusy(RuntimeError):
    """Another live pusher held the lock for the whole wait."""


def split(uri: str) -> Tuple[str, str]:
    if not uri.startswith("gs://"):
        raise ValueError(f"not a Cloud Storage URI: {uri}")
    bucket, _, name = uri[len("gs://"):].partition("/")
    return bucket, name


@contextlib.contextmanager
def held(uri: str, wait_seconds: float = WAIT_SECONDS, lease_seconds: float = LEASE_SECONDS) -> Iterator[None]:
    """Holds the lock object `uri` (gs://BUCKET/NAME) for the block; waits at most
    `wait_seconds` for a live holder, then raises LockBusy naming it."""
    # Imported here: only a push to Cloud Storage needs the client.
    from google.api_core import exceptions
    from google.cloud import storage

    bucket_name, name = split(uri)
    blob, record = _take(storage.Client().bucket(bucket_name), name, uri, wait_seconds, lease_seconds)
    held_as = {"generation": blob.generation}
    stop = threading.Event()
    renewer = threading.Thread(target=_renew, args=(blob, record, held_as, stop, lease_seconds),
                               name="push-lock-lease", daemon=True)
    renewer.start()
    try:
        yield
    finally:
        stop.set()
        renewer.join()
        try:
            blob.delete(if_generation_match=held_as["generation"])
        except (exceptions.NotFound, exceptions.PreconditionFailed):
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


def _renew(blob, record: Dict[str, Any], held_as: Dict[str, int], stop: threading.Event,
           lease_seconds: float) -> None:
    """Extends the lease every RENEW_SECONDS until `stop`, writing only over our own
    generation of the object."""
    from google.api_core import exceptions

    while not stop.wait(RENEW_SECONDS):
        record["expires"] = time.time() + lease_seconds
        try:
            blob.upload_from_string(json.dumps(record), content_type="application/json",
                                    if_generation_match=held_as["generation"])
            held_as["generation"] = blob.generation
        except exceptions.GoogleAPIError as err:
            logging.warning("could not renew the push lock gs://%s/%s: %s", blob.bucket.name, blob.name, err)
