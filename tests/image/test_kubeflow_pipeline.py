"""`compile --target kubeflow`'s pipeline spec, run as Kubeflow Pipelines' own backend
runs it (tests/image/kubeflow.py), in the first image, on `gs://` paths of the Cloud
Storage emulator: a clean copy of data/'s slice pushes a model, with the alert's URL from
a Kubernetes Secret; the same data again trains nothing, ImportExampleGen a cache hit by
KFP's own key with no pre-cache hook run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.image import schedule
from tests.image.schedule import SERVING, WINDOW
from tests.image.vertex import MODEL, report

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def compiled(bucket, webhook, pipeline_image) -> Path:
    return schedule.compile_job(bucket, pipeline_image, webhook[0], "pipeline", target=schedule.KUBEFLOW)


def _run(bucket, compiled, webhook) -> schedule.ScheduledJob:
    return schedule.run_job(bucket, compiled, webhook, schedule.KUBEFLOW)


@pytest.fixture(scope="module")
def first_job(bucket, compiled, webhook) -> schedule.ScheduledJob:
    return _run(bucket, compiled, webhook)


@pytest.fixture(scope="module")
def unchanged_job(bucket, compiled, first_job, webhook) -> schedule.ScheduledJob:
    return _run(bucket, compiled, webhook)


def test_a_clean_copy_of_the_data_pushes_a_model_and_alerts_through_the_kubernetes_secret(first_job, bucket):
    job = first_job.job
    states = report(job)
    assert job.state == "SUCCEEDED", states
    assert {name for name, task in job.tasks.items() if task.state == "SUCCEEDED"} >= {
        "SpanWindow", "ImportExampleGen", "DataGate", "ServingBaseline", "Transform", "Trainer", "Evaluator",
        "ServingCheck", "ShadowCheck", "Pusher", "NotifyFinalStatus"}, states
    # No pre-cache hook ran; the executor recorded the window's fingerprint by content.
    assert schedule.ran_without_pre_cache_hook(job), states
    (examples,) = job.tasks["ImportExampleGen"].outputs["examples"]
    fingerprint = examples["metadata"]["input_fingerprint"]
    assert fingerprint.count("split:") == WINDOW and fingerprint.count("sha256:") == WINDOW, fingerprint
    (baseline,) = job.tasks["ServingBaseline"].outputs["model"]
    assert baseline["metadata"]["serving_version"] == "none", baseline
    version = schedule.pushed_version(job)
    assert first_job.versions_after == [version]
    card = json.loads(bucket.read(bucket.inside(SERVING, MODEL, version, "assets.extra", "model_card.json")))
    assert len(card["training_data"]["spans"]) == WINDOW
    # The exit handler read the URL from the variable KFP set from the Secret, and said
    # which version the job pushed (its final status came as KFP's Struct).
    (alert,) = [body for body in first_job.alerts if job.job_id in body["text"]]
    assert alert["outcome"] == "succeeded" and alert["version"] == int(version), alert


def test_the_same_data_again_trains_nothing_with_example_gen_a_hit_by_kfp_s_key(unchanged_job, first_job, bucket):
    schedule.nothing_new(unchanged_job, first_job.job, bucket)
    assert unchanged_job.job.tasks["ImportExampleGen"].cache_key == first_job.job.tasks["ImportExampleGen"].cache_key
