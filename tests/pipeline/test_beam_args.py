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
    options = PipelineOptions(list(config.sized_beam_args(config.LOCAL_BEAM_ARGS, 15_002)))
    assert options.get_all_options()["direct_running_mode"] == "in_memory"
    assert options.get_all_options()["direct_num_workers"] == 1
    assert options.view_as(WorkerOptions).max_cache_memory_usage_mb == 0
    assert options.view_as(SetupOptions).pickle_library == "cloudpickle"


def _direct(args):
    from apache_beam.options.pipeline_options import DirectOptions

    direct = PipelineOptions(list(args)).view_as(DirectOptions)
    return direct.direct_running_mode, direct.direct_num_workers


def test_beam_runs_one_worker_process_per_core_from_the_row_threshold_on():
    below = config.sized_beam_args(config.LOCAL_BEAM_ARGS, config.MULTI_PROCESS_ROWS - 1, cores=4)
    above = config.sized_beam_args(config.LOCAL_BEAM_ARGS, config.MULTI_PROCESS_ROWS, cores=4)
    assert _direct(below) == ("in_memory", 1)
    assert _direct(above) == ("multi_processing", 4)
    assert _direct(config.sized_beam_args(config.LOCAL_BEAM_ARGS, 10**7, cores=1)) == ("in_memory", 1)


def test_beam_options_the_user_gives_win_over_the_sizing():
    user = config.LOCAL_BEAM_ARGS + ("--direct_num_workers=1", "--direct_running_mode=multi_threading")
    assert _direct(config.sized_beam_args(user, 10**7, cores=8)) == ("multi_threading", 1)
    dataflow = config.sized_beam_args(config.LOCAL_BEAM_ARGS + ("--runner=DataflowRunner",), 10**7)
    assert PipelineOptions(list(dataflow)).view_as(StandardOptions).runner == "DataflowRunner"


@pytest.mark.parametrize("rows, train_buckets", [(15_002, 4), (500_000, 4), (500_001, 5), (1_000_000, 9),
                                                  (5_000_000, 49)])
def test_the_eval_split_stays_near_its_row_limit(rows, train_buckets):
    evaluation = config.sized_evaluation(config.EvaluationConfig(), rows)
    assert (evaluation.train_buckets, evaluation.eval_buckets) == (train_buckets, 1)
    assert rows / (evaluation.train_buckets + 1) <= max(config.EvaluationConfig().max_eval_rows, rows / 5)
