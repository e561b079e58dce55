"""A compiled job whose task fails: the harness names the task with its log, nothing
after it runs, and the exit handler still posts the failure (tests/image/vertex.py)."""

from __future__ import annotations

import pytest

from tests.helpers import SLICE_SPANS
from tests.image import vertex
from tests.image.schedule import NOTIFY_SECRET, compile_job
from tests.image.vertex import BUCKET_NAME, report

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def test_a_failing_task_is_named_with_its_log_and_still_alerted(bucket, webhook, pipeline_image, copy_spans,
                                                                 tmp_path):
    """A data root with fewer spans than the window: SpanWindow fails saying so, nothing
    after it runs, and the exit handler still posts the failure."""
    url, received = webhook
    bucket.emulator.secrets[NOTIFY_SECRET] = url.encode()
    copy_spans(bucket.root / "short-data", SLICE_SPANS[:2])
    bucket.emulator.upload_tree(BUCKET_NAME, "short-data", bucket.root / "short-data")
    compiled = compile_job(bucket, pipeline_image, url, "short", data="short-data", serving="short-serving",
                           pipeline_root=f"gs://{BUCKET_NAME}/short-root")
    alerts = len(received)
    job = vertex.VertexJob(str(compiled), bucket.image, bucket, str(tmp_path / "harness")).run()
    assert job.state == "FAILED" and job.tasks["SpanWindow"].state == "FAILED", report(job)
    error = job.tasks["SpanWindow"].error
    assert "SpanWindow" in job.final_status["error"]["message"]
    assert "found 2" in error and "SpanWindow.log" in error, error
    assert "Traceback" in job.log_of("SpanWindow")
    assert job.tasks["ImportExampleGen"].state == "NOT_TRIGGERED"
    assert job.tasks["NotifyFinalStatus"].state == "SUCCEEDED"
    (alert,) = received[alerts:]
    assert alert["outcome"] == "failed" and "task SpanWindow failed" in alert["text"], alert
