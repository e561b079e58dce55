"""Beam options for running the Beam components beyond one machine.

Pass them after `--` to `taxi-pipeline run` (LocalDagRunner orchestrating, Beam work
elsewhere) or to `taxi-pipeline compile` (Vertex AI / KFP v2).
"""

from __future__ import annotations

from typing import Tuple


def dataflow(project: str, region: str, temp_location: str, image: str, max_workers: int = 10) -> Tuple[str, ...]:
    """Google Cloud Dataflow, with the pipeline image as the SDK container (it has this package)."""
    return (
        "--runner=DataflowRunner",
        f"--project={project}",
        f"--region={region}",
        f"--temp_location={temp_location}",
        f"--sdk_container_image={image}",
        f"--max_num_workers={max_workers}",
        "--experiments=use_runner_v2",
    )


def flink(flink_master: str, image: str, parallelism: int = 4) -> Tuple[str, ...]:
    """Apache Flink through Beam's portable Flink runner, workers in the pipeline image."""
    return (
        "--runner=FlinkRunner",
        f"--flink_master={flink_master}",
        f"--parallelism={parallelism}",
        "--environment_type=DOCKER",
        f"--environment_config={image}",
    )


def spark(job_endpoint: str, image: str) -> Tuple[str, ...]:
    """Apache Spark through a Beam portable job server (e.g. `beam_spark_job_server`)."""
    return (
        "--runner=PortableRunner",
        f"--job_endpoint={job_endpoint}",
        "--environment_type=DOCKER",
        f"--environment_config={image}",
    )
