"""The documented Beam option sets parse into the options each runner reads."""

import pytest
from apache_beam.options.pipeline_options import (
    FlinkRunnerOptions,
    GoogleCloudOptions,
    PipelineOptions,
    PortableOptions,
    SetupOptions,
    StandardOptions,
    WorkerOptions,
)

from pipeline import beam_args, config

IMAGE = "europe-west4-docker.pkg.dev/p/r/taxi-pipeline:1"


def test_dataflow_options():
    options = PipelineOptions(list(beam_args.dataflow("proj", "europe-west4", "gs://b/tmp", IMAGE)))
    assert options.view_as(StandardOptions).runner == "DataflowRunner"
    cloud = options.view_as(GoogleCloudOptions)
    assert (cloud.project, cloud.region, cloud.temp_location) == ("proj", "europe-west4", "gs://b/tmp")
    workers = options.view_as(WorkerOptions)
    assert (workers.sdk_container_image, workers.max_num_workers) == (IMAGE, 10)


def test_flink_options():
    options = PipelineOptions(list(beam_args.flink("flink-jobmanager:8081", IMAGE)))
    assert options.view_as(StandardOptions).runner == "FlinkRunner"
    assert options.view_as(FlinkRunnerOptions).flink_master == "flink-jobmanager:8081"
    portable = options.view_as(PortableOptions)
    assert (portable.environment_type, portable.environment_config) == ("DOCKER", IMAGE)


def test_spark_options():
    options = PipelineOptions(list(beam_args.spark("spark-job-server:8099", IMAGE)))
    assert options.view_as(StandardOptions).runner == "PortableRunner"
    assert options.view_as(PortableOptions).job_endpoint == "spark-job-server:8099"


@pytest.mark.parametrize("args", [config.LOCAL_BEAM_ARGS, config.VERTEX_BEAM_ARGS])
def test_without_a_runner_given_beam_runs_its_in_memory_engine_not_prism(args):
    """Beam >= 2.68's DirectRunner would try Prism first (a downloaded binary); the
    FnApiRunner named by its dotted path resolves on Beam 2.59 and 2.77 alike."""
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.runners.runner import create_runner

    runner = PipelineOptions(list(args)).view_as(StandardOptions).runner
    assert isinstance(create_runner(runner), FnApiRunner)
    given = PipelineOptions(list(args) + ["--runner=DataflowRunner"]).view_as(StandardOptions).runner
    assert given == "DataflowRunner"


def test_local_default_options():
    options = PipelineOptions(list(config.LOCAL_BEAM_ARGS))
    assert options.get_all_options()["direct_running_mode"] == "in_memory"
    assert options.view_as(WorkerOptions).max_cache_memory_usage_mb == 0
    assert options.view_as(SetupOptions).pickle_library == "cloudpickle"
