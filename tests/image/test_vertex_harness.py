"""The harness's own rules (tests/image/vertex.py), on small inputs: no image needed."""

import json
import os
import subprocess
import sys
import time

import pytest

from tests.image import gce_metadata, vertex

VERDICT = "(inputs.artifacts['_DataGate.verdict'].artifacts[0].metadata['blessed'] == 1.0)"


def _inputs(blessed):
    return {"parameters": {}, "artifacts": {"_DataGate.verdict": {"artifacts": [
        {"name": "a/1", "uri": "gs://b/v", "metadata": {"blessed": blessed}}]}}}


def test_a_condition_reads_artifact_metadata_as_a_struct_holds_it():
    # An integer 1 in the executor's output is the double 1.0 in Vertex's metadata Struct.
    assert vertex.condition_holds(VERDICT, _inputs(1))
    assert vertex.condition_holds(VERDICT, _inputs(1.0))
    assert not vertex.condition_holds(VERDICT, _inputs(0))


def test_a_condition_that_is_not_a_bool_is_refused():
    with pytest.raises(vertex.HarnessError, match="not a bool"):
        vertex.condition_holds("inputs.artifacts['_DataGate.verdict'].artifacts[0].metadata['blessed']", _inputs(1))


def _artifact(store, title, **metadata):
    artifact = {"name": store.new_name(), "type": {"instanceSchema": f"title: {title}\ntype: object\n"},
                "uri": f"gs://b/{title}", "metadata": metadata}
    store.record("p", "job-1", artifact)
    return artifact


def test_resolver_filters_pick_the_newest_match_of_the_pipeline(tmp_path):
    store = vertex.ArtifactStore(str(tmp_path / "artifacts.json"))
    model = _artifact(store, "tfx.Model")
    _artifact(store, "tfx.ModelBlessing", blessed=1.0, current_model_id=model["name"])
    newer = _artifact(store, "tfx.ModelBlessing", blessed=1.0, current_model_id="other")
    _artifact(store, "tfx.ModelBlessing", blessed=0.0, current_model_id="x")
    blessed = 'schema_title="tfx.ModelBlessing" AND state=LIVE AND metadata.blessed.number_value=1'
    assert store.query("p", blessed) == [vertex.strip_record(newer)]
    assert store.query("another pipeline", blessed) == []
    # What a later job sees: the store is a file.
    again = vertex.ArtifactStore(str(tmp_path / "artifacts.json"))
    query = vertex.resolve_filter(
        'schema_title="tfx.Model" AND state=LIVE AND name="{{$.inputs.artifacts[\'input\'].metadata'
        "['current_model_id']}}\"",
        {"artifacts": {"input": {"artifacts": [{"metadata": {"current_model_id": model["name"]}}]}}},
    )
    assert again.query("p", query) == [vertex.strip_record(model)]
    with pytest.raises(vertex.HarnessError, match="not understood"):
        store.query("p", "uri=\"gs://b\"")


def test_parameters_take_the_schema_2_0_0_form_of_their_definition():
    assert vertex.legacy_value(6.0, "INT") == {"intValue": "6"}
    assert vertex.legacy_value("0.5", "DOUBLE") == {"doubleValue": 0.5}
    assert vertex.legacy_value("{}", "STRING") == {"stringValue": "{}"}
    assert vertex.legacy_value(3.0, "STRING") == {"stringValue": "3"}
    assert vertex.legacy_value({"a": 1}, "STRING") == {"stringValue": json.dumps({"a": 1})}


def test_tasks_run_after_what_they_take_and_a_cycle_is_refused():
    tasks = {
        "b": {"inputs": {"artifacts": {"x": {"taskOutputArtifact": {"producerTask": "a", "outputArtifactKey": "o"}}}}},
        "c": {"dependentTasks": ["b"], "inputs": {"parameters": {
            "p": {"taskOutputParameter": {"producerTask": "a", "outputParameterKey": "q"}}}}},
        "a": {},
    }
    assert vertex.dag_order(tasks) == ["a", "b", "c"]
    tasks["a"] = {"dependentTasks": ["c"]}
    with pytest.raises(vertex.HarnessError, match="wait on"):
        vertex.dag_order(tasks)


class _Timed(vertex.VertexJob):
    """A job whose tasks each take a moment, recording when each ran; `fails` fail."""

    def __init__(self, fails=()):
        self.fails = set(fails)
        self.spans = {}

    def run_task(self, name, task, results, final_status=None):
        started = time.monotonic()
        time.sleep(0.3)
        self.spans[name] = (started, time.monotonic())
        return vertex.TaskResult(name, "FAILED" if name in self.fails else "SUCCEEDED")


def test_tasks_ready_together_run_together_and_a_failed_one_stops_only_what_waits_for_it():
    tasks = {"a": {}, "b": {"dependentTasks": ["a"]}, "c": {"dependentTasks": ["a"]},
             "d": {"dependentTasks": ["b", "c"]}, "e": {"dependentTasks": ["c"]}}
    job, results = _Timed(), {}
    assert job.run_dag(tasks, results) == ("SUCCEEDED", {})
    spans = job.spans
    assert spans["b"][0] < spans["c"][1] and spans["c"][0] < spans["b"][1]  # side by side
    assert min(spans["b"][0], spans["c"][0]) >= spans["a"][1]
    assert spans["d"][0] >= max(spans["b"][1], spans["c"][1]) and spans["e"][0] >= spans["c"][1]
    job, results = _Timed(fails={"b"}), {}
    state, error = job.run_dag(tasks, results)
    assert state == "FAILED" and error["message"].startswith("task b failed"), error
    assert {name: result.state for name, result in results.items()} == {
        "a": "SUCCEEDED", "b": "FAILED", "c": "SUCCEEDED", "d": "NOT_TRIGGERED", "e": "SUCCEEDED"}


class _Starts(vertex.Image):
    """An image whose attempts write the given outputs to the log, one per attempt."""

    def __init__(self, outputs):
        super().__init__("image", {})
        self.outputs = list(outputs)
        self.attempts = 0

    def run_once(self, argv, log_path, timeout, env=None):
        text, status = self.outputs[self.attempts]
        self.attempts += 1
        with open(log_path, "a") as log:
            log.write(text)
        return status


NOT_STARTED = ("Close_Fd sealing memfd copy: Device or resource busy\nError: exit status 1\n", 1)


def test_a_container_buildah_failed_to_start_is_started_again(tmp_path):
    log = tmp_path / "task.log"
    image = _Starts([NOT_STARTED, ("done\n", 0)])
    assert image.run(["true"], str(log)) == 0
    assert image.attempts == 2
    assert "did not start (attempt 1)" in log.read_text()


def test_a_task_that_failed_is_not_run_again_nor_one_that_never_starts_forever(tmp_path):
    # The task's own output beside buildah's line: the task ran, and its failure stands.
    ran = _Starts([("Traceback ...\nValueError: bad\n" + NOT_STARTED[0], 1), ("done\n", 0)])
    assert ran.run(["true"], str(tmp_path / "ran.log")) == 1
    assert ran.attempts == 1
    never = _Starts([NOT_STARTED] * (vertex.START_ATTEMPTS + 1))
    assert never.run(["true"], str(tmp_path / "never.log")) == 1
    assert never.attempts == vertex.START_ATTEMPTS


AUTH = """
import json
import google.auth
from google.auth.transport import requests
credentials, project = google.auth.default()
credentials.refresh(requests.Request())
print(json.dumps({"kind": type(credentials).__module__, "project": project, "token": credentials.token}))
"""


def test_the_metadata_server_gives_tasks_credentials_at_once():
    """Google's auth library, as a task's clients call it, takes the stand-in for the
    metadata server a Vertex machine has: Compute Engine credentials, the project and a
    token, with no retry (docs/vertex.md: what a task waited without it)."""
    server = gce_metadata.MetadataServer().start()
    try:
        env = {key: value for key, value in os.environ.items()
               if key not in ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CONFIG")}
        env.update(server.environment(), CLOUDSDK_CONFIG="/nonexistent")
        done = subprocess.run([sys.executable, "-c", AUTH], capture_output=True, text=True, env=env, timeout=120)
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer == {"kind": "google.auth.compute_engine.credentials", "project": gce_metadata.PROJECT,
                      "token": gce_metadata.TOKEN}, answer
    # google-auth logs "Compute Engine Metadata server unavailable on attempt N of 3" when it
    # is not there.
    assert "unavailable" not in done.stderr, done.stderr[-2000:]
    assert any(path.endswith("/token") for path in server.paths()), server.paths()
