"""The schedule's jobs in the other stack's image (TAXI_OTHER_STACK_IMAGE; `make
test-image` builds tfx-1.16's), on that stack's TensorFlow, Beam and Cloud Storage
clients, the other way round from the first image (test_vertex_pipeline.py). As Kubeflow
Pipelines' backend runs `compile --target kubeflow`'s spec: the pipeline pushes a model on
`gs://`, its alert's URL from a Kubernetes Secret, every object it wrote came through the
emulator, and the next job with no new span hits KFP's cache by KFP's key and pushes
nothing. The team then runs the same serving folder from Vertex AI, with its own cache: a
new span's model that the serving check refuses is not pushed, a candidate awaits approval
until `serving approve` against the bucket, and after `serving rollback` a job with nothing
new trains nothing. The record of what serves, read and written on `gs://` by this stack's
file systems, is what both targets decide from.

So each job of the schedule runs on each target, and each target in each image, without
running every job on every target in every image (docs/beyond-one-machine.md has the
table, and why).
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.image import schedule
from tests.image.vertex import report

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]


@pytest.fixture(scope="module")
def pipeline_image() -> str:
    """This module's image: the other stack's (the conftest's fixtures build on it)."""
    return schedule.image_named(schedule.OTHER_IMAGE_ENV, "image of the other stack")


@pytest.fixture(scope="module")
def first_target() -> schedule.Target:
    return schedule.KUBEFLOW


@pytest.fixture(scope="module")
def later_target() -> schedule.Target:
    return schedule.VERTEX


def test_on_kubeflow_a_clean_copy_of_the_data_pushes_a_model_and_alerts_through_the_kubernetes_secret(
        first_scheduled, bucket, webhook, first_target):
    schedule.first_job_pushed(first_scheduled, bucket, webhook, first_target)


def test_on_kubeflow_a_job_with_no_new_span_trains_nothing_and_hits_kfp_s_cache(unchanged_job, first_job, bucket):
    schedule.nothing_new(unchanged_job, first_job, bucket)


def test_on_vertex_a_model_the_serving_check_refuses_is_not_pushed_and_never_becomes_the_baseline(
        refused_job, approved_job, first_job, bucket, later_target):
    assert schedule.ran_on(refused_job.job, later_target), report(refused_job.job)
    schedule.refused(refused_job, approved_job, first_job, bucket)


def test_on_vertex_a_candidate_awaits_approval_serves_once_approved_and_the_next_job_trains_nothing(
        approved_job, first_job, bucket, later_target):
    assert schedule.ran_on(approved_job.waiting.job, later_target), report(approved_job.waiting.job)
    schedule.awaited_then_approved(approved_job, schedule.pushed_version(first_job), bucket)


def test_on_vertex_after_a_rollback_against_the_bucket_a_job_with_nothing_new_trains_nothing(
        rolled_back_job, approved_job):
    schedule.rolled_back(rolled_back_job, approved_job)


def test_every_object_the_jobs_wrote_came_through_the_emulator_from_this_machine(first_job, rolled_back_job,
                                                                                  bucket):
    """After every job: those on Vertex AI read the alert's URL from Secret Manager."""
    schedule.all_traffic_local(first_job, bucket)


def test_the_tasks_ran_the_other_stack(first_job, bucket, pipeline_image):
    """Every task of the job ran this image's TFX, the version of this image's stack, which
    is not the first image's stack."""
    assert first_job.state == "SUCCEEDED", report(first_job)
    stack, first_stack = _stack(pipeline_image), _stack(os.environ[schedule.IMAGE_ENV])
    assert stack and first_stack and stack != first_stack, (stack, first_stack)
    output = bucket.run(["python", "-c", "import tfx; print(tfx.__version__)"], bucket.root / "tfx-version.log")
    version = output.strip().splitlines()[-1]
    assert version.startswith(stack.removeprefix("tfx-") + "."), (version, stack)
    recorded = {artifact["metadata"]["tfx_version"] for task in first_job.tasks.values()
                for artifacts in task.outputs.values() for artifact in artifacts}
    assert recorded == {version}, recorded


def _stack(image: str) -> str:
    """The stack an image was built for (the Dockerfile's TAXI_PIPELINE_STACK)."""
    env = subprocess.run(["buildah", "inspect", "--type", "image", "--format",
                          "{{range .OCIv1.Config.Env}}{{println .}}{{end}}", image],
                         capture_output=True, text=True, check=True).stdout
    return dict(line.split("=", 1) for line in env.splitlines() if "=" in line).get("TAXI_PIPELINE_STACK", "")
