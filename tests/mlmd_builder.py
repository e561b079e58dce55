"""Builds small MLMD stores of the pipeline's shape, for `gc`'s tests: runs and nodes as
contexts, executions with events, artifacts whose URIs are folders under the pipeline root."""

from __future__ import annotations

import os

import tensorflow as tf
from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2 as mlmd

from components.custom import pusher
from pipeline import config
from pipeline.inspect import run_report
from pipeline.run import retention

PIPELINE = config.Settings().pipeline_name
LIVE, MARKED, DELETED = mlmd.Artifact.LIVE, mlmd.Artifact.MARKED_FOR_DELETION, mlmd.Artifact.DELETED


class MetadataBuilder:
    """An in-memory MLMD with the pipeline's shape: runs and nodes as contexts, an
    execution per node of a run, artifacts whose URIs are folders under the pipeline root."""

    def __init__(self, store: metadata_store.MetadataStore, run_config: config.RunConfig, root: str = ""):
        self.store = store
        self.config = run_config
        # Where artifacts are written: the pipeline root, or any file system TensorFlow has.
        self.root = root or self.config.pipeline_root
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
        if node not in self.nodes:  # one context per node, shared by every run (and store user)
            found = self.store.get_context_by_type_and_name(run_report.NODE_CONTEXT, f"{PIPELINE}.{node}")
            self.nodes[node] = found.id if found is not None else self.store.put_contexts([mlmd.Context(
                type_id=self._type("context", run_report.NODE_CONTEXT), name=f"{PIPELINE}.{node}")])[0]
        [execution] = self.store.put_executions([mlmd.Execution(
            type_id=self._type("execution", node), last_known_state=mlmd.Execution.COMPLETE)])
        made, events = {}, []
        for key, artifact_id in inputs.items():
            events.append((self.artifact(artifact_id), self._event(mlmd.Event.INPUT, key)))
        for key in outputs:
            uri = os.path.join(self.root, node, key, str(execution))
            tf.io.gfile.makedirs(uri)
            with tf.io.gfile.GFile(os.path.join(uri, "data"), "w") as handle:
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
