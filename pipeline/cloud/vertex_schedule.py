"""`taxi-pipeline schedule`: a Vertex AI schedule that runs the compiled pipeline.

Each scheduled run re-executes the PipelineJob written by `taxi-pipeline compile`; at
most one runs at a time. `--dry-run` prints the `CreateScheduleRequest` instead of
sending it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Optional

from google.cloud import aiplatform_v1


class NoCredentialsError(RuntimeError):
    """No Google Cloud credentials to submit with."""


@dataclasses.dataclass(frozen=True)
class ScheduleConfig:
    pipeline_json: str
    cron: str
    project: str
    region: str
    display_name: str = "taxi-big-tip-retrain"
    service_account: Optional[str] = None

    def __post_init__(self) -> None:
        if len(self.cron.split()) != 5:
            raise ValueError(f"--cron must have 5 fields (minute hour day month weekday), got {self.cron!r}")

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{self.region}"


def build_request(config: ScheduleConfig) -> aiplatform_v1.CreateScheduleRequest:
    with open(config.pipeline_json) as handle:
        job = json.load(handle)
    pipeline_job = aiplatform_v1.PipelineJob(
        display_name=job.get("displayName", config.display_name),
        runtime_config=aiplatform_v1.PipelineJob.RuntimeConfig(
            gcs_output_directory=job["runtimeConfig"]["gcsOutputDirectory"],
        ),
        service_account=config.service_account or "",
        pipeline_spec=job["pipelineSpec"],
    )
    return aiplatform_v1.CreateScheduleRequest(
        parent=config.parent,
        schedule=aiplatform_v1.Schedule(
            display_name=config.display_name,
            cron=config.cron,
            max_concurrent_run_count=1,
            create_pipeline_job_request=aiplatform_v1.CreatePipelineJobRequest(
                parent=config.parent, pipeline_job=pipeline_job
            ),
        ),
    )


def as_json(request: aiplatform_v1.CreateScheduleRequest) -> str:
    return aiplatform_v1.CreateScheduleRequest.to_json(request)


def submit(config: ScheduleConfig, request: aiplatform_v1.CreateScheduleRequest) -> str:
    """Creates the schedule; returns its resource name."""
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        credentials, _ = google.auth.default()
    except DefaultCredentialsError as err:
        raise NoCredentialsError(
            "no Google Cloud credentials: run `gcloud auth application-default login` or set "
            "GOOGLE_APPLICATION_CREDENTIALS, or use --dry-run to print the request"
        ) from err
    client = aiplatform_v1.ScheduleServiceClient(
        credentials=credentials, client_options={"api_endpoint": f"{config.region}-aiplatform.googleapis.com"}
    )
    return client.create_schedule(request=request).name
