"""Reading one run back from MLMD costs the same in the first week and after a year, and
loads neither TensorFlow nor TFX."""

from __future__ import annotations

import json
import subprocess
import sys

from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2 as mlmd

from components.custom import recorded
from pipeline import config
from pipeline.inspect import run_report
from tests.helpers import without_heavy_libraries
from tests.mlmd_builder import PIPELINE, MetadataBuilder


class CountingStore:
    """A metadata store that counts the executions its reads return."""

    def __init__(self, store):
        self.store = store
        self.executions_read = 0

    def __getattr__(self, name):
        method = getattr(self.store, name)
        if not name.startswith("get_executions"):
            return method

        def counted(*args, **kwargs):
            found = method(*args, **kwargs)
            self.executions_read += len(found)
            return found

        return counted


def test_a_run_is_read_without_reading_the_other_runs_executions(tmp_path):
    connection = mlmd.ConnectionConfig()
    connection.fake_database.SetInParent()
    builder = MetadataBuilder(metadata_store.MetadataStore(connection),
                              config.RunConfig(output_root=str(tmp_path / "out"), serving_dir=str(tmp_path / "s")))
    for week in range(1, 31):
        builder.train(f"2026{week:04d}-000000-000000-1-k")
    counting = CountingStore(builder.store)
    records = run_report.run_records(counting, PIPELINE, "20260007-000000-000000-1-k")
    assert [node.node_id for node in records.nodes] == ["ImportExampleGen", "Trainer"]
    assert set(records.outputs) == {"ImportExampleGen", "Trainer"}
    # Its own two executions, not the thirty runs' sixty.
    assert counting.executions_read <= 2


def test_history_and_lineage_read_the_store_without_tensorflow_or_tfx(tmp_path):
    """`history` and `lineage` (`pipeline.inspect.lineage`) and what they read through."""
    code = "import pipeline.inspect.commands, pipeline.inspect.lineage, pipeline.inspect.monitor_records"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env=without_heavy_libraries(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]


def test_the_metrics_the_evaluator_recorded_are_read_from_the_store_not_its_files(tmp_path):
    evaluation = mlmd.Artifact(uri=str(tmp_path / "no-such-evaluation"))
    metrics = {"auc": 0.93, "example_count": 372.0}
    evaluation.custom_properties[recorded.METRICS_PROPERTY].string_value = json.dumps(metrics)
    assert run_report.eval_metrics(evaluation) == metrics


def test_the_auc_gc_kept_on_a_run_s_context_is_the_candidate_s_overall_one():
    context = mlmd.Context(name="run")
    assert run_report.kept_auc(context) is None
    context.custom_properties[run_report.EVAL_SUMMARY_PROPERTY].string_value = json.dumps(
        {"candidate": {"Overall": [0.91, 300.0], "payment_type:Cash": [0.8, 90.0]},
         "baseline": {"Overall": [0.9, 300.0]}})
    assert run_report.kept_auc(context) == 0.91
    context.custom_properties[run_report.EVAL_SUMMARY_PROPERTY].string_value = json.dumps(
        {"candidate": {}, "baseline": {}})
    assert run_report.kept_auc(context) is None
