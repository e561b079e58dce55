"""The schedule's jobs both images run (tests/image/conftest.py's fixtures): a clean copy
of data/'s slice, the same data again, a new span whose model the serving check refuses, a
candidate that awaits approval and is approved, then `serving rollback`, each followed by a
job with nothing new. How a job runs on each target (Vertex AI, or Kubeflow Pipelines' backend:
`Target`), and what those jobs must show, whichever target runs them.
test_vertex_pipeline.py adds, in the first image, the job whose decision is the gate's
alone (a span with an anomaly)."""

from __future__ import annotations

import dataclasses
import errno
import ipaddress
import json
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

from components.model.trainer.settings import TRAINING_SUMMARY_FILE
from tests.helpers import SLICE_SPANS, span_like, write_records
from tests.image import kubeflow, vertex
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


@dataclasses.dataclass(frozen=True)
class Target:
    """Where the schedule's jobs run: `compile --target NAME`, the harness's mode that runs
    the compiled file as that target's backend does, and where the alert's URL is kept."""

    name: str
    job_class: Any
    # What `compile` writes for it: a PipelineJob's JSON, or a pipeline spec's YAML.
    extension: str
    # The Kubernetes Secret and key KFP's backend sets the exit handler's variable from; None
    # where the task reads the secret itself (Secret Manager, answered by the emulator's front).
    kubernetes_secret: Optional[Tuple[str, str]] = None
    # Whether the backend runs ImportExampleGen's `lifecycle.preCacheCheck` hook (TFX's
    # driver) before it: Vertex AI does, KFP's backend does not.
    pre_cache_hook: bool = True

    @property
    def notify_secret(self) -> str:
        """`compile --notify-secret`'s value."""
        if self.kubernetes_secret:
            return "k8s:{}/{}".format(*self.kubernetes_secret)
        return NOTIFY_SECRET

    @property
    def secret_in_file(self) -> str:
        """What the compiled file says of the secret (never the URL)."""
        if self.kubernetes_secret:
            return f"secretName: {self.kubernetes_secret[0]}"
        return NOTIFY_SECRET


VERTEX = Target("vertex", vertex.VertexJob, "json")
KUBEFLOW = Target("kubeflow", kubeflow.KubeflowJob, "yaml", ("alert-webhook", "url"), pre_cache_hook=False)


def compile_job(bucket, image: str, url: str, name: str, *extra: str, target: Target = VERTEX,
                data: str = "data", serving: str = SERVING, pipeline_root: str = PIPELINE_ROOT) -> Path:
    """`name`.json (or .yaml, as the target's file is), compiled for `target` inside the
    image by the image's own stack, its exit handler reading the webhook's URL `url` from
    the target's secret; the file never holds the URL. `data` and `serving`: folders of
    the bucket."""
    output = f"{name}.{target.extension}"
    bucket.run(["taxi-pipeline", "compile", "--target", target.name, "--image", image,
                "--pipeline-root", pipeline_root, "--data-root", bucket.inside(data),
                "--serving-dir", bucket.inside(serving), "--window", str(WINDOW),
                "--notify-secret", target.notify_secret, *extra, "--output", bucket.local(output)],
               bucket.root / f"compile-{output}.log")
    compiled = (bucket.root / output).read_text()
    assert url not in compiled and target.secret_in_file in compiled
    return bucket.root / output


@dataclasses.dataclass(frozen=True)
class ScheduledJob:
    """A job of the schedule, and what the serving folder held just before and after it:
    a test may read the bucket after later jobs of its module changed it."""

    job: vertex.JobResult
    versions_before: List[str]
    versions_after: List[str]
    alerts: List[Dict[str, Any]]


def run_job(bucket, compiled: Path, webhook, target: Target = VERTEX) -> ScheduledJob:
    """Runs one job as `target`'s backend runs it, with that backend's own cache (a
    folder per target), the webhook's URL kept where the target's jobs read it: the job,
    the versions before and after it, and the alerts it posted."""
    url, received = webhook
    if target.kubernetes_secret:
        options = {"kubernetes_secrets": {target.kubernetes_secret: url}}
    else:
        bucket.emulator.secrets[target.notify_secret] = url.encode()
        options = {}
    versions, alerts = bucket.versions(), len(received)
    job = target.job_class(str(compiled), bucket.image, bucket, str(bucket.root / f"harness-{target.name}"),
                           **options).run()
    return ScheduledJob(job, versions, bucket.versions(), received[alerts:])


def ran_on(job: vertex.JobResult, target: Target) -> bool:
    """Whether ImportExampleGen executed as `target`'s backend runs it: after its
    `lifecycle.preCacheCheck` hook (TFX's driver, its own log) where the target runs one, with
    none before it where it does not; so a test notices a job that ran on the other target."""
    task = job.tasks["ImportExampleGen"]
    return task.state == "SUCCEEDED" and _driver_log(job).exists() == target.pre_cache_hook


def _driver_log(job: vertex.JobResult) -> Path:
    """The log of ImportExampleGen's pre-cache hook (TFX's driver), beside its executor's."""
    return Path(job.tasks["ImportExampleGen"].log.replace(".log", ".driver.log"))


def pushed_version(job: vertex.JobResult) -> str:
    """The version the job's Pusher pushed, as it recorded it."""
    (pushed,) = job.tasks["Pusher"].outputs["pushed_model"]
    return str(pushed["metadata"]["pushed_version"])


def new_span(bucket, change=None) -> int:
    """The next span, like span 16, lands in the bucket (`change` edits its examples); its number."""
    span = max(int(name.split("/")[1].removeprefix("span-")) for name in bucket.objects("data")) + 1
    path = bucket.root / f"span-{span}" / "trips.tfrecord.gz"
    write_records(path, span_like(bucket.root / "data" / "span-16", 20, change or (lambda example: None)))
    bucket.write(bucket.inside("data", f"span-{span}", path.name), path.read_bytes())
    return span


def remove_span(bucket, span: int) -> None:
    for name in bucket.objects(f"data/span-{span}"):
        bucket.delete(bucket.inside(name))


def record(bucket) -> Dict[str, Any]:
    """The model's record in the serving folder."""
    return json.loads(bucket.read(bucket.inside(SERVING, MODEL, "record.json")))


@dataclasses.dataclass(frozen=True)
class ApprovedJob:
    """A new span's job under `--promotion approval` (`waiting`), what `serving approve`
    said, and the next job, with nothing new (`after`)."""

    span: int
    waiting: ScheduledJob
    approved: str
    after: ScheduledJob


def approve_a_candidate(bucket, webhook, target: Target = VERTEX) -> ApprovedJob:
    """Compiled with `--promotion approval` and logged traffic in the bucket for the shadow
    check: a clean span lands and its job's candidate passes every check and awaits
    approval; `serving approve` against the bucket; then a job with nothing new."""
    traffic = bucket.root / "traffic" / "requests.gz"
    write_records(traffic, span_like(bucket.root / "data" / "span-16", 1, lambda example: None))
    bucket.write(bucket.inside("traffic", traffic.name), traffic.read_bytes())
    # A candidate of a newer window flips some of these 200 requests against the model that
    # serves, at times past the default threshold; the thresholds are raised so that it
    # awaits whatever its flips (the shadow check's refusal: tests/test_decisions.py).
    approving = compile_job(bucket, bucket.image.image, webhook[0], "approval",
                            "--promotion", "approval", "--shadow-requests", bucket.inside("traffic", "*.gz"),
                            "--max-flip-rate", "1", "--max-score-shift", "1", target=target)
    span = new_span(bucket)
    waiting = run_job(bucket, approving, webhook, target)
    approved = bucket.run(["taxi-pipeline", "serving", "approve", pushed_version(waiting.job), "--note", "reviewed",
                           "--by", "ana", "--serving-dir", bucket.inside(SERVING)], bucket.root / "approve.log")
    return ApprovedJob(span, waiting, approved, run_job(bucket, approving, webhook, target))


def refuse_a_model(bucket, webhook, target: Target = VERTEX) -> ScheduledJob:
    """A new, clean span, and a job whose serving check refuses the model the Evaluator
    blesses: the same pipeline compiled with a latency budget no model meets."""
    refusing = compile_job(bucket, bucket.image.image, webhook[0], "refusing", "--latency-budget-ms", "0.0001",
                           target=target)
    new_span(bucket)
    return run_job(bucket, refusing, webhook, target)


def refused(refused_job: ScheduledJob, approved_job: ApprovedJob, first_job: vertex.JobResult, bucket) -> None:
    """Trained on the new span, warm-started from the serving model, blessed by the
    Evaluator against it, refused by the serving check: nothing pushed, and the next job's
    baseline is still the model that served."""
    job = refused_job.job
    states = report(job)
    assert job.state == "SUCCEEDED", states
    for name in ("Transform", "Trainer", "Evaluator", "ServingCheck", "Pusher"):
        assert job.tasks[name].state == "SUCCEEDED", states
    (baseline,) = job.tasks["ServingBaseline"].outputs["model"]
    assert baseline["metadata"]["serving_version"] == pushed_version(first_job), baseline
    assert warm_start(job, bucket)["used"] is True
    (evaluated,) = job.tasks["Evaluator"].outputs["blessing"]
    assert evaluated["metadata"]["blessed"] == 1, evaluated
    assert evaluated["metadata"]["baseline_model"] == baseline["uri"], evaluated
    (checked,) = job.tasks["ServingCheck"].outputs["blessing"]
    assert checked["metadata"]["blessed"] == 0, checked
    assert refused_job.versions_after == refused_job.versions_before
    # The next job's Evaluator compares with the model that still serves, not the refused one.
    later = approved_job.waiting.job
    (later_baseline,) = later.tasks["ServingBaseline"].outputs["model"]
    assert later_baseline["metadata"]["serving_version"] == pushed_version(first_job), report(later)
    (compared,) = later.tasks["Evaluator"].outputs["blessing"]
    assert compared["metadata"]["baseline_model"] == later_baseline["uri"], report(later)


def roll_back(bucket, compiled: Path, webhook, target: Target = VERTEX):
    """`serving rollback` against the bucket, then the next scheduled job, with no span it
    was not trained on; the job, and the record as it left it."""
    bucket.run(["taxi-pipeline", "serving", "rollback", "--serving-dir", bucket.inside(SERVING)],
               bucket.root / "rollback.log")
    return run_job(bucket, compiled, webhook, target), record(bucket)


def first_job_pushed(scheduled: ScheduledJob, bucket, webhook, target: Target) -> None:
    """Job 1 on a clean copy of the data, run on `target`: every task ran, a whole model was
    pushed with its card and config, and the exit handler, its webhook's URL read from the
    target's secret, named the version."""
    first_job = scheduled.job
    states = report(first_job)
    assert first_job.state == "SUCCEEDED", states
    ran = {name for name, task in first_job.tasks.items() if task.state == "SUCCEEDED"}
    assert {"SpanWindow", "ImportExampleGen", "DataGate", "ServingBaseline", "Transform", "Trainer", "Evaluator",
            "ServingCheck", "ShadowCheck", "Pusher", "NotifyFinalStatus"} <= ran, states
    # The window's four spans fingerprinted: by ImportExampleGen's preCacheCheck driver on
    # Vertex AI; on KFP, which runs no such hook, by the executor, by the files' content.
    assert ran_on(first_job, target), states
    (examples,) = first_job.tasks["ImportExampleGen"].outputs["examples"]
    fingerprint = examples["metadata"]["input_fingerprint"]
    assert fingerprint.count("split:") == WINDOW, fingerprint
    if target.pre_cache_hook:
        assert "Calculated fingerprint" in _driver_log(first_job).read_text(errors="replace")
    else:
        assert fingerprint.count("sha256:") == WINDOW, fingerprint
    # Every task found its credentials where a Vertex machine has them, with no retry.
    for name, task in first_job.tasks.items():
        if task.log:
            log = Path(task.log).read_text(errors="replace").lower()
            assert "unavailable metadata server" not in log and "metadata server unavailable" not in log, name
    # Nothing served before the first job: its baseline holds no model, and it trained from scratch.
    (baseline,) = first_job.tasks["ServingBaseline"].outputs["model"]
    assert baseline["metadata"]["serving_version"] == "none", baseline
    version = pushed_version(first_job)
    assert scheduled.versions_before == [] and scheduled.versions_after == [version]
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
    """The target's cache, keyed as its backend keys it, and the gate: the window is read
    again (SpanWindow's cache is off) and finds the serving model trained on exactly its
    spans; every task before the gate hits the cache; the gate says "nothing new" (its
    verdict 0 is the condition of everything after it), so nothing trains, nothing is
    pushed, and the alert says why. Without it, the next job's baseline (the model the first job pushed) would
    change the Trainer's cache key, and every job would train and push again."""
    job, alerts = unchanged_job.job, unchanged_job.alerts
    states = report(job)
    assert job.state == "SUCCEEDED", states
    assert job.tasks["SpanWindow"].state == "SUCCEEDED", states
    for name in ("ImportSchemaGen", "ImportExampleGen", "StatisticsGen", "ExampleValidator", "InferredSchemaGen"):
        assert job.tasks[name].state == "CACHED", states
    # A hit, by the key the target's backend computes, hands on the first job's very artifacts.
    assert job.tasks["ImportExampleGen"].cache_key == first_job.tasks["ImportExampleGen"].cache_key
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


def trained_nothing(scheduled: ScheduledJob) -> None:
    """The gate found nothing new: nothing after it ran, and the serving folder is as it was."""
    job = scheduled.job
    states = report(job)
    assert job.state == "SUCCEEDED", states
    (verdict,) = job.tasks["DataGate"].outputs["verdict"]
    assert verdict["metadata"]["blessed"] == 0 and "nothing new" in verdict["metadata"]["report"], verdict
    for name in ("Trainer", "Evaluator", "ServingCheck", "Pusher"):
        assert job.tasks[name].state in ("SKIPPED", "NOT_TRIGGERED"), states
    assert scheduled.versions_after == scheduled.versions_before


def warm_start(job: vertex.JobResult, bucket) -> Dict[str, Any]:
    """What the Trainer wrote of its warm start, read from gs:// (its training summary)."""
    (model_run,) = job.tasks["Trainer"].outputs["model_run"]
    return json.loads(bucket.read(f"{model_run['uri']}/{TRAINING_SUMMARY_FILE}"))["warm_start"]


def awaited_then_approved(approved_job: ApprovedJob, serving_before: str, bucket) -> None:
    """The new span's candidate trained from the version that served (`serving_before`),
    passed every check, the shadow check on the bucket's traffic too, and was copied into
    the serving folder awaiting approval, which the alert said; `serving approve` made it
    serve, and the next job trained nothing."""
    waiting = approved_job.waiting
    job = waiting.job
    states = report(job)
    assert job.state == "SUCCEEDED", states
    for name in ("DataGate", "Transform", "Trainer", "Evaluator", "ServingCheck", "ShadowCheck", "Pusher"):
        assert job.tasks[name].state == "SUCCEEDED", states
    (window,) = job.tasks["ImportExampleGen"].outputs["examples"]
    assert window["metadata"]["input_fingerprint"].count("split:") == WINDOW
    (baseline,) = job.tasks["ServingBaseline"].outputs["model"]
    assert baseline["metadata"]["serving_version"] == serving_before, baseline
    (compared,) = job.tasks["Evaluator"].outputs["blessing"]
    assert compared["metadata"]["baseline_model"] == baseline["uri"], compared
    assert warm_start(job, bucket)["used"] is True
    version = pushed_version(job)
    assert waiting.versions_after == sorted([*waiting.versions_before, version])
    assert job.tasks["Pusher"].outputs["pushed_model"][0]["metadata"]["fate"] == "awaiting approval"
    card = json.loads(bucket.read(bucket.inside(SERVING, MODEL, version, "assets.extra", "model_card.json")))
    assert sorted(card["training_data"]["spans"])[-1] == approved_job.span, card["training_data"]
    (alert,) = [body for body in waiting.alerts if job.job_id in body["text"]]
    assert alert["outcome"] == "succeeded" and alert["version"] == int(version), alert
    assert f"model version {version} awaits approval" in alert["text"], alert
    # The shadow check read the bucket's traffic and scored it with both models.
    (shadowed,) = job.tasks["ShadowCheck"].outputs["blessing"]
    assert shadowed["metadata"]["shadow_check"].startswith("passed: flip rate "), shadowed
    assert json.loads(shadowed["metadata"]["shadow_measures"])["requests"] > 0
    assert f"approve: version {version} approved by ana; serving version {version}" in approved_job.approved
    trained_nothing(approved_job.after)
    candidate = record(bucket)["candidates"][-1]
    assert (candidate["version"], candidate["fate"], candidate["by"]) == (int(version), "approved", "ana")
    assert candidate["run"] == job.job_id  # the job that made it, as the record names it


def rolled_back(rolled_back_job, approved_job: ApprovedJob) -> None:
    """After `serving rollback`, the job with nothing new trained nothing, and the record
    pins the version before the approved one."""
    scheduled, pinned = rolled_back_job
    trained_nothing(scheduled)
    assert pinned["pinned"] and pinned["serving"] < int(pushed_version(approved_job.waiting.job)), pinned


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
