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
    assert options.get_all_options()["direct_num_workers"] == 1
    assert options.view_as(WorkerOptions).max_cache_memory_usage_mb == 0
    assert options.view_as(SetupOptions).pickle_library == "cloudpickle"


def _direct(args):
    from apache_beam.options.pipeline_options import DirectOptions

    direct = PipelineOptions(list(args)).view_as(DirectOptions)
    return direct.direct_running_mode, direct.direct_num_workers


def test_worker_processes_one_per_core_from_the_row_threshold_on():
    assert config.parallel_beam_args(config.LOCAL_BEAM_ARGS, config.MULTI_PROCESS_ROWS - 1, cores=4) == ()
    above = config.parallel_beam_args(config.LOCAL_BEAM_ARGS, config.MULTI_PROCESS_ROWS, cores=4)
    assert _direct(config.LOCAL_BEAM_ARGS + above) == ("multi_processing", 4)
    assert config.parallel_beam_args(config.LOCAL_BEAM_ARGS, 10**7, cores=1) == ()


def test_beam_options_the_user_gives_win_over_the_sizing():
    user = config.LOCAL_BEAM_ARGS + ("--direct_num_workers=1", "--direct_running_mode=multi_threading")
    assert _direct(user + config.parallel_beam_args(user, 10**7, cores=8)) == ("multi_threading", 1)
    dataflow = config.LOCAL_BEAM_ARGS + ("--runner=DataflowRunner",)
    sized = dataflow + config.parallel_beam_args(dataflow, 10**7)
    assert PipelineOptions(list(sized)).view_as(StandardOptions).runner == "DataflowRunner"


def test_only_statistics_and_evaluation_get_the_worker_processes(tmp_path):
    from tfx.dsl.components.base.base_beam_component import BaseBeamComponent

    from pipeline import pipeline as pipeline_lib

    run_config = config.RunConfig(data_root=str(tmp_path), output_root=str(tmp_path / "out")).resolved()
    parallel = config.parallel_beam_args(run_config.settings.beam_args, 10**6, cores=2)
    args = run_config.pipeline_args(["span-1"])
    args["parallel_beam_pipeline_args"] = parallel
    built = pipeline_lib.create_pipeline(**args)
    modes = {node.id: _direct(node.executor_spec.beam_pipeline_args)[0]
             for node in built.components if isinstance(node, BaseBeamComponent)}
    assert {node for node, mode in modes.items() if mode == "multi_processing"} == {"StatisticsGen", "Evaluator"}
    assert modes["ImportExampleGen"] == modes["Transform"] == "in_memory"


@pytest.mark.parametrize("rows, train_buckets", [(15_002, 4), (250_000, 4), (250_001, 5), (1_000_000, 19),
                                                  (5_000_000, 99)])
def test_the_eval_split_stays_near_its_row_limit(rows, train_buckets):
    evaluation = config.sized_evaluation(config.EvaluationConfig(), rows)
    assert (evaluation.train_buckets, evaluation.eval_buckets) == (train_buckets, 1)
    assert rows / (evaluation.train_buckets + 1) <= max(config.EvaluationConfig().max_eval_rows, rows / 5)
