"""`taxi-pipeline schedule`: the Vertex AI schedule request, and no submission without credentials."""

import pytest
from google.cloud import aiplatform_v1

from pipeline import cli


@pytest.fixture(scope="module")
def pipeline_json(tmp_path_factory):
    path = tmp_path_factory.mktemp("kfp") / "pipeline.json"
    assert cli.main(["compile", "--image", "europe-west4-docker.pkg.dev/p/r/taxi:1", "--pipeline-root",
                     "gs://bucket/pipelines", "--data-root", "gs://bucket/data", "--serving-dir", "gs://bucket/serving",
                     "--output", str(path)]) == 0
    return str(path)


def _schedule(pipeline_json, *extra):
    return cli.main(["schedule", "--pipeline-json", pipeline_json, "--cron", "0 3 * * *",
                     "--project", "my-project", "--region", "europe-west4", *extra])


def test_dry_run_prints_the_create_schedule_request(pipeline_json, capsys):
    assert _schedule(pipeline_json, "--dry-run") == 0
    request = aiplatform_v1.CreateScheduleRequest.from_json(capsys.readouterr().out)
    assert request.parent == "projects/my-project/locations/europe-west4"
    assert request.schedule.cron == "0 3 * * *"
    assert request.schedule.max_concurrent_run_count == 1
    job = request.schedule.create_pipeline_job_request.pipeline_job
    assert job.runtime_config.gcs_output_directory == "gs://bucket/pipelines"
    assert "Trainer" in aiplatform_v1.PipelineJob.to_json(job)


def test_without_credentials_it_fails_clearly(pipeline_json, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "none.json"))
    assert _schedule(pipeline_json) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "credentials" in err.splitlines()[0]
    assert "Traceback" not in err and "AttributeError" not in err


def test_a_malformed_cron_is_refused(pipeline_json, capsys):
    assert cli.main(["schedule", "--pipeline-json", pipeline_json, "--cron", "daily", "--project", "p",
                     "--region", "r", "--dry-run"]) == 1
    assert "5 fields" in capsys.readouterr().err
