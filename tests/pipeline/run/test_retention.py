"""`gc`'s rules on a small metadata store built here: what is kept, what goes, in which order."""

from __future__ import annotations

import os
import time

import pytest
from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2 as mlmd

from components.custom import pusher
from pipeline import config
from pipeline.inspect import run_report
from pipeline.run import retention
from tests.mlmd_builder import DELETED, LIVE, MARKED, MetadataBuilder


@pytest.fixture
def store(tmp_path):
    connection = mlmd.ConnectionConfig()
    connection.fake_database.SetInParent()
    run_config = config.RunConfig(output_root=str(tmp_path / "out"), serving_dir=str(tmp_path / "serving"))
    return MetadataBuilder(metadata_store.MetadataStore(connection), run_config)


def test_the_newest_runs_are_kept_and_older_ones_removed_marked_before_their_files_go(store, monkeypatch):
    runs = [store.train(f"2026010{day}-000000-000000-1-k") for day in (1, 2, 3)]
    states_when_deleted = {}
    delete = retention._delete

    def watched(path):
        owners = [a for a in store.store.get_artifacts() if a.uri == path]
        states_when_deleted[path] = [(a.state, a.custom_properties[retention.MARKED_PROPERTY].double_value)
                                     for a in owners]
        return delete(path)

    monkeypatch.setattr(retention, "_delete", watched)
    found = store.collect(keep_runs=1)
    artifact_paths = [uri for uri, owners in states_when_deleted.items() if owners]
    assert len(artifact_paths) == 2 * len(runs[0])
    # Every artifact was marked, with the time, before its files went.
    assert all(state == MARKED and when > 0 for uri in artifact_paths for state, when in states_when_deleted[uri])
    assert found.removed_runs == ["20260101-000000-000000-1-k", "20260102-000000-000000-1-k"]
    for made in runs[:2]:
        for artifact_id in made.values():
            assert store.state(artifact_id) == DELETED
            assert not os.path.exists(store.uri(artifact_id))
    for artifact_id in runs[2].values():
        assert store.state(artifact_id) == LIVE and os.path.exists(store.uri(artifact_id))
    context = store.store.get_context_by_type_and_name(run_report.PIPELINE_RUN_CONTEXT, "20260101-000000-000000-1-k")
    assert retention.REMOVED_PROPERTY in context.custom_properties
    # A second collection finds nothing more to do.
    again = store.collect(keep_runs=1)
    assert again.removed_runs == [] and again.artifacts == [] and again.paths == []


def test_a_dry_run_lists_paths_and_bytes_and_changes_nothing(store):
    old = store.train("20260101-000000-000000-1-k")
    store.train("20260102-000000-000000-1-k")
    found = store.collect(keep_runs=1, dry_run=True)
    assert sorted(found.paths) == sorted(store.uri(a) for a in old.values())
    assert found.bytes == 100 * len(old)
    assert all(store.state(a) == LIVE and os.path.exists(store.uri(a)) for a in old.values())
    said = found.summary(dry_run=True)
    assert said.startswith("Would remove 1 run(s)") and "Removed" not in said
    assert said.endswith("Runs it would remove: 20260101-000000-000000-1-k")


def test_a_served_version_keeps_its_run_and_what_made_it_but_not_its_warm_start_history(store):
    first = store.train("20260101-000000-000000-1-k", push_version=1)
    served = store.train("20260102-000000-000000-1-k", base_model=first["Trainer", "model"], push_version=2)
    store.train("20260103-000000-000000-1-k")
    newest = store.train("20260104-000000-000000-1-k")
    # Version 1 was pruned from the serving folder: only version 2 is on disk.
    os.rmdir(os.path.join(store.config.model_serving_dir, "1"))
    found = store.collect(keep_runs=1)
    assert found.kept_runs == {"20260102-000000-000000-1-k": "pushed serving version 2",
                               "20260104-000000-000000-1-k": retention.NEWEST}
    assert all(store.state(a) == LIVE for a in list(served.values()) + list(newest.values()))
    # The warm-start model is an input of the served run: kept, without what made it.
    assert store.state(first["Trainer", "model"]) == LIVE and os.path.isdir(store.uri(first["Trainer", "model"]))
    assert store.state(first["ImportExampleGen", "examples"]) == DELETED
    assert store.state(first["Pusher", "pushed_model"]) == DELETED


def test_what_a_stopped_gc_marked_is_finished_by_the_next_even_in_a_kept_run(store):
    made = store.train("20260101-000000-000000-1-k")
    [examples] = store.store.get_artifacts_by_id([made["ImportExampleGen", "examples"]])
    examples.state = MARKED
    store.store.put_artifacts([examples])
    found = store.collect(keep_runs=1)
    assert found.removed_runs == []
    assert store.state(examples.id) == DELETED and not os.path.exists(examples.uri)
    assert store.state(made["Trainer", "model"]) == LIVE


def test_nothing_outside_the_pipeline_root_is_touched(store, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    old = store.train("20260101-000000-000000-1-k")
    [examples] = store.store.get_artifacts_by_id([old["ImportExampleGen", "examples"]])
    examples.uri = str(outside)
    store.store.put_artifacts([examples])
    store.train("20260102-000000-000000-1-k")
    store.collect(keep_runs=1)
    assert outside.is_dir() and store.state(examples.id) == LIVE


def test_keep_runs_must_be_at_least_one(store):
    with pytest.raises(ValueError, match="at least 1"):
        store.collect(keep_runs=0)


def _bless(store, artifact_id, model_id):
    artifact = store.artifact(artifact_id)
    artifact.custom_properties["blessed"].int_value = 1
    artifact.custom_properties["current_model_id"].int_value = model_id
    artifact.custom_properties["current_model_uri"].string_value = store.uri(model_id)
    store.store.put_artifacts([artifact])


def test_a_model_that_reached_serving_keeps_its_run_only_while_its_version_is_in_the_serving_folder(store):
    """The next run's baseline is read from the serving folder (components.custom.baseline),
    so a served blessing alone, its version gone, keeps nothing."""
    served = store.train("20260101-000000-000000-1-k")
    blessing_type = pusher.ServedModelBlessing.TYPE_NAME
    made = store._in_run("20260101-000000-000000-1-k", "Pusher", {"model": served["Trainer", "model"]},
                         {blessing_type: None})
    _bless(store, made["Pusher", blessing_type], served["Trainer", "model"])
    # A newer model the Evaluator blessed but that never reached serving (its check failed).
    evaluated = store.train("20260102-000000-000000-1-k")
    made = store._in_run("20260102-000000-000000-1-k", "Evaluator", {"model": evaluated["Trainer", "model"]},
                         {"blessing": None})
    _bless(store, made["Evaluator", "blessing"], evaluated["Trainer", "model"])
    store.train("20260103-000000-000000-1-k")
    found = store.collect(keep_runs=1)
    assert "20260101-000000-000000-1-k" in found.removed_runs
    assert "20260102-000000-000000-1-k" in found.removed_runs
    assert store.state(served["Trainer", "model"]) != LIVE


def test_what_a_resolver_returned_is_kept_without_its_history(store):
    old = store.train("20260101-000000-000000-1-k")
    store.train("20260102-000000-000000-1-k")
    # The newest run's resolver found the old model (an INTERNAL_OUTPUT event).
    run_context = store.store.get_context_by_type_and_name(run_report.PIPELINE_RUN_CONTEXT,
                                                           "20260102-000000-000000-1-k")
    [execution] = store.store.put_executions([mlmd.Execution(
        type_id=store._type("execution", "Resolver"), last_known_state=mlmd.Execution.COMPLETE)])
    event = mlmd.Event(type=mlmd.Event.INTERNAL_OUTPUT)
    event.path.steps.add().key = "model"
    store.store.put_execution(store.store.get_executions_by_id([execution])[0],
                              [(store.artifact(old["Trainer", "model"]), event)], [run_context])
    store.collect(keep_runs=1)
    assert store.state(old["Trainer", "model"]) == LIVE
    assert store.state(old["ImportExampleGen", "examples"]) == DELETED


def test_removed_runs_pages_and_old_logs_go_and_the_rest_stays(store):
    store.train("20260101-000000-000000-1-k")
    store.train("20260102-000000-000000-1-k")
    root = store.config.output_root
    os.makedirs(os.path.join(root, "reports"))
    os.makedirs(os.path.join(root, "logs"))

    def write(name, age):
        path = os.path.join(root, name)
        with open(path, "w") as handle:
            handle.write("x")
        os.utime(path, (time.time() - age, time.time() - age))
        return path

    removed_page = write("reports/20260101-000000-000000-1-k.html", 0)
    kept_page = write("reports/20260102-000000-000000-1-k.html", 1000)
    rejected_page = write("reports/20251231-000000-000000-1-rejected.html", 1000)
    old_log, new_log = write("logs/run-old.log", 1000), write("logs/run-new.log", -10)
    store.collect(keep_runs=1)
    assert not os.path.exists(removed_page) and not os.path.exists(rejected_page) and not os.path.exists(old_log)
    assert os.path.exists(kept_page) and os.path.exists(new_log)


def test_artifacts_on_another_file_system_are_planned_and_deleted_through_tf_io_gfile(tmp_path):
    """`gs://` here is TensorFlow's in-memory `ram://` file system: the same calls."""
    import tensorflow as tf

    connection = mlmd.ConnectionConfig()
    connection.fake_database.SetInParent()
    run_config = config.RunConfig(output_root=str(tmp_path / "out"), serving_dir=str(tmp_path / "serving"))
    root = "ram://bucket/pipeline_root"
    store = MetadataBuilder(metadata_store.MetadataStore(connection), run_config, root=root)
    old = store.train("20260101-000000-000000-1-k")
    new = store.train("20260102-000000-000000-1-k")
    found = retention.plan(store.store, config.Settings().pipeline_name, root, run_config.model_serving_dir, 1)
    found.paths = [path for path in found.paths if tf.io.gfile.exists(path)]  # as `collect` does
    assert sorted(found.paths) == sorted(store.uri(a) for a in old.values())
    assert sum(retention._bytes(path) for path in found.paths) == 100 * len(old)
    for path in found.paths:
        assert retention._delete(path)
    assert not any(tf.io.gfile.exists(store.uri(a)) for a in old.values())
    assert all(tf.io.gfile.exists(store.uri(a)) for a in new.values())
