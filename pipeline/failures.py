"""What a command says when it fails: one line naming what broke, where, and what to do.

The full traceback goes to the command's log file, never to the console. Failures are
recognised by what they say as much as by their type: TensorFlow raises
`ResourceExhaustedError` for a full disk, exhausted memory and a spent quota alike; Beam
wraps a worker's error in another type with the original text; MLMD raises
`RuntimeError` for a damaged SQLite file and for a MySQL server that went away.

The metadata store is also checked before a command uses it (`check_store`), within
`STORE_TIMEOUT_SECONDS`: MLMD itself has no connect timeout, and waits out a locked
SQLite file or a MySQL server that accepts connections and never answers.

No message here claims more than is true: every failure it names stops the command
before, or without, touching what serves (the Pusher's rename is the last step of a run).
"""

from __future__ import annotations

import errno
import os
import re
import socket
import sqlite3
from typing import Optional

from components.model.trainer.settings import REFUSED_ROWS
from pipeline import config

# Seconds the metadata store has to answer before the command gives up on it.
STORE_TIMEOUT_SECONDS = 5.0

NOTHING_CHANGED = "Nothing that was serving changed."

# What a full disk, exhausted memory and a spent quota say, whatever the error's type.
# ("database or disk is full": SQLite's, from the store, when the failed node's own
# error could not even be recorded.)
DISK_FULL = ("no space left on device", "disk quota exceeded", "database or disk is full")
OUT_OF_MEMORY = ("oom when allocating", "out of memory", "failed to allocate", "cannot allocate memory")
QUOTA = ("quota exceeded", "ratelimitexceeded", "rate limit exceeded", "too many requests")
READ_ONLY = ("read-only file system",)
NO_PERMISSION = ("permission denied", "operation not permitted")
DAMAGED_STORE = ("file is not a database", "database disk image is malformed")
LOCKED_STORE = ("database is locked", "concurrent writes aborted")
# TensorFlow's Cloud Storage client, out of tries on a bucket that does not answer in time
# (`pipeline/cloud_storage.py`) or cannot be reached at all.
CLOUD_STORAGE_SILENT = ("libcurl code 28", "libcurl code 7 ", "libcurl code 6 ")
# A serving signature's refusal of a value the model cannot score: its message, the rows.
MODEL_REFUSAL = re.compile(r"assertion failed: \[([^\]]+)\] \[" + re.escape(REFUSED_ROWS) + r"\] \[([^\]]*)\]")
MYSQL_UNREACHABLE = ("can't connect to mysql", "mysql server has gone away", "lost connection to mysql",
                     "mysql_real_connect failed", "can't connect to local mysql")


class StoreError(ValueError):
    """The metadata store cannot be used; the message says which and what to do."""


def _path_before(text: str, *reasons: str) -> str:
    """The path TensorFlow and the OS name before "; <reason>" (`/a/b; No space left on
    device`), or ""."""
    alternatives = "|".join(re.escape(reason) for reason in reasons)
    found = re.search(rf"((?:gs://|/)[^\s;'\"]+)['\"]?\s*[;:]\s*(?:\[Errno \d+\] )?(?:{alternatives})", text,
                      re.IGNORECASE)
    return found.group(1) if found else ""


def _where(err: BaseException, text: str, *reasons: str) -> str:
    path = getattr(err, "filename", None) or _path_before(text, *reasons)
    return f" {path}" if path else ""


def _new_history(path: str) -> str:
    """How to start a new history beside the store at `path`, and what it costs."""
    root = os.path.dirname(path)
    aside = " ".join(os.path.join(root, name) for name in (os.path.basename(path), config.LAST_RUN_FILE,
                                                             config.PIPELINE_ROOT_DIR))
    old = os.path.join(root, "old")
    return (f"to start a new history, move {aside} aside together (mkdir {old} && mv {aside} {old}: a new "
            "store's runs would write where the old outputs are): the next run reuses nothing, trains only "
            "inputs the model's record has not seen, and compares with the version that serves; `history` "
            "starts over")


def damaged_store(metadata: config.MetadataConfig) -> str:
    path = metadata.sqlite_path
    return (f"the metadata store {path} is damaged (not a readable SQLite database): restore it from a backup; "
            f"or, {_new_history(path)}. {NOTHING_CHANGED}")


def locked_store(metadata: config.MetadataConfig) -> str:
    return (f"the metadata store {metadata.sqlite_path} is locked by another program (a sqlite3 shell or a backup "
            f"holding a transaction) and stayed locked for {STORE_TIMEOUT_SECONDS:.0f} s: end that program's "
            f"transaction, then run again. {NOTHING_CHANGED}")


def unreachable_store(metadata: config.MetadataConfig, why: str) -> str:
    return (f"the metadata store {metadata} cannot be used ({why}): start the server or fix --metadata-mysql, "
            "then run again; a run resumes from the components it recorded. " + NOTHING_CHANGED)


def _check_sqlite(metadata: config.MetadataConfig, writable: bool) -> None:
    """The file reads as a database; with `writable`, a write transaction can start (and
    is rolled back: the file is not changed)."""
    try:
        connection = sqlite3.connect(f"file:{metadata.sqlite_path}?mode={'rw' if writable else 'ro'}", uri=True,
                                     timeout=STORE_TIMEOUT_SECONDS, isolation_level=None)
        try:
            connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
            if writable:
                connection.execute("BEGIN IMMEDIATE")
                connection.execute("ROLLBACK")
        finally:
            connection.close()
    except sqlite3.DatabaseError as err:
        text = str(err).lower()
        if any(s in text for s in LOCKED_STORE):
            raise StoreError(locked_store(metadata)) from err
        raise StoreError(damaged_store(metadata)) from err


def _check_mysql(metadata: config.MetadataConfig) -> None:
    """The server accepts a connection and greets within the timeout (MySQL's protocol
    starts with the server's handshake packet)."""
    address = metadata.mysql
    try:
        with socket.create_connection((address.host, address.port), timeout=STORE_TIMEOUT_SECONDS) as connection:
            connection.settimeout(STORE_TIMEOUT_SECONDS)
            if not connection.recv(4):
                raise StoreError(unreachable_store(metadata, "the server closed the connection"))
    except TimeoutError as err:
        raise StoreError(unreachable_store(
            metadata, f"no answer within {STORE_TIMEOUT_SECONDS:.0f} s")) from err
    except OSError as err:
        raise StoreError(unreachable_store(metadata, err.strerror or str(err))) from err


def check_store(metadata: config.MetadataConfig, output_root: str = "", writable: bool = False) -> None:
    """Raises `StoreError` when the metadata store is damaged, locked (for writing, with
    `writable`), unreachable, or missing from an output root that recorded runs
    (`output_root`'s last_run.json)."""
    if metadata.mysql is not None:
        _check_mysql(metadata)
        return
    if os.path.exists(metadata.sqlite_path):
        _check_sqlite(metadata, writable)
        return
    record = os.path.join(output_root, config.LAST_RUN_FILE) if output_root else ""
    if record and os.path.exists(record):
        raise StoreError(
            f"the metadata store {metadata.sqlite_path} is missing, though this output root recorded runs "
            f"({record}): restore it from a backup; or, {_new_history(metadata.sqlite_path)}. {NOTHING_CHANGED}"
        )


def resource_limit(err: BaseException) -> Optional[str]:
    """A message naming the limit `err` ran into, by what it says rather than by its type
    alone, or None if it is not a resource limit."""
    text = str(err).lower()
    if (isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT)) or any(s in text for s in DISK_FULL):
        where = _where(err, str(err), "no space left on device", "disk quota exceeded")
        return (f"no space left on the device{' writing' + where if where else ''}: free space under the output "
                f"root, the serving folder and the temporary folder, then run again. {NOTHING_CHANGED}")
    resource_error = isinstance(err, (MemoryError, OSError)) or type(err).__name__ == "ResourceExhaustedError"
    if not resource_error:
        return None
    if any(s in text for s in QUOTA):
        return (f"a quota ran out ({short(err)}): wait, or raise the quota, then run again. {NOTHING_CHANGED}")
    if isinstance(err, MemoryError) or any(s in text for s in OUT_OF_MEMORY) or not isinstance(err, OSError):
        return ("out of memory: the run needed more than this machine has (the log names the component); "
                "give it more memory, or fewer rows per run (docs/at-scale.md). " + NOTHING_CHANGED)
    return None


def cloud_storage_silent(err: BaseException) -> str:
    found = re.search(r"gs://[^\s'\"]+", str(err))
    what = f"reading or writing {found.group(0)}" if found else "a gs:// path"
    return (f"Cloud Storage did not answer {what} in time ({short(err, 160)}): check this machine's network "
            "to storage.googleapis.com (proxy, firewall, DNS) and Cloud Storage's status, then run again; a run "
            f"resumes from the components it recorded. {NOTHING_CHANGED}")


def short(err: BaseException, limit: int = 240) -> str:
    """The first line of `err`'s message, without byte strings, at most `limit` characters."""
    lines = str(err).strip().splitlines()
    text = re.sub(r"b(['\"]).*?\1", "<bytes>", lines[0] if lines else type(err).__name__).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def explain(err: BaseException, metadata: Optional[config.MetadataConfig] = None) -> str:
    """The one line a failed command prints for `err` (without "error: ")."""
    if isinstance(err, (StoreError, ValueError)) and not type(err).__module__.startswith(("tensorflow", "google")):
        return str(err)
    limit = resource_limit(err)
    if limit:
        return limit
    text = str(err).lower()
    if metadata is not None:
        if any(s in text for s in DAMAGED_STORE) and metadata.mysql is None:
            return damaged_store(metadata)
        if any(s in text for s in LOCKED_STORE) and metadata.mysql is None:
            return locked_store(metadata)
        if any(s in text for s in MYSQL_UNREACHABLE):
            return unreachable_store(metadata, short(err, 120))
    if any(s in text for s in CLOUD_STORAGE_SILENT):
        return cloud_storage_silent(err)
    if (isinstance(err, OSError) and err.errno == errno.EROFS) or any(s in text for s in READ_ONLY):
        where = _where(err, str(err), *READ_ONLY)
        return (f"{where.strip() or 'a folder the command writes'} is on a read-only file system: mount it "
                f"writable or point the command at another folder, then run again. {NOTHING_CHANGED}")
    if (isinstance(err, OSError) and err.errno in (errno.EACCES, errno.EPERM)) or type(err).__name__ == (
            "PermissionDeniedError") or any(s in text for s in NO_PERMISSION):
        where = _where(err, str(err), *NO_PERMISSION)
        return (f"no permission to write{where or ' a folder the command writes'}: give this user write access, "
                f"or point the command at another folder, then run again. {NOTHING_CHANGED}")
    if isinstance(err, FileNotFoundError) or type(err).__name__ == "NotFoundError":
        where = _where(err, str(err), "no such file or directory")
        return (f"{where.strip() or 'a file the command reads'} does not exist, or disappeared while the command "
                f"ran (moved or deleted?): check the path, put it back, then run again. {NOTHING_CHANGED}")
    refusal = MODEL_REFUSAL.search(str(err))
    if refusal:
        return (f"the model refused an example it was given: {refusal.group(1)} (rows [{refusal.group(2)}] of "
                f"a batch it scored): fix or leave out the examples that hold such a value, then run again. "
                f"{NOTHING_CHANGED}")
    return f"{type(err).__name__}: {short(err)} (the full log says where)"
