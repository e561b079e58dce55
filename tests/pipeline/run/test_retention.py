"""`gc`'s rules on a small metadata store built here: what is kept, what goes, in which order."""

from __future__ import annotations

import os

import pytest
from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2 as mlmd

from components.custom import pusher
from pipeline import config
from pipeline.inspect import run_report
from pipeline.run import retention

PIPELINE = config.Settings().pipeline_name
LIVE, MARKED, DELETED = mlmd.Artifact.LIVE, mlmd.Artifact.MARKED_FOR_DELETION, mlmd.Artifact.DELETED


class Store:
    """An in-memory MLMD with the pipeline's shape: runs and nodes as contexts, an
    execution per node of a run, artifacts whose URIs are folders under the pipeline root."""

    def __init__(self, tmp_path):
        connection = mlmd.ConnectionConfig()
        connection.fake_database.SetInParent()
        self.store = metadata_store.MetadataStore(connection)
        self.config = config.RunConfig(output_root=str(tmp_path / "out"), serving_dir=str(tmp_path / "serving"))
        self.root = self.config.pipeline_root
        self.types = {}
        self.nodes = {}

    def _type(self, kind, name):
        if (kind, name) not in self.types:
            message = {"context": mlmd.ContextType, "execution": mlmd.ExecutionType, "artifact": mlmd.ArtifactType}
            put = getattr(self.store, f"put_{kind}_type")
            self.types[kind, name] = put(message[kind](name=name))
        return self.types[kind, name]

    @staticmethod
    def _event(kind, key):
        event = mlmd.Event(type=kind)
        event.path.steps.add().key = key
        return event

    def train(self, run_id, base_model=None, push_version=None):
        """A run: examples -> model (warm-started from `base_model`) -> pushed model."""
        made = self._in_run(run_id, "ImportExampleGen", {}, {"examples": None})
        inputs = {"examples": made["ImportExampleGen", "examples"]}
        if base_model is not None:
            inputs["base_model"] = base_model
        made.update(self._in_run(run_id, "Trainer", inputs, {"model": None}))
        if push_version is not None:
            made.update(self._in_run(run_id, "Pusher", {"model": made["Trainer", "model"]}, {"pushed_model": None}))
            [pushed] = self.store.get_artifacts_by_id([made["Pusher", "pushed_model"]])
            pushed.custom_properties[pusher.VERSION_PROPERTY].string_value = str(push_version)
            destination = os.path.join(self.config.model_serving_dir, str(push_version))
            pushed.custom_properties[pusher.DESTINATION_PROPERTY].string_value = destination
            self.store.put_artifacts([pushed])
            os.makedirs(destination)
        return made

    def _in_run(self, run_id, node, inputs, outputs):
        """A node's execution in run `run_id`, with new output artifacts of 100 bytes each."""
        run_context = self.store.get_context_by_type_and_name(run_report.PIPELINE_RUN_CONTEXT, run_id)
        if run_context is None:
            [context_id] = self.store.put_contexts([mlmd.Context(
                type_id=self._type("context", run_report.PIPELINE_RUN_CONTEXT), name=run_id)])
            [run_context] = self.store.get_contexts_by_id([context_id])
        if node not in self.nodes:
            [self.nodes[node]] = self.store.put_contexts([mlmd.Context(
                type_id=self._type("context", run_report.NODE_CONTEXT), name=f"{PIPELINE}.{node}")])
        [execution] = self.store.put_executions([mlmd.Execution(
            type_id=self._type("execution", node), last_known_state=mlmd.Execution.COMPLETE)])
        made, events = {}, []
        for key, artifact_id in inputs.items():
            events.append((self.artifact(artifact_id), self._event(mlmd.Event.INPUT, key)))
        for key in outputs:
            uri = os.path.join(self.root, node, key, str(execution))
            os.makedirs(uri)
            with open(os.path.join(uri, "data"), "w") as handle:
                handle.write("x" * 100)
            [artifact_id] = self.store.put_artifacts([mlmd.Artifact(
                type_id=self._type("artifact", key), uri=uri, state=LIVE)])
            made[node, key] = artifact_id
            events.append((self.artifact(artifact_id), self._event(mlmd.Event.OUTPUT, key)))
        execution_message = self.store.get_executions_by_id([execution])[0]
        [node_context] = self.store.get_contexts_by_id([self.nodes[node]])
        self.store.put_execution(execution_message, events, [run_context, node_context])
        return made

    def artifact(self, artifact_id):
        return self.store.get_artifacts_by_id([artifact_id])[0]

    def state(self, artifact_id):
        return self.artifact(artifact_id).state

    def uri(self, artifact_id):
        return self.artifact(artifact_id).uri

    def collect(self, keep_runs, dry_run=False):
        return retention.collect(self.config, keep_runs, dry_run=dry_run, store=self.store)


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path)


def test_the_newest_runs_are_kept_and_older_ones_removed_marked_before_their_files_go(store):
    runs = [store.train(f"2026010{day}-000000-000000-1-k") for day in (1, 2, 3)]
    found = store.collect(keep_runs=1)
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
    assert store.state(first["Trainer", "model"]) == LIVE
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
