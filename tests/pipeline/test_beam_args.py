"""The documented Beam option sets parse into the options each runner reads."""

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


def test_local_default_options():
    options = PipelineOptions(list(config.LOCAL_BEAM_ARGS))
    assert options.get_all_options()["direct_running_mode"] == "in_memory"
    assert options.view_as(WorkerOptions).max_cache_memory_usage_mb == 0
    assert options.view_as(SetupOptions).pickle_library == "cloudpickle"
