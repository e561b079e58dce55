"""`preflight.check_records`: one pass over small data, file by file otherwise, and the
same verdicts either way."""

import glob
import os
import shutil
import zlib

import pytest
import tensorflow as tf

from pipeline.run import preflight


@pytest.fixture
def span_files(repo, tmp_path):
    files = []
    for number in (14, 15, 16):
        for index, path in enumerate(sorted(glob.glob(str(repo / "data" / f"span-{number}" / "*")))):
            target = tmp_path / f"span-{number}-{index}.gz"
            shutil.copy(path, target)
            files.append(str(target))
    return files


def _per_file(files):
    return sum(preflight._check_file(path) for path in files)


def test_small_data_is_counted_in_one_pass_and_as_file_by_file(span_files, monkeypatch):
    expected = _per_file(span_files)
    assert expected > 100
    monkeypatch.setattr(preflight, "_check_file", lambda path: pytest.fail("read file by file"))
    assert preflight.check_records(span_files) == expected


def test_beyond_the_one_pass_size_files_are_read_one_by_one(span_files, monkeypatch):
    expected = _per_file(span_files)
    monkeypatch.setattr(preflight, "_ONE_PASS_BYTES", 10)
    monkeypatch.setattr(preflight, "_count_in_one_pass", lambda files: pytest.fail("one pass"))
    assert preflight.check_records(span_files) == expected


def _write(path, records):
    with tf.io.TFRecordWriter(path, "GZIP") as out:
        for record in records:
            out.write(record)


def test_a_bad_file_among_small_data_is_named_as_file_by_file_names_it(span_files, tmp_path):
    wrong_type = tf.train.Example()
    wrong_type.features.feature["fare"].bytes_list.value.append(b"twelve dollars")
    bad = str(tmp_path / "wrong-type.gz")
    _write(bad, [wrong_type.SerializeToString()])
    with pytest.raises(preflight.BadDataError) as raised:
        preflight.check_records(span_files + [bad])
    # The feature and its types, not TensorFlow's internal function name.
    assert str(raised.value) == (
        f"{bad}: a record among 1-{preflight._CHECK_BATCH} has feature 'fare' as string, where the contract has "
        "float: fix the export upstream, or move the file out of the data root")

    garbage = str(tmp_path / "garbage.gz")
    _write(garbage, [b"\xff\x00 not an example"])
    with pytest.raises(preflight.BadDataError, match=r"garbage\.gz: a record among 1-.* not a serialized tf\.Example"):
        preflight.check_records([garbage] + span_files)


def test_a_cut_file_among_small_data_is_named(span_files, tmp_path):
    cut = str(tmp_path / "cut.gz")
    with open(span_files[0], "rb") as whole, open(cut, "wb") as out:
        out.write(whole.read()[:-40])
    with pytest.raises(preflight.BadDataError, match=r"cut\.gz .*copy it again"):
        preflight.check_records(span_files[1:] + [cut])
    # Cut inside a record: the records before it are counted one by one, and TensorFlow's
    # reason is said without its internal function and op names.
    with open(span_files[0], "rb") as whole, open(cut, "wb") as out:
        out.write(whole.read()[: os.path.getsize(span_files[0]) // 2])
    whole_records = sum(1 for _ in tf.data.TFRecordDataset(cut, compression_type="GZIP").take(10**6).apply(
        tf.data.experimental.ignore_errors()))
    with pytest.raises(preflight.BadDataError) as raised:
        preflight.check_records(span_files[1:] + [cut])
    message = str(raised.value)
    assert whole_records > 0 and f"truncated or corrupt after {whole_records} whole records: " in message, message
    assert "{{" not in message and "[Op:" not in message and message.endswith("move it out of the data root")


def test_a_file_without_records_among_small_data_is_named(span_files, tmp_path):
    empty = str(tmp_path / "no-records.gz")
    _write(empty, [])
    with pytest.raises(preflight.BadDataError, match=r"no-records\.gz.*holds no records"):
        preflight.check_records(span_files + [empty])


def test_a_check_started_ahead_runs_on_its_own_thread_and_gives_the_count_or_the_error(span_files, tmp_path,
                                                                                        monkeypatch):
    import threading

    threads = []
    check = preflight.check_records
    monkeypatch.setattr(preflight, "check_records",
                        lambda files: threads.append(threading.current_thread().name) or check(files))
    expected = _per_file(span_files)
    assert preflight.start_check(span_files).result(timeout=60) == expected
    assert len(threads) == 1 and threads[0].startswith("record-check")

    empty = str(tmp_path / "no-records.gz")
    _write(empty, [])
    with pytest.raises(preflight.BadDataError, match=r"no-records\.gz.*holds no records"):
        preflight.start_check(span_files + [empty]).result(timeout=60)


def test_a_check_started_ahead_neither_holds_the_process_nor_hides_an_unexpected_error(span_files, monkeypatch):
    import threading

    def broken(files):
        assert threading.current_thread().daemon  # a process that ends does not wait for it
        raise RuntimeError("unexpected")

    monkeypatch.setattr(preflight, "check_records", broken)
    with pytest.raises(RuntimeError, match="unexpected"):
        preflight.start_check(span_files).result(timeout=60)


def test_a_whole_file_is_known_by_its_trailer_and_others_are_read_through(span_files, tmp_path, monkeypatch):
    read_through = []
    original = preflight.gzip_problem
    monkeypatch.setattr(preflight, "gzip_problem", lambda path: read_through.append(path) or original(path))
    expected = _per_file(span_files)
    assert read_through == []
    # Two GZIP members: the trailer is the last member's, so the stream is read through,
    # and the file is whole.
    two_members = str(tmp_path / "two-members.gz")
    with open(two_members, "wb") as out:
        for path in span_files[:2]:
            with open(path, "rb") as member:
                out.write(member.read())
    assert preflight._check_file(two_members) == _per_file(span_files[:2])
    assert read_through == [two_members]
    # Cut where TensorFlow's reader stops without an error: after whole records, at a
    # flush of the deflated stream, before its last block and trailer.
    records = tmp_path / "records.tfrecord"
    with tf.io.TFRecordWriter(str(records)) as out:
        for record in tf.compat.v1.io.tf_record_iterator(span_files[0], "GZIP"):
            out.write(record)
    deflate = zlib.compressobj(6, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    cut = tmp_path / "cut-between-records.gz"
    cut.write_bytes(deflate.compress(records.read_bytes()) + deflate.flush(zlib.Z_SYNC_FLUSH))
    with pytest.raises(preflight.BadDataError, match=r"cut-between-records\.gz is truncated"):
        preflight._check_file(str(cut))
    assert read_through[-1] == str(cut)
    assert expected > 0
