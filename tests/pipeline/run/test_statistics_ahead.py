"""The data gate's per-span statistics computed ahead in a process of their own: the gate's
own statistics, taken only for the very files, schema and rate they were computed from,
and nothing computed where the gate would not use it."""

import os
import types

import pytest
import tensorflow_data_validation as tfdv

from components.custom import span_statistics
from components.support import spans
from pipeline import config, patches
from pipeline.patches import machinery
from pipeline.run import statistics_ahead

pytestmark = pytest.mark.timeout(180)


def _run_config(data_root, window_size=None, beam_args=()):
    settings = types.SimpleNamespace(window_size=window_size, beam_args=tuple(beam_args))
    output_root = os.path.join(os.path.dirname(str(data_root)), "out")
    return types.SimpleNamespace(data_root=str(data_root), output_root=output_root, settings=settings)


@pytest.fixture
def computed(tmp_path, copy_spans):
    """Three spans of data/, and what the process started for them left (its file, or None)."""
    data_root = copy_spans(tmp_path / "data", [14, 15, 16])
    run_config = _run_config(data_root)
    # What a run killed outright left: deleted by the next run's start.
    left = os.path.join(run_config.output_root, config.STATISTICS_AHEAD_DIR, "left-by-a-killed-run")
    os.makedirs(left)
    ahead = statistics_ahead.start(run_config)
    assert not os.path.exists(left)
    try:
        yield data_root, ahead.wait()
    finally:
        ahead.stop()
    assert not os.path.exists(os.path.join(run_config.output_root, config.STATISTICS_AHEAD_DIR))


def test_the_statistics_computed_ahead_are_the_gate_s_and_stand_only_for_their_own_inputs(computed, monkeypatch):
    data_root, path = computed
    assert path is not None and os.path.isfile(path)
    found = spans.list_spans(str(data_root))
    schema = tfdv.load_schema_text(config.schema_file())
    with machinery.patched(patches.for_statistics_in_memory() if machinery.enabled() else []):  # the run's
        gate_s = span_statistics.span_statistics_in_process(found, schema, 1.0)

    span_statistics.expect_ahead(lambda: path)
    try:
        taken = span_statistics.computed_ahead(found, schema, 1.0)
        assert taken is not None and sorted(taken) == [14, 15, 16]
        assert {n: s.SerializeToString(deterministic=True) for n, s in taken.items()} == {
            n: s.SerializeToString(deterministic=True) for n, s in gate_s.items()}
        assert taken[16].datasets[0].num_examples > 0
        # Other spans, another rate, another schema, a file written since: computed by the gate.
        assert span_statistics.computed_ahead(found[1:], schema, 1.0) is None
        assert span_statistics.computed_ahead(found, schema, 0.5) is None
        other = tfdv.load_schema_text(config.schema_file())
        other.feature[0].presence.min_count = 12345
        assert span_statistics.computed_ahead(found, other, 1.0) is None
        rewritten = found[0].files[0][0]
        os.utime(rewritten, ns=(os.stat(rewritten).st_atime_ns, os.stat(rewritten).st_mtime_ns + 1))
        assert span_statistics.computed_ahead(found, schema, 1.0) is None
        # A process that wrote nothing.
        span_statistics.expect_ahead(lambda: None)
        assert span_statistics.computed_ahead(found, schema, 1.0) is None
    finally:
        span_statistics.expect_ahead(None)
    assert span_statistics.computed_ahead(found, schema, 1.0) is None


def test_nothing_is_computed_where_the_gate_would_not_compute_in_its_process(tmp_path, copy_spans, monkeypatch):
    data_root = copy_spans(tmp_path / "data", [15, 16])
    output = str(tmp_path / "out.pb")

    def compute(*beam_args):
        return statistics_ahead.compute(str(data_root), config.schema_file(), output, list(beam_args))

    assert compute("--runner=PortableRunner", "--job_endpoint=localhost:1") == statistics_ahead.DECLINED
    rows = sum(len(span_statistics.span_records(span, 1.0)) for span in spans.list_spans(str(data_root)))
    monkeypatch.setattr(span_statistics, "IN_PROCESS_ROWS", rows - 1)
    assert compute() == statistics_ahead.DECLINED
    monkeypatch.setattr(span_statistics, "IN_PROCESS_ROWS", rows)
    monkeypatch.setattr(span_statistics, "SPAN_SAMPLE_ROWS", rows // 2 - 1)  # the gate would sample
    assert compute() == statistics_ahead.DECLINED
    assert not os.path.exists(output)
    monkeypatch.setattr(span_statistics, "SPAN_SAMPLE_ROWS", rows)
    assert compute() == 0 and os.path.isfile(output) and os.path.isfile(output + ".key")
    # Window mode, a data root elsewhere: no process.
    assert statistics_ahead.start(_run_config(data_root, window_size=2)) is None
    assert statistics_ahead.start(_run_config("gs://bucket/data")) is None


def test_a_process_that_fails_leaves_the_gate_its_own_computation_and_the_log_its_reason(tmp_path, caplog):
    ahead = statistics_ahead.start(_run_config(tmp_path / "no-such-data"))
    try:
        with caplog.at_level("INFO"):
            assert ahead.wait() is None
    finally:
        ahead.stop()
    assert "ended with status 1" in caplog.text and "no-such-data" in caplog.text


def test_the_gate_waits_for_the_process_a_bounded_time_then_stops_it(tmp_path, copy_spans, monkeypatch, caplog):
    ahead = statistics_ahead.start(_run_config(copy_spans(tmp_path / "data", [16])))
    monkeypatch.setattr(statistics_ahead, "WAIT_SECONDS", 0.01)  # still importing TensorFlow by then
    try:
        with caplog.at_level("INFO"):
            assert ahead.wait() is None
        assert ahead.process.poll() is not None  # stopped, not left running
    finally:
        ahead.stop()
    assert "not done after" in caplog.text
