"""The schedule's first two jobs, shared by the image tests of each stack
(test_vertex_pipeline.py runs the whole schedule in the first image,
test_vertex_other_stack.py the first two jobs in the other stack's): how a job runs, and
what its first two jobs must show. The jobs themselves are tests/image/conftest.py's
fixtures."""

from __future__ import annotations

import dataclasses
import errno
import ipaddress
import json
import os
from pathlib import Path
from typing import Any, Dict, List

import pytest

from tests.helpers import SLICE_SPANS, span_like, write_records
from tests.image import vertex
from tests.image.vertex import BUCKET_NAME, MODEL, report

# The images `make test-image` builds: the first stack's, and the other stack's.
IMAGE_ENV = "TAXI_PIPELINE_IMAGE"
OTHER_IMAGE_ENV = "TAXI_OTHER_STACK_IMAGE"
WINDOW = 4
PIPELINE_ROOT = f"gs://{BUCKET_NAME}/root"
SERVING = "serving"
# The Secret Manager secret the exit handler reads the webhook's URL from (the emulator's
# front answers for Secret Manager: tests/image/gcs.py).
NOTIFY_SECRET = "projects/taxi-local/secrets/alert-webhook"


def image_named(env: str, what: str) -> str:
    """The image the variable `env` names; skips the test, saying how to get it, when unset."""
    image = os.environ.get(env)
    if not image:
        pytest.skip(f"no {what}: run `make test-image`, which builds it and sets {env}")
    return image


def compile_job(bucket, image: str, url: str, output: str, *extra: str) -> Path:
    """The PipelineJob JSON, compiled inside the image by the image's own stack, its exit
    handler reading the webhook's URL `url` from a Secret Manager secret; the JSON never
    holds the URL."""
    bucket.emulator.secrets[NOTIFY_SECRET] = url.encode()
    bucket.run(["taxi-pipeline", "compile", "--image", image,
                "--pipeline-root", PIPELINE_ROOT, "--data-root", bucket.inside("data"),
                "--serving-dir", bucket.inside(SERVING), "--window", str(WINDOW), "--notify-secret", NOTIFY_SECRET,
                *extra, "--output", bucket.local(output)], bucket.root / f"compile-{output}.log")
    compiled = (bucket.root / output).read_text()
    assert NOTIFY_SECRET in compiled and url not in compiled
    return bucket.root / output


@dataclasses.dataclass(frozen=True)
class ScheduledJob:
    """A job of the schedule, and what the serving folder held just before and after it:
    a test may read the bucket after later jobs of its module changed it."""

    job: vertex.JobResult
    versions_before: List[str]
    versions_after: List[str]
    alerts: List[Dict[str, Any]]


def run_job(bucket, compiled: Path, webhook) -> ScheduledJob:
    """Runs one job: it, the versions before and after it, and the alerts it posted."""
    versions, alerts = bucket.versions(), len(webhook[1])
    job = vertex.VertexJob(str(compiled), bucket.image, bucket, str(bucket.root / "harness")).run()
    return ScheduledJob(job, versions, bucket.versions(), webhook[1][alerts:])


def pushed_version(job: vertex.JobResult) -> str:
    """The version the job's Pusher pushed, as it recorded it."""
    (pushed,) = job.tasks["Pusher"].outputs["pushed_model"]
    return str(pushed["metadata"]["pushed_version"])


def new_span(bucket, span: int, change=None) -> None:
    """A span like span 16 lands in the bucket (`change` edits its examples)."""
    path = bucket.root / f"span-{span}" / "trips.tfrecord.gz"
    write_records(path, span_like(bucket.root / "data" / "span-16", 20, change or (lambda example: None)))
    bucket.write(bucket.inside("data", f"span-{span}", path.name), path.read_bytes())


def first_job_pushed(first_job, bucket, webhook) -> None:
    """Job 1 on a clean copy of the data: every task ran, a whole model was pushed with its
    card and config, and the exit handler named the version."""
    states = report(first_job)
    assert first_job.state == "SUCCEEDED", states
    ran = {name for name, task in first_job.tasks.items() if task.state == "SUCCEEDED"}
    assert {"ImportExampleGen", "DataGate", "Transform", "Trainer", "Evaluator", "ServingCheck", "Pusher",
            "NotifyFinalStatus"} <= ran, states
    # ImportExampleGen's preCacheCheck driver ran and fingerprinted the window's four spans.
    (examples,) = first_job.tasks["ImportExampleGen"].outputs["examples"]
    assert examples["metadata"]["input_fingerprint"].count("split:") == WINDOW
    assert "Calculated fingerprint" in Path(first_job.tasks["ImportExampleGen"].log.replace(".log", ".driver.log"))\
        .read_text(errors="replace")
    # Every task found its credentials where a Vertex machine has them, with no retry.
    for name, task in first_job.tasks.items():
        if task.log:
            log = Path(task.log).read_text(errors="replace").lower()
            assert "unavailable metadata server" not in log and "metadata server unavailable" not in log, name
    # Nothing served before the first job: its baseline holds no model, and it trained from scratch.
    (baseline,) = first_job.tasks["ServingBaseline"].outputs["model"]
    assert baseline["metadata"]["serving_version"] == "none", baseline
    version = pushed_version(first_job)
    assert version in bucket.versions()
    assert bucket.read(bucket.inside(SERVING, MODEL, version, "saved_model.pb"))
    # Its model card, from the job's own examples, evaluation and serving check.
    card = json.loads(bucket.read(bucket.inside(SERVING, MODEL, version, "assets.extra", "model_card.json")))
    assert card["model"]["version"] == int(version) and len(card["training_data"]["spans"]) == WINDOW
    assert card["evaluation"]["overall"]["candidate"]["auc"] > 0.5 and " ms" in card["serving_check"]
    assert b"model_version_policy" in bucket.read(bucket.inside(SERVING, "models.config"))
    # The exit handler ran last and said which version the job pushed.
    (alert,) = [body for body in webhook[1] if first_job.job_id in body["text"]]
    assert alert["outcome"] == "succeeded" and alert["version"] == int(version), alert
    assert alert["text"].endswith(f"pushed model version {version}")


def nothing_new(unchanged_job, first_job, bucket) -> None:
    """Vertex's cache, as KFP keys it, and the gate: the window is read again (SpanWindow's
    cache is off) and finds the serving model trained on exactly its spans; every task
    before the gate hits the cache; the gate says "nothing new" (its verdict 0 is the
    condition of everything after it), so nothing trains, nothing is pushed, and the alert
    says why. Without it, the next job's baseline (the model the first job pushed) would
    change the Trainer's cache key, and every job would train and push again."""
    job, alerts = unchanged_job.job, unchanged_job.alerts
    states = report(job)
    assert job.state == "SUCCEEDED", states
    assert job.tasks["SpanWindow"].state == "SUCCEEDED", states
    for name in ("ImportSchemaGen", "ImportExampleGen", "StatisticsGen", "ExampleValidator", "InferredSchemaGen"):
        assert job.tasks[name].state == "CACHED", states
    # A hit hands on the first job's very artifacts.
    assert job.tasks["ImportExampleGen"].outputs["examples"] == first_job.tasks["ImportExampleGen"].outputs["examples"]
    (verdict,) = job.tasks["DataGate"].outputs["verdict"]
    assert verdict["metadata"]["blessed"] == 0 and "nothing new" in verdict["metadata"]["report"], verdict
    assert job.tasks["Transform"].state == "SKIPPED", states
    for name in ("Trainer", "Evaluator", "ServingCheck", "Pusher"):
        assert job.tasks[name].state in ("SKIPPED", "NOT_TRIGGERED"), states
    assert unchanged_job.versions_after == unchanged_job.versions_before
    (alert,) = [body for body in alerts if job.job_id in body["text"]]
    assert alert["outcome"] == "succeeded" and alert["nothing_new"] and alert["version"] is None, alert
    assert f"nothing new: span {SLICE_SPANS[-1]} is the newest" in alert["text"], alert


def all_traffic_local(first_job, bucket) -> None:
    """No FUSE path and no other address: every object under the pipeline root and the
    serving folder was written by a request the emulator's front logged, from a loopback
    address, and the tasks' containers resolve Cloud Storage's names to the emulator and
    no other Google name (they have no DNS)."""
    assert first_job.state == "SUCCEEDED", report(first_job)
    requests = bucket.emulator.requests()
    assert requests and all(ipaddress.ip_address(r.client).is_loopback for r in requests)
    written = {r.written for r in requests if r.written and r.status < 300}
    stored = set(bucket.objects("root")) | set(bucket.objects(SERVING))
    assert any(name.endswith("saved_model.pb") for name in stored), sorted(stored)[:20]
    assert stored <= written, sorted(stored - written)[:20]
    # Both clients reached it: TensorFlow's (JSON API and uploads) and Beam's (batches).
    hosts = {r.host for r in requests}
    assert {"www.googleapis.com", "storage.googleapis.com"} <= hosts, hosts
    compiled = json.dumps(json.loads((bucket.root / "pipeline.json").read_text()))
    assert "/gcs/" not in compiled and f"gs://{BUCKET_NAME}/data" in compiled
    # The exit handler read the webhook's URL from Secret Manager, with the task's token.
    # (once a job: the module's later jobs may have run before this test)
    read = [r.status for r in requests if r.host == "secretmanager.googleapis.com"]
    assert read and set(read) == {200}, read
    assert {r.path for r in requests if r.host == "secretmanager.googleapis.com"} == {
        f"/v1/{NOTIFY_SECRET}/versions/latest:access"}
    output = bucket.run(["python", "-c", RESOLVE], bucket.root / "resolve.log")
    answers = json.loads(output.strip().splitlines()[-1])
    assert answers["www.googleapis.com"] == answers["storage.googleapis.com"] == bucket.emulator.address, answers
    # Other Google names resolve to nothing (no DNS; the container's hosts file holds the
    # machine's own entries and these).
    assert answers["oauth2.googleapis.com"] is None and answers["metadata.google.internal"] is None, answers
    # And no address outside this machine is reachable at all: the tasks share the test's
    # network namespace, whose one interface is loopback (`make image-tests` runs them under
    # scripts/loopback-only).
    assert answers["interfaces"] == ["lo"], f"not confined to loopback (run `make image-tests`): {answers}"
    assert answers["dial"] == f"OSError: {errno.ENETUNREACH}", answers


# What a task's container can name and reach: the addresses of Google's names, its
# network interfaces, and what dialling an outside address (one of Cloud Storage's) gives.
RESOLVE = """
import json, socket
def address(name):
    try:
        return socket.getaddrinfo(name, 443, socket.AF_INET)[0][4][0]
    except OSError:
        return None
def dial(address):
    try:
        socket.create_connection((address, 443), timeout=5).close()
        return "connected"
    except OSError as err:
        return err.__class__.__name__ + ": " + str(err.errno)
answers = {name: address(name) for name in
           ("www.googleapis.com", "storage.googleapis.com", "oauth2.googleapis.com", "metadata.google.internal")}
answers["interfaces"] = [name for _, name in socket.if_nameindex()]
# Dialled only when confined: outside the namespace this would really reach out.
answers["dial"] = dial("142.250.0.128") if answers["interfaces"] == ["lo"] else "not dialled"
print(json.dumps(answers))
"""
