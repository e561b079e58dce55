"""The `--beam` targets parse into the options each runner reads; what a target lacks is
named by its flag; beyond this process, this package is staged as one archive; the local
defaults, and more workers for a run of many rows."""

import dataclasses
import os
import tarfile

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

from pipeline import config
from pipeline.beam import options as beam_options

IMAGE = "europe-west4-docker.pkg.dev/p/r/taxi-pipeline:1"


def _options(target: beam_options.BeamTarget) -> PipelineOptions:
    assert target.problems() == []
    return PipelineOptions(list(beam_options.command_line(beam_options.VERTEX_BEAM_ARGS, target, ())))


def test_dataflow_options():
    options = _options(beam_options.BeamTarget("dataflow", dataflow_project="proj", dataflow_region="europe-west4",
                                            temp_location="gs://b/tmp", sdk_image=IMAGE))
    assert options.view_as(StandardOptions).runner == "DataflowRunner"
    cloud = options.view_as(GoogleCloudOptions)
    assert (cloud.project, cloud.region, cloud.temp_location) == ("proj", "europe-west4", "gs://b/tmp")
    workers = options.view_as(WorkerOptions)
    assert (workers.sdk_container_image, workers.max_num_workers) == (IMAGE, 10)


def test_flink_with_worker_pools_beside_the_task_managers_and_a_local_job_server_jar(tmp_path):
    jar = tmp_path / "beam-flink-job-server.jar"
    jar.write_bytes(b"PK")
    options = _options(beam_options.BeamTarget("flink", flink_master="flink-jobmanager:8081",
                                            worker_pool="localhost:50000", flink_job_server_jar=str(jar), workers=4))
    assert options.view_as(StandardOptions).runner == "FlinkRunner"
    flink = options.view_as(FlinkRunnerOptions)
    assert (flink.flink_master, flink.flink_job_server_jar, flink.parallelism) == (
        "flink-jobmanager:8081", str(jar), 4)
    portable = options.view_as(PortableOptions)
    assert (portable.environment_type, portable.environment_config) == ("EXTERNAL", "localhost:50000")
    assert int(portable.sdk_worker_parallelism) == 4


def test_flink_and_spark_in_docker_run_the_pipeline_image():
    flink = _options(beam_options.BeamTarget("flink", flink_master="jm:8081", sdk_image=IMAGE))
    spark = _options(beam_options.BeamTarget("spark", job_endpoint="spark-job-server:8099", sdk_image=IMAGE))
    assert spark.view_as(StandardOptions).runner == "PortableRunner"
    assert spark.view_as(PortableOptions).job_endpoint == "spark-job-server:8099"
    for options in (flink, spark):
        portable = options.view_as(PortableOptions)
        assert (portable.environment_type, portable.environment_config) == ("DOCKER", IMAGE)
        # Named as the SDK container too: TFX then stages no archive of itself.
        assert options.view_as(WorkerOptions).sdk_container_image == IMAGE


def test_the_local_portable_stack():
    options = _options(beam_options.BeamTarget("portable", job_endpoint="127.0.0.1:8099",
                                               worker_pool="127.0.0.1:50000"))
    assert options.view_as(StandardOptions).runner == "PortableRunner"
    portable = options.view_as(PortableOptions)
    assert (portable.job_endpoint, portable.environment_type, portable.environment_config) == (
        "127.0.0.1:8099", "EXTERNAL", "127.0.0.1:50000")


@pytest.mark.parametrize("target, says", [
    (beam_options.BeamTarget("portable", job_endpoint="h:1"), ["--beam portable needs --worker-pool"]),
    (beam_options.BeamTarget("portable", job_endpoint="h:1", worker_pool="h:2", workers=2), ["--beam-workers"]),
    (beam_options.BeamTarget("flink", worker_pool="h:2"), ["--beam flink needs --flink-master"]),
    (beam_options.BeamTarget("spark", job_endpoint="h:1"), ["--beam spark needs --worker-pool HOST:PORT"]),
    (beam_options.BeamTarget("spark", job_endpoint="h:1", worker_pool="h:2", sdk_image=IMAGE), ["not both"]),
    (beam_options.BeamTarget("dataflow", sdk_image=IMAGE),
     ["--dataflow-project", "--dataflow-region", "--temp-location"]),
    (beam_options.BeamTarget("flink", flink_master="h:1", worker_pool="h:2", flink_job_server_jar="/no/such.jar"),
     ["--flink-job-server-jar /no/such.jar does not exist"]),
])
def test_a_target_missing_a_setting_names_the_flag(target, says):
    problems = target.problems()
    assert len(problems) == len(says)
    for problem, expected in zip(problems, says):
        assert expected in problem


def test_a_missing_setting_is_a_usage_error_naming_the_flag(tmp_path, taxi_pipeline):
    result = taxi_pipeline("predict", "--input", str(tmp_path / "*.gz"), "--output", str(tmp_path / "out"),
                           "--beam", "flink", "--sdk-image", IMAGE)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == "taxi-pipeline: error: --beam flink needs --flink-master"
    assert not (tmp_path / "out").exists()


def test_beyond_this_process_the_setup_file_becomes_one_archive_built_once(tmp_path, monkeypatch):
    monkeypatch.setenv(beam_options.CACHE_ENV, str(tmp_path))
    local = beam_options.local_beam_args()
    assert any(arg.startswith("--setup_file=") for arg in local)  # installed from source here
    assert beam_options.command_line(local, beam_options.BeamTarget(), ("--direct_num_workers=2",)) == local + (
        "--direct_num_workers=2",)
    beam_options.package_archive.cache_clear()
    target = beam_options.BeamTarget("portable", job_endpoint="h:1", worker_pool="h:2")
    first = beam_options.command_line(local, target, ())
    given_runner = beam_options.command_line(local, beam_options.BeamTarget(), ("--runner", "DataflowRunner"))
    assert not any(arg.startswith("--setup_file=") for arg in first + given_runner)
    (archive,) = [arg.split("=", 1)[1] for arg in first if arg.startswith("--extra_packages=")]
    assert f"--extra_packages={archive}" in given_runner
    assert archive.startswith(beam_options.archive_cache()) and archive.endswith(".tar.gz")
    with tarfile.open(archive) as built:
        names = built.getnames()
    assert any(name.endswith("components/custom/gate.py") for name in names)
    assert any(name.endswith("components/model/schema/schema.pbtxt") for name in names)
    # Another command with the same source reuses it, without building.
    beam_options.package_archive.cache_clear()
    monkeypatch.setattr(beam_options.subprocess, "run", None)
    assert beam_options.command_line(local, target, ()) == first


@pytest.mark.parametrize("args", [beam_options.LOCAL_BEAM_ARGS, beam_options.VERTEX_BEAM_ARGS])
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
    options = PipelineOptions(list(beam_options.LOCAL_BEAM_ARGS))
    assert options.get_all_options()["direct_running_mode"] == "in_memory"
    assert options.get_all_options()["direct_num_workers"] == 1
    assert options.view_as(WorkerOptions).max_cache_memory_usage_mb == 0
    assert options.view_as(SetupOptions).pickle_library == "cloudpickle"


def _direct(args):
    from apache_beam.options.pipeline_options import DirectOptions

    direct = PipelineOptions(list(args)).view_as(DirectOptions)
    return direct.direct_running_mode, direct.direct_num_workers


def test_the_evaluator_gets_worker_processes_one_per_core_from_the_scored_rows_threshold_on():
    rows = beam_options.EVALUATOR_WORKERS_ROWS
    assert beam_options.parallel_beam_args(beam_options.LOCAL_BEAM_ARGS, rows - 1, cores=4) == ()
    above = beam_options.parallel_beam_args(beam_options.LOCAL_BEAM_ARGS, rows, cores=4)
    assert _direct(beam_options.LOCAL_BEAM_ARGS + above) == ("multi_processing", 4)
    assert beam_options.parallel_beam_args(beam_options.LOCAL_BEAM_ARGS, 10**7, cores=1) == ()


def test_beam_options_the_user_gives_win_over_the_sizing():
    user = beam_options.LOCAL_BEAM_ARGS + ("--direct_num_workers=1", "--direct_running_mode=multi_threading")
    assert _direct(user + beam_options.parallel_beam_args(user, 10**7, cores=8)) == ("multi_threading", 1)
    dataflow = beam_options.LOCAL_BEAM_ARGS + ("--runner=DataflowRunner",)
    sized = dataflow + beam_options.parallel_beam_args(dataflow, 10**7)
    assert PipelineOptions(list(sized)).view_as(StandardOptions).runner == "DataflowRunner"


def test_ingestion_gets_a_thread_per_core_from_the_row_threshold_on():
    rows = beam_options.MULTI_PROCESS_ROWS
    assert beam_options.threaded_beam_args(beam_options.LOCAL_BEAM_ARGS, rows - 1, cores=4) == ()
    above = beam_options.threaded_beam_args(beam_options.LOCAL_BEAM_ARGS, rows, cores=4)
    # 0 is Beam's "one per core": the same options, so the same cache key, on any machine.
    assert _direct(beam_options.LOCAL_BEAM_ARGS + above) == ("multi_threading", 0)
    assert above == beam_options.threaded_beam_args(beam_options.LOCAL_BEAM_ARGS, rows, cores=16)
    assert beam_options.threaded_beam_args(beam_options.LOCAL_BEAM_ARGS, 10**7, cores=1) == ()
    user = beam_options.LOCAL_BEAM_ARGS + ("--direct_running_mode=in_memory",)
    assert _direct(user + beam_options.threaded_beam_args(user, 10**7, cores=8))[0] == "in_memory"


@pytest.mark.parametrize("rows, models, window_size, evaluator", [
    (10**4, 2, None, "in_memory"),
    # The eval split held near 50,000 rows: a first run's Evaluator scores it alone...
    (10**6, 1, None, "in_memory"),
    # ...a retrain's scores it with the serving model too.
    (10**6, 2, None, "multi_processing"),
    # A window's eval split is its newest span: a quarter of the rows here.
    (10**6, 1, 4, "multi_processing"),
])
def test_only_the_evaluation_gets_worker_processes_and_ingestion_threads(tmp_path, monkeypatch, rows, models,
                                                                         window_size, evaluator):
    from tfx.dsl.components.base.base_beam_component import BaseBeamComponent

    from pipeline import pipeline as pipeline_lib
    from pipeline.run import local_runner

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    settings = dataclasses.replace(config.RunConfig().settings, window_size=window_size)
    run_config = config.RunConfig(data_root=str(tmp_path), output_root=str(tmp_path / "out"),
                                  settings=settings).resolved()
    run_config = local_runner._sized(run_config, rows, models)
    spans = [f"span-{number}" for number in range(1, (window_size or 1) + 1)]
    built = pipeline_lib.create_pipeline(**run_config.pipeline_args(spans))
    modes = {node.id: _direct(node.executor_spec.beam_pipeline_args)[0]
             for node in built.components if isinstance(node, BaseBeamComponent)}
    assert modes.pop("Evaluator") == evaluator
    assert modes.pop("ImportExampleGen") == ("multi_threading" if rows >= beam_options.MULTI_PROCESS_ROWS
                                             else "in_memory")
    assert set(modes.values()) == {"in_memory"}


@pytest.mark.parametrize("args, here", [
    ((), True),
    (beam_options.LOCAL_BEAM_ARGS, True),
    (("--runner=direct",), True),
    (("--runner", "DirectRunner", "--direct_running_mode=multi_processing"), True),
    (("--runner=PrismRunner",), True),
    (("--runner=PortableRunner", "--job_endpoint=localhost:8099"), False),
    (("--runner=DataflowRunner",), False),
    (beam_options.LOCAL_BEAM_ARGS + ("--runner=FlinkRunner",), False),
])
def test_which_runners_keep_beam_s_workers_in_this_environment(args, here):
    assert beam_options.runs_here(args) is here
