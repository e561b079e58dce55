"""The compiled pipeline, run as Vertex AI runs it: the JSON that `taxi-pipeline compile`
writes inside the pipeline image, unchanged, each task in a fresh container of that image
with the JSON's own command and arguments, with Vertex's cache on (tests/image/vertex.py
says what the harness stands in for). The pipeline root, the data root and the serving
folder are `gs://` URIs on a Cloud Storage emulator (tests/image/gcs.py), which the tasks
reach through TensorFlow's and Beam's own Cloud Storage clients.

The jobs run once, in module fixtures, in the order a schedule would run them: a clean
copy of data/'s slice; the same data again; a new span whose model the serving check
refuses; then a new span with an anomaly. The tests only read what happened.
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest

from tests.helpers import SLICE_SPANS, span_like, unknown_payment, write_gzip_records
from tests.image import vertex
from tests.image.vertex import BUCKET_NAME, MODEL, report

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

WINDOW = 4
PIPELINE_ROOT = f"gs://{BUCKET_NAME}/root"
SERVING = "serving"
# Scores of the compiled pipeline's model and of a local run's, on the same spans and seed.
SCORE_TOLERANCE = 1e-6

# Scores the first N examples of a data root's spans, label removed, with `serving_default`
# of each SavedModel given; prints the largest difference from the first model's scores.
SCORE = """
import glob, json, sys
import numpy as np
import tensorflow as tf
from components.model import features
data_root, count, *models = sys.argv[1:]
files = sorted(glob.glob(f"{data_root}/span-*/*.gz"))
batch = []
for record in tf.data.TFRecordDataset(files, compression_type="GZIP").take(int(count)):
    example = tf.train.Example.FromString(record.numpy())
    del example.features.feature[features.LABEL_KEY]
    batch.append(example.SerializeToString())
scores = []
for path in models:
    outputs = tf.saved_model.load(path).signatures["serving_default"](examples=tf.constant(batch))
    scores.append(np.concatenate([v.numpy().reshape(len(batch), -1) for _, v in sorted(outputs.items())], axis=1))
print(json.dumps({"examples": len(batch), "max_abs_diff": [float(np.max(np.abs(s - scores[0]))) for s in scores]}))
"""

@pytest.fixture(scope="module")
def compiled(bucket, webhook, pipeline_image) -> Path:
    """The PipelineJob JSON, compiled inside the image by the image's own stack."""
    url, _ = webhook
    bucket.run(["taxi-pipeline", "compile", "--image", pipeline_image,
                "--pipeline-root", PIPELINE_ROOT, "--data-root", bucket.inside("data"),
                "--serving-dir", bucket.inside(SERVING), "--window", str(WINDOW), "--notify", url,
                "--output", bucket.local("pipeline.json")], bucket.root / "compile.log")
    return bucket.root / "pipeline.json"


@pytest.fixture(scope="module")
def first_job(bucket, compiled, webhook) -> vertex.JobResult:
    return vertex.VertexJob(str(compiled), bucket.image, bucket, str(bucket.root / "harness")).run()


def _new_span(bucket, span: int, change=None) -> None:
    """A span like span 16 lands in the bucket (`change` edits its examples)."""
    path = bucket.root / f"span-{span}" / "trips.tfrecord.gz"
    write_gzip_records(path, span_like(bucket.root / "data" / "span-16", 20, change or (lambda example: None)))
    bucket.write(bucket.inside("data", f"span-{span}", path.name), path.read_bytes())


def _job(bucket, compiled: Path, webhook):
    versions, alerts = bucket.versions(), len(webhook[1])
    job = vertex.VertexJob(str(compiled), bucket.image, bucket, str(bucket.root / "harness")).run()
    return job, versions, webhook[1][alerts:]


@pytest.fixture(scope="module")
def unchanged_job(bucket, compiled, first_job, webhook):
    """The next scheduled job, with no new span."""
    return _job(bucket, compiled, webhook)


@pytest.fixture(scope="module")
def refused_job(bucket, compiled, unchanged_job, webhook):
    """A new, clean span, and a job whose serving check refuses the model the Evaluator
    blesses: the same pipeline compiled with a latency budget no model meets."""
    url, _ = webhook
    bucket.run(["taxi-pipeline", "compile", "--image", bucket.image.image,
                "--pipeline-root", PIPELINE_ROOT, "--data-root", bucket.inside("data"),
                "--serving-dir", bucket.inside(SERVING), "--window", str(WINDOW), "--notify", url,
                "--latency-budget-ms", "0.0001", "--output", bucket.local("refusing.json")],
               bucket.root / "compile-refusing.log")
    _new_span(bucket, 17)
    return _job(bucket, bucket.root / "refusing.json", webhook)


@pytest.fixture(scope="module")
def anomaly_job(bucket, compiled, refused_job, webhook):
    """The next scheduled job, after a span with an anomaly landed."""
    # One example in 20 paid in an unknown currency: an anomaly of that span on its own.
    _new_span(bucket, 18, unknown_payment)
    return _job(bucket, compiled, webhook)


def test_a_clean_copy_of_the_data_pushes_a_model(first_job, bucket, webhook):
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
    # The first job had no blessed model to resolve: no baseline, no warm start.
    assert first_job.tasks["LatestBlessedModelResolver-model-resolver"].outputs == {"model": []}
    (version,) = bucket.versions()
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


def test_the_pushed_model_scores_as_a_local_run_on_the_same_spans(first_job, bucket):
    """`taxi-pipeline retrain --window 4` in the same image, on a copy of the same spans:
    the same model, to within float noise (the seed is fixed)."""
    assert first_job.state == "SUCCEEDED", report(first_job)
    bucket.run(["taxi-pipeline", "retrain", "--window", str(WINDOW), "--data-root", bucket.local("local-data"),
                "--output-root", bucket.local("local-out"), "--serving-dir", bucket.local("local-serving")],
               bucket.root / "local-retrain.log")
    (vertex_version,) = bucket.versions()
    (local_version,) = sorted(path.name for path in (bucket.root / "local-serving" / MODEL).iterdir()
                              if path.name.isdigit())
    # The pushed model is loaded from the bucket, by TensorFlow's own Cloud Storage client.
    output = bucket.run(["python", "-c", SCORE, bucket.local("local-data"), "200",
                         bucket.inside(SERVING, MODEL, vertex_version),
                         bucket.local("local-serving", MODEL, local_version)], bucket.root / "score.log")
    scores = json.loads(output.strip().splitlines()[-1])
    assert scores["examples"] == 200
    assert scores["max_abs_diff"][1] <= SCORE_TOLERANCE, scores


def test_a_job_with_no_new_span_trains_nothing_pushes_nothing_and_says_nothing_new(unchanged_job, first_job,
                                                                                   bucket):
    """Vertex's cache, as KFP keys it, and the gate: the window is read again (SpanWindow's
    cache is off) and finds the serving model trained on exactly its spans; every task
    before the gate hits the cache; the gate says "nothing new" (its verdict 0 is the
    condition of everything after it), so nothing trains, nothing is pushed, and the alert
    says why. Without it, the next job's baseline (the model the first job pushed) would
    change the Trainer's cache key, and every job would train and push again."""
    job, versions_before, alerts = unchanged_job
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
    assert bucket.versions() == versions_before
    (alert,) = [body for body in alerts if job.job_id in body["text"]]
    assert alert["outcome"] == "succeeded" and alert["nothing_new"] and alert["version"] is None, alert
    assert f"nothing new: span {SLICE_SPANS[-1]} is the newest" in alert["text"], alert


def test_a_model_the_serving_check_refuses_is_not_pushed_and_never_becomes_the_baseline(refused_job, anomaly_job,
                                                                                         first_job, bucket):
    job, versions_before, alerts = refused_job
    states = report(job)
    assert job.state == "SUCCEEDED", states
    for name in ("Transform", "Trainer", "Evaluator", "ServingCheck", "Pusher"):
        assert job.tasks[name].state == "SUCCEEDED", states
    # Trained on the new span, warm-started from the serving model, blessed by the
    # Evaluator against it, refused by the serving check: nothing pushed.
    (baseline,) = job.tasks["LatestBlessedModelResolver-model-resolver"].outputs["model"]
    assert baseline["uri"] == first_job.tasks["Trainer"].outputs["model"][0]["uri"]
    (evaluated,) = job.tasks["Evaluator"].outputs["blessing"]
    assert evaluated["metadata"]["blessed"] == 1, evaluated
    (checked,) = job.tasks["ServingCheck"].outputs["blessing"]
    assert checked["metadata"]["blessed"] == 0, checked
    assert bucket.versions() == versions_before
    # The next job's baseline is the model that still serves, not the refused one.
    later, _, _ = anomaly_job
    (model,) = later.tasks["LatestBlessedModelResolver-model-resolver"].outputs["model"]
    assert model["uri"] == first_job.tasks["Trainer"].outputs["model"][0]["uri"], report(later)
    assert model["uri"] != job.tasks["Trainer"].outputs["model"][0]["uri"]


def test_a_new_span_with_an_anomaly_skips_training_and_pushes_nothing(anomaly_job, first_job, bucket):
    job, versions_before, alerts = anomaly_job
    states = report(job)
    assert job.state == "SUCCEEDED", states
    # The gate ran on the window that holds the new span, and its verdict said no.
    (verdict,) = job.tasks["DataGate"].outputs["verdict"]
    assert verdict["metadata"]["blessed"] == 0, verdict
    # The Cond is false: Transform is skipped, and nothing after it runs.
    assert job.tasks["Transform"].state == "SKIPPED", states
    for name in ("Trainer", "Evaluator", "ServingCheck", "Pusher"):
        assert job.tasks[name].state in ("SKIPPED", "NOT_TRIGGERED"), states
    assert bucket.versions() == versions_before
    # The resolver found the first job's blessed model (what a baseline would have been).
    (model,) = job.tasks["LatestBlessedModelResolver-model-resolver"].outputs["model"]
    assert model["uri"] == first_job.tasks["Trainer"].outputs["model"][0]["uri"]
    # The exit handler said so.
    (alert,) = [body for body in alerts if job.job_id in body["text"]]
    assert alert["outcome"] == "succeeded" and alert["version"] is None
    assert alert["text"].endswith(f"nothing pushed (version {versions_before[-1]} keeps serving)"), alert


def test_every_object_the_job_wrote_came_through_the_emulator_from_this_machine(first_job, bucket):
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
    output = bucket.run(["python", "-c", RESOLVE], bucket.root / "resolve.log")
    answers = json.loads(output.strip().splitlines()[-1])
    assert answers["www.googleapis.com"] == answers["storage.googleapis.com"] == bucket.emulator.address, answers
    # Other Google names resolve to nothing (no DNS; the container's hosts file holds the
    # machine's own entries and these).
    assert answers["oauth2.googleapis.com"] is None and answers["metadata.google.internal"] is None, answers


RESOLVE = """
import json, socket
def address(name):
    try:
        return socket.getaddrinfo(name, 443, socket.AF_INET)[0][4][0]
    except OSError:
        return None
print(json.dumps({name: address(name) for name in
                  ("www.googleapis.com", "storage.googleapis.com", "oauth2.googleapis.com",
                   "metadata.google.internal")}))
"""
