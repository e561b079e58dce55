"""The imports at the root of the DAG are keyed by content, not by names or mtimes."""

import os

from tfx.proto import example_gen_pb2

from components import ingest, spans


def _fingerprint(data_root):
    splits = [example_gen_pb2.Input.Split(name="all", pattern=spans.ALL_SPANS_PATTERN)]
    processor = ingest._ContentDriver(None).get_input_processor(splits=splits, input_base_uri=str(data_root))
    processor.resolve_span_and_version()
    return processor.get_input_fingerprint(0, None)


def test_example_gen_fingerprint_follows_the_bytes_not_the_mtime_or_the_name(tmp_path):
    (tmp_path / "span-1").mkdir()
    data = tmp_path / "span-1" / "a.gz"
    data.write_bytes(b"first bytes")
    (tmp_path / "span-1" / "_SUCCESS").write_bytes(b"")
    before = _fingerprint(tmp_path)
    data.unlink()
    data.write_bytes(b"first bytes")
    os.utime(data, (1, 1))
    assert _fingerprint(tmp_path) == before
    data.rename(tmp_path / "span-1" / "renamed.gz")
    assert _fingerprint(tmp_path) == before
    (tmp_path / "span-1" / "renamed.gz").write_bytes(b"other bytes")
    assert _fingerprint(tmp_path) != before
    (tmp_path / "span-1" / "renamed.gz").write_bytes(b"first bytes")
    assert _fingerprint(tmp_path) == before
    (tmp_path / "span-2").mkdir()
    (tmp_path / "span-1" / "renamed.gz").rename(tmp_path / "span-2" / "renamed.gz")
    assert _fingerprint(tmp_path) != before  # the same bytes in another span
    (tmp_path / "span-2" / "renamed.gz").rename(tmp_path / "span-1" / "renamed.gz")
    (tmp_path / "span-1" / "b.gz").write_bytes(b"more")
    assert _fingerprint(tmp_path) != before
