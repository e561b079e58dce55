"""The compiled pipeline, run as Vertex AI runs it: the JSON that `taxi-pipeline compile`
writes inside the pipeline image, unchanged, each task in a fresh container of that image
with the JSON's own command and arguments, with Vertex's cache on (tests/image/vertex.py
says what the harness stands in for). The pipeline root, the data root and the serving
folder are `gs://` URIs on a Cloud Storage emulator (tests/image/gcs.py), which the tasks
reach through TensorFlow's and Beam's own Cloud Storage clients.

The jobs run once, in module fixtures (the first two are tests/image/conftest.py's), in
the order a schedule would run them: a clean copy of data/'s slice; the same data again; a
new span whose model the serving check refuses; a clean new span, which trains from the
model that serves and pushes; a new span with an anomaly; that span removed and `serving
rollback` against the bucket, then a job with nothing new; and, compiled with `--promotion
approval`, a new span whose candidate awaits a person, `serving approve` against the
bucket, then a job with nothing new. The tests only read what happened.
"""

from __future__ import annotations

import json

import pytest

from components.model.trainer.settings import TRAINING_SUMMARY_FILE
from tests.helpers import span_like, unknown_payment, write_records
from tests.image import schedule
from tests.image.schedule import SERVING, WINDOW
from tests.image.vertex import MODEL, report

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

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
def refused_job(bucket, compiled, unchanged_job, webhook):
    """A new, clean span, and a job whose serving check refuses the model the Evaluator
    blesses: the same pipeline compiled with a latency budget no model meets."""
    refusing = schedule.compile_job(bucket, bucket.image.image, webhook[0], "refusing.json",
                                    "--latency-budget-ms", "0.0001")
    schedule.new_span(bucket, 17)
    return schedule.run_job(bucket, refusing, webhook)


@pytest.fixture(scope="module")
def pushing_job(bucket, compiled, refused_job, webhook):
    """The next scheduled job, after a clean span landed."""
    schedule.new_span(bucket, 18)
    return schedule.run_job(bucket, compiled, webhook)


@pytest.fixture(scope="module")
def anomaly_job(bucket, compiled, pushing_job, webhook):
    """The next scheduled job, after a span with an anomaly landed."""
    # One example in 20 paid in an unknown currency: an anomaly of that span on its own.
    schedule.new_span(bucket, 19, unknown_payment)
    return schedule.run_job(bucket, compiled, webhook)


@pytest.fixture(scope="module")
def rolled_back_job(bucket, compiled, anomaly_job, webhook):
    """The anomalous span taken out, `serving rollback` against the bucket, then the next
    scheduled job: no span it was not trained on, the version rolled back from its newest
    candidate."""
    for name in bucket.objects("data/span-19"):
        bucket.delete(bucket.inside(name))
    bucket.run(["taxi-pipeline", "serving", "rollback", "--serving-dir", bucket.inside(SERVING)],
               bucket.root / "rollback.log")
    # The record as this job left it: the approval job after it moves the pin.
    return schedule.run_job(bucket, compiled, webhook), _record(bucket)


@pytest.fixture(scope="module")
def approved_job(bucket, rolled_back_job, webhook):
    """Compiled with `--promotion approval` and logged traffic in the bucket for the shadow
    check: a clean span lands and its job's candidate passes every check and awaits
    approval; `serving approve` against the bucket; then a job with nothing new."""
    traffic = bucket.root / "traffic" / "requests.gz"
    write_records(traffic, span_like(bucket.root / "data" / "span-16", 1, lambda example: None))
    bucket.write(bucket.inside("traffic", traffic.name), traffic.read_bytes())
    # Against the version rolled back to, trained on an older window, a candidate of the new
    # window flips about a fifth of these 200 requests: past the default threshold (the
    # check refuses it, as it should), so the thresholds are raised here to let it await.
    approving = schedule.compile_job(bucket, bucket.image.image, webhook[0], "approval.json",
                                     "--promotion", "approval", "--shadow-requests", bucket.inside("traffic", "*.gz"),
                                     "--max-flip-rate", "1", "--max-score-shift", "1")
    schedule.new_span(bucket, 20)
    waiting = schedule.run_job(bucket, approving, webhook)
    version = schedule.pushed_version(waiting.job)
    approved = bucket.run(["taxi-pipeline", "serving", "approve", version, "--note", "reviewed", "--by", "ana",
                           "--serving-dir", bucket.inside(SERVING)], bucket.root / "approve.log")
    return waiting, approved, schedule.run_job(bucket, approving, webhook)


def _record(bucket) -> dict:
    return json.loads(bucket.read(bucket.inside(SERVING, MODEL, "record.json")))


def _trained_nothing(scheduled) -> None:
    job = scheduled.job
    states = report(job)
    assert job.state == "SUCCEEDED", states
    (verdict,) = job.tasks["DataGate"].outputs["verdict"]
    assert verdict["metadata"]["blessed"] == 0 and "nothing new" in verdict["metadata"]["report"], verdict
    for name in ("Trainer", "Evaluator", "ServingCheck", "Pusher"):
        assert job.tasks[name].state in ("SKIPPED", "NOT_TRIGGERED"), states
    assert scheduled.versions_after == scheduled.versions_before


def test_after_a_rollback_against_the_bucket_a_job_with_nothing_new_trains_nothing(rolled_back_job, pushing_job):
    scheduled, record = rolled_back_job
    _trained_nothing(scheduled)
    assert record["pinned"] and record["serving"] < int(schedule.pushed_version(pushing_job.job)), record


def test_a_candidate_awaits_approval_serves_once_approved_and_the_next_job_trains_nothing(approved_job, bucket):
    waiting, approved, after = approved_job
    version = schedule.pushed_version(waiting.job)
    assert version in waiting.versions_after
    assert waiting.job.tasks["Pusher"].outputs["pushed_model"][0]["metadata"]["fate"] == "awaiting approval"
    # The shadow check read the bucket's traffic and scored it with both models.
    (shadowed,) = waiting.job.tasks["ShadowCheck"].outputs["blessing"]
    assert shadowed["metadata"]["shadow_check"].startswith("passed: flip rate "), shadowed
    assert json.loads(shadowed["metadata"]["shadow_measures"])["requests"] > 0
    assert f"approve: version {version} approved by ana; serving version {version}" in approved
    _trained_nothing(after)
    candidate = _record(bucket)["candidates"][-1]
    assert (candidate["version"], candidate["fate"], candidate["by"]) == (int(version), "approved", "ana")
    assert candidate["run"] == waiting.job.job_id  # the job that made it, as the record names it


def test_a_clean_copy_of_the_data_pushes_a_model(first_job, bucket, webhook):
    schedule.first_job_pushed(first_job, bucket, webhook)


def test_the_pushed_model_scores_as_a_local_run_on_the_same_spans(first_job, bucket):
    """`taxi-pipeline retrain --window 4` in the same image, on a copy of the same spans:
    the same model, to within float noise (the seed is fixed)."""
    assert first_job.state == "SUCCEEDED", report(first_job)
    bucket.run(["taxi-pipeline", "retrain", "--window", str(WINDOW), "--data-root", bucket.local("local-data"),
                "--output-root", bucket.local("local-out"), "--serving-dir", bucket.local("local-serving")],
               bucket.root / "local-retrain.log")
    vertex_version = schedule.pushed_version(first_job)
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
    schedule.nothing_new(unchanged_job, first_job, bucket)


def _warm_start(job, bucket) -> dict:
    """What the Trainer wrote of its warm start, read from gs:// (its training summary)."""
    (model_run,) = job.tasks["Trainer"].outputs["model_run"]
    return json.loads(bucket.read(f"{model_run['uri']}/{TRAINING_SUMMARY_FILE}"))["warm_start"]


def test_a_model_the_serving_check_refuses_is_not_pushed_and_never_becomes_the_baseline(refused_job, pushing_job,
                                                                                         first_job, bucket):
    job = refused_job.job
    states = report(job)
    assert job.state == "SUCCEEDED", states
    for name in ("Transform", "Trainer", "Evaluator", "ServingCheck", "Pusher"):
        assert job.tasks[name].state == "SUCCEEDED", states
    # Trained on the new span, warm-started from the serving model, blessed by the
    # Evaluator against it, refused by the serving check: nothing pushed.
    (baseline,) = job.tasks["ServingBaseline"].outputs["model"]
    assert baseline["metadata"]["serving_version"] == schedule.pushed_version(first_job), baseline
    assert _warm_start(job, bucket)["used"] is True
    (evaluated,) = job.tasks["Evaluator"].outputs["blessing"]
    assert evaluated["metadata"]["blessed"] == 1, evaluated
    assert evaluated["metadata"]["baseline_model"] == baseline["uri"], evaluated
    (checked,) = job.tasks["ServingCheck"].outputs["blessing"]
    assert checked["metadata"]["blessed"] == 0, checked
    assert refused_job.versions_after == refused_job.versions_before
    # The next job's Evaluator compares with the model that still serves, not the refused one.
    later = pushing_job.job
    (later_baseline,) = later.tasks["ServingBaseline"].outputs["model"]
    assert later_baseline["metadata"]["serving_version"] == schedule.pushed_version(first_job), report(later)
    (compared,) = later.tasks["Evaluator"].outputs["blessing"]
    assert compared["metadata"]["baseline_model"] == later_baseline["uri"], report(later)


def test_a_clean_new_span_trains_from_the_serving_model_and_pushes(pushing_job, bucket):
    job = pushing_job.job
    states = report(job)
    assert job.state == "SUCCEEDED", states
    for name in ("DataGate", "Transform", "Trainer", "Evaluator", "ServingCheck", "Pusher"):
        assert job.tasks[name].state == "SUCCEEDED", states
    (window,) = job.tasks["ImportExampleGen"].outputs["examples"]
    assert window["metadata"]["input_fingerprint"].count("split:") == WINDOW
    assert _warm_start(job, bucket)["used"] is True
    version = schedule.pushed_version(job)
    assert pushing_job.versions_after == sorted([*pushing_job.versions_before, version])
    card = json.loads(bucket.read(bucket.inside(SERVING, MODEL, version, "assets.extra", "model_card.json")))
    assert sorted(card["training_data"]["spans"])[-1] == 18, card["training_data"]
    (alert,) = [body for body in pushing_job.alerts if job.job_id in body["text"]]
    assert alert["outcome"] == "succeeded" and alert["version"] == int(version), alert


def test_a_new_span_with_an_anomaly_skips_training_and_pushes_nothing(anomaly_job, pushing_job, bucket):
    job, versions_before = anomaly_job.job, anomaly_job.versions_before
    states = report(job)
    assert job.state == "SUCCEEDED", states
    # The gate ran on the window that holds the new span, and its verdict said no.
    (verdict,) = job.tasks["DataGate"].outputs["verdict"]
    assert verdict["metadata"]["blessed"] == 0, verdict
    # The Cond is false: Transform is skipped, and nothing after it runs.
    assert job.tasks["Transform"].state == "SKIPPED", states
    for name in ("ServingBaseline", "Trainer", "Evaluator", "ServingCheck", "Pusher"):
        assert job.tasks[name].state in ("SKIPPED", "NOT_TRIGGERED"), states
    assert anomaly_job.versions_after == versions_before
    # The exit handler said so.
    (alert,) = [body for body in anomaly_job.alerts if job.job_id in body["text"]]
    assert alert["outcome"] == "succeeded" and alert["version"] is None
    assert alert["text"].endswith(f"nothing pushed (version {versions_before[-1]} keeps serving)"), alert


def test_every_object_the_job_wrote_came_through_the_emulator_from_this_machine(first_job, bucket):
    schedule.all_traffic_local(first_job, bucket)
