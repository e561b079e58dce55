"""The one line a failure prints: what broke, where, and what to do (pipeline/failures.py)."""

import errno
import sqlite3
import time

import pytest
import tensorflow as tf
from ml_metadata import errors as mlmd_errors

from pipeline import config, failures
from tests.helpers import SilentSocket, free_ports


@pytest.fixture
def store(tmp_path):
    return config.MetadataConfig(str(tmp_path / "metadata.sqlite"))


def test_resource_errors_are_named_by_what_they_say_not_by_their_type():
    """TensorFlow raises ResourceExhaustedError for a full disk as for exhausted memory."""
    full = tf.errors.ResourceExhaustedError(
        None, None, "/srv/serving/big_tip/.staging-5/variables/x; No space left on device")
    assert failures.explain(full).startswith(
        "no space left on the device writing /srv/serving/big_tip/.staging-5/variables/x:")
    oom = tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor with shape[1000000,512]")
    assert failures.explain(oom).startswith("out of memory:")
    quota = tf.errors.ResourceExhaustedError(None, None, "Quota exceeded for quota metric 'Write requests'")
    assert failures.explain(quota).startswith("a quota ran out (Quota exceeded for quota metric")
    assert failures.explain(OSError("[Errno 28] No space left on device")).startswith("no space left on the device:")
    beam_wrapped = RuntimeError("I/O error at gs://b/x: No space left on device [while running 'Write']")
    assert failures.explain(beam_wrapped).startswith("no space left on the device writing gs://b/x:")
    store_full = mlmd_errors.InternalError(
        "Error when executing query: database or disk is full query:  UPDATE `Execution` SET ...")
    assert failures.explain(store_full).startswith("no space left on the device: free space under the output root")
    assert failures.resource_limit(OSError(2, "No such file or directory", "/x")) is None
    assert failures.resource_limit(ValueError("out of memory")) is None


def test_permission_read_only_and_vanished_paths_are_named():
    denied = failures.explain(PermissionError(errno.EACCES, "Permission denied", "/srv/out/logs"))
    assert denied.startswith("no permission to write /srv/out/logs: give this user write access")
    tf_denied = tf.errors.PermissionDeniedError(None, None, "/srv/serving/big_tip; Permission denied")
    assert failures.explain(tf_denied).startswith("no permission to write /srv/serving/big_tip:")
    read_only = failures.explain(OSError(errno.EROFS, "Read-only file system", "/mnt/ro/serving"))
    assert read_only.startswith("/mnt/ro/serving is on a read-only file system: mount it writable")
    gone = tf.errors.NotFoundError(None, None, "/data/span-16/trips.gz; No such file or directory")
    assert failures.explain(gone).startswith(
        "/data/span-16/trips.gz does not exist, or disappeared while the command ran")


def test_a_damaged_or_locked_sqlite_store_is_named_with_what_to_do(store, tmp_path):
    with open(store.sqlite_path, "wb") as damaged:
        damaged.write(b"\x00garbage" * 4096)
    with pytest.raises(failures.StoreError, match=r"metadata store .*metadata.sqlite is damaged") as found:
        failures.check_store(store)
    assert "mv " in str(found.value) and "reuses nothing" in str(found.value)
    mlmd = RuntimeError("Error when executing query: file is not a database query:  CREATE TABLE IF NOT EXISTS")
    assert failures.explain(mlmd, store) == failures.damaged_store(store)

    (tmp_path / "metadata.sqlite").unlink()
    sqlite3.connect(store.sqlite_path).execute("CREATE TABLE t (x)").connection.commit()
    holder = sqlite3.connect(store.sqlite_path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        started = time.monotonic()
        with pytest.raises(failures.StoreError, match="is locked by another program"):
            failures.check_store(store, writable=True)
        assert time.monotonic() - started < failures.STORE_TIMEOUT_SECONDS + 3
    finally:
        holder.execute("ROLLBACK")
    failures.check_store(store, writable=True)  # free again: no error


def test_a_store_missing_from_an_output_root_with_runs_is_refused(store, tmp_path):
    failures.check_store(store, str(tmp_path))  # a new output root: nothing to miss
    (tmp_path / "last_run.json").write_text("{}")
    with pytest.raises(failures.StoreError, match="is missing, though this output root recorded runs"):
        failures.check_store(store, str(tmp_path))


def test_a_mysql_server_that_refuses_or_never_answers_costs_seconds():
    (port,) = free_ports()
    refused = config.MetadataConfig("", config.MySqlAddress("127.0.0.1", port, "mlmd"))
    with pytest.raises(failures.StoreError, match=rf"mysql://127.0.0.1:{port}/mlmd cannot be used"):
        failures.check_store(refused)

    with SilentSocket() as silent:
        hanging = config.MetadataConfig("", config.MySqlAddress("127.0.0.1", silent.port, "mlmd"))
        started = time.monotonic()
        with pytest.raises(failures.StoreError, match=r"no answer within 5 s"):
            failures.check_store(hanging)
        assert silent.held  # it was reached, and said nothing
    assert time.monotonic() - started < failures.STORE_TIMEOUT_SECONDS + 2


def test_an_unforeseen_error_is_one_line_without_bytes():
    err = RuntimeError("Not a valid TFRecord. Fewer than 497 bytes: b'0aea030a100a0762' \n more detail")
    line = failures.explain(err)
    assert line == "RuntimeError: Not a valid TFRecord. Fewer than 497 bytes: <bytes> (the full log says where)"


@pytest.mark.parametrize("curl", ["libcurl code 28 meaning 'Timeout was reached', error details: SSL connection "
                                  "timeout", "libcurl code 6 meaning 'Couldn't resolve host name'"])
def test_cloud_storage_out_of_tries_is_named_with_the_path_and_what_to_do(curl):
    err = tf.errors.AbortedError(None, None, f"All 3 retry attempts failed. The last failure: Error executing an "
                                             f"HTTP request: {curl}\n\t when reading metadata of gs://b/data/span-3")
    line = failures.explain(err)
    assert line.startswith("Cloud Storage did not answer reading or writing gs://b/data/span-3 in time (All 3 retry")
    assert "storage.googleapis.com" in line and line.endswith(failures.NOTHING_CHANGED)
    assert "\n" not in line


def test_a_value_the_model_refuses_is_named_with_its_rows_not_as_a_graph_error():
    """As batch scoring (Beam's RunInference) raises a serving signature's refusal
    (`export.refuse_invalid`): wrapped, its first line "Graph execution error"."""
    wrapped = RuntimeError(
        "tensorflow.python.framework.errors_impl.InvalidArgumentError: Graph execution error:\n\n"
        "assertion failed: [fare is required and must be a finite number, got NaN or an infinity] [in rows] [0 3]\n"
        "\t [[{{node cond/Assert/AssertGuard/Assert}}]] [while running 'Score/RunInferenceImpl']")
    assert failures.explain(wrapped) == (
        "the model refused an example it was given: fare is required and must be a finite number, got NaN or an "
        "infinity (rows [0 3] of a batch it scored): fix or leave out the examples that hold such a value, then "
        f"run again. {failures.NOTHING_CHANGED}")
    other = RuntimeError("InvalidArgumentError: Graph execution error:\n\nassertion failed: [x > 0]")
    assert failures.explain(other).endswith("(the full log says where)")


def test_a_new_history_moves_the_store_the_last_run_and_the_outputs_aside_together(tmp_path):
    """A new store numbers its executions from 1 again: beside the old outputs, its first
    run's components would write into folders the old ones filled."""
    store = tmp_path / "metadata.sqlite"
    message = failures.damaged_store(config.MetadataConfig(str(store)))
    assert (f"move {store} {tmp_path / config.LAST_RUN_FILE} {tmp_path / config.PIPELINE_ROOT_DIR} aside together"
            in message) and "no blessed model" not in message
