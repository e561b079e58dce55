"""The `--beam` targets parse into the options each runner reads; what a target lacks is
named by its flag; beyond this process, this package is staged as one archive."""

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

from pipeline import beam_args, config

IMAGE = "europe-west4-docker.pkg.dev/p/r/taxi-pipeline:1"


def _options(target: beam_args.BeamTarget) -> PipelineOptions:
    assert target.problems() == []
    return PipelineOptions(list(beam_args.command_line(config.VERTEX_BEAM_ARGS, target, ())))


def test_dataflow_options():
    options = _options(beam_args.BeamTarget("dataflow", dataflow_project="proj", dataflow_region="europe-west4",
                                            temp_location="gs://b/tmp", sdk_image=IMAGE))
    assert options.view_as(StandardOptions).runner == "DataflowRunner"
    cloud = options.view_as(GoogleCloudOptions)
    assert (cloud.project, cloud.region, cloud.temp_location) == ("proj", "europe-west4", "gs://b/tmp")
    workers = options.view_as(WorkerOptions)
    assert (workers.sdk_container_image, workers.max_num_workers) == (IMAGE, 10)


def test_flink_with_worker_pools_beside_the_task_managers_and_a_local_job_server_jar(tmp_path):
    jar = tmp_path / "beam-flink-job-server.jar"
    jar.write_bytes(b"PK")
    options = _options(beam_args.BeamTarget("flink", flink_master="flink-jobmanager:8081",
                                            worker_pool="localhost:50000", flink_job_server_jar=str(jar), workers=4))
    assert options.view_as(StandardOptions).runner == "FlinkRunner"
    flink = options.view_as(FlinkRunnerOptions)
    assert (flink.flink_master, flink.flink_job_server_jar, flink.parallelism) == (
        "flink-jobmanager:8081", str(jar), 4)
    portable = options.view_as(PortableOptions)
    assert (portable.environment_type, portable.environment_config) == ("EXTERNAL", "localhost:50000")
    assert int(portable.sdk_worker_parallelism) == 4


def test_flink_and_spark_in_docker_run_the_pipeline_image():
    flink = _options(beam_args.BeamTarget("flink", flink_master="jm:8081", sdk_image=IMAGE))
    spark = _options(beam_args.BeamTarget("spark", job_endpoint="spark-job-server:8099", sdk_image=IMAGE))
    assert spark.view_as(StandardOptions).runner == "PortableRunner"
    assert spark.view_as(PortableOptions).job_endpoint == "spark-job-server:8099"
    for options in (flink, spark):
        portable = options.view_as(PortableOptions)
        assert (portable.environment_type, portable.environment_config) == ("DOCKER", IMAGE)
        # Named as the SDK container too: TFX then stages no archive of itself.
        assert options.view_as(WorkerOptions).sdk_container_image == IMAGE


def test_the_local_portable_stack():
    options = _options(beam_args.BeamTarget("portable", job_endpoint="127.0.0.1:8099", worker_pool="127.0.0.1:50000"))
    assert options.view_as(StandardOptions).runner == "PortableRunner"
    portable = options.view_as(PortableOptions)
    assert (portable.job_endpoint, portable.environment_type, portable.environment_config) == (
        "127.0.0.1:8099", "EXTERNAL", "127.0.0.1:50000")


@pytest.mark.parametrize("target, says", [
    (beam_args.BeamTarget("portable", job_endpoint="h:1"), ["--beam portable needs --worker-pool"]),
    (beam_args.BeamTarget("portable", job_endpoint="h:1", worker_pool="h:2", workers=2), ["--beam-workers"]),
    (beam_args.BeamTarget("flink", worker_pool="h:2"), ["--beam flink needs --flink-master"]),
    (beam_args.BeamTarget("spark", job_endpoint="h:1"), ["--beam spark needs --worker-pool HOST:PORT"]),
    (beam_args.BeamTarget("spark", job_endpoint="h:1", worker_pool="h:2", sdk_image=IMAGE), ["not both"]),
    (beam_args.BeamTarget("dataflow", sdk_image=IMAGE),
     ["--dataflow-project", "--dataflow-region", "--temp-location"]),
    (beam_args.BeamTarget("flink", flink_master="h:1", worker_pool="h:2", flink_job_server_jar="/no/such.jar"),
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


def test_a_service_that_does_not_answer_stops_the_command_before_it_starts(tmp_path, taxi_pipeline):
    """A job submitted to nothing would wait forever; a silent pool leaves a job waiting."""
    from pipeline.cloud import beam_services

    job_port, pool_port = beam_services.free_port(), beam_services.free_port()
    result = taxi_pipeline("run", "--data-root", str(tmp_path / "data"), "--output-root", str(tmp_path / "out"),
                           "--serving-dir", str(tmp_path / "serving"), "--beam", "portable",
                           "--job-endpoint", f"127.0.0.1:{job_port}", "--worker-pool", f"127.0.0.1:{pool_port}")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"error: the Beam job service (--job-endpoint) at 127.0.0.1:{job_port} does not answer (Connection refused): "
        f"start it with `taxi-pipeline beam-services`, or fix the address")
    assert not (tmp_path / "out").exists()


def _silent_socket():
    """A socket on 127.0.0.1 the kernel accepts connections on and nothing answers (a
    stopped server's), and its HOST:PORT."""
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    return silent, f"127.0.0.1:{silent.getsockname()[1]}"


def test_a_service_that_accepts_and_never_answers_stops_the_command_in_seconds(tmp_path, taxi_pipeline):
    """A stopped job service's kernel still accepts connections: Beam's runner would wait a
    minute for its handshake and end on a bare `FutureTimeoutError`."""
    import time

    silent, address = _silent_socket()
    started = time.monotonic()
    try:
        result = taxi_pipeline("run", "--data-root", str(tmp_path / "data"), "--output-root", str(tmp_path / "out"),
                               "--serving-dir", str(tmp_path / "serving"), "--beam", "portable",
                               "--job-endpoint", address, "--worker-pool", address)
    finally:
        silent.close()
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"error: the Beam job service (--job-endpoint) at {address} accepts connections but does not answer (no "
        "gRPC handshake within 5 s): check that it is Beam's and running (not stopped) with `taxi-pipeline "
        "beam-services`, or fix the address")
    assert time.monotonic() - started < 30
    assert not (tmp_path / "out").exists()


def test_beyond_this_process_the_setup_file_becomes_one_archive_built_once(tmp_path, monkeypatch):
    monkeypatch.setenv(beam_args.CACHE_ENV, str(tmp_path))
    local = config.local_beam_args()
    assert any(arg.startswith("--setup_file=") for arg in local)  # installed from source here
    assert beam_args.command_line(local, beam_args.BeamTarget(), ("--direct_num_workers=2",)) == local + (
        "--direct_num_workers=2",)
    beam_args.package_archive.cache_clear()
    target = beam_args.BeamTarget("portable", job_endpoint="h:1", worker_pool="h:2")
    first = beam_args.command_line(local, target, ())
    given_runner = beam_args.command_line(local, beam_args.BeamTarget(), ("--runner", "DataflowRunner"))
    assert not any(arg.startswith("--setup_file=") for arg in first + given_runner)
    (archive,) = [arg.split("=", 1)[1] for arg in first if arg.startswith("--extra_packages=")]
    assert f"--extra_packages={archive}" in given_runner
    assert archive.startswith(beam_args.archive_cache()) and archive.endswith(".tar.gz")
    with tarfile.open(archive) as built:
        names = built.getnames()
    assert any(name.endswith("components/custom/gate.py") for name in names)
    assert any(name.endswith("components/model/schema/schema.pbtxt") for name in names)
    # Another command with the same source reuses it, without building.
    beam_args.package_archive.cache_clear()
    monkeypatch.setattr(beam_args.subprocess, "run", None)
    assert beam_args.command_line(local, target, ()) == first


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


def test_ingestion_gets_a_thread_per_core_from_the_row_threshold_on():
    assert config.threaded_beam_args(config.LOCAL_BEAM_ARGS, config.MULTI_PROCESS_ROWS - 1, cores=4) == ()
    above = config.threaded_beam_args(config.LOCAL_BEAM_ARGS, config.MULTI_PROCESS_ROWS, cores=4)
    # 0 is Beam's "one per core": the same options, so the same cache key, on any machine.
    assert _direct(config.LOCAL_BEAM_ARGS + above) == ("multi_threading", 0)
    assert above == config.threaded_beam_args(config.LOCAL_BEAM_ARGS, config.MULTI_PROCESS_ROWS, cores=16)
    assert config.threaded_beam_args(config.LOCAL_BEAM_ARGS, 10**7, cores=1) == ()
    user = config.LOCAL_BEAM_ARGS + ("--direct_running_mode=in_memory",)
    assert _direct(user + config.threaded_beam_args(user, 10**7, cores=8))[0] == "in_memory"


@pytest.mark.parametrize("sized", [True, False])
def test_only_the_evaluation_gets_worker_processes_and_ingestion_threads(tmp_path, monkeypatch, sized):
    from tfx.dsl.components.base.base_beam_component import BaseBeamComponent

    from pipeline import pipeline as pipeline_lib
    from pipeline.run import local_runner

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    run_config = config.RunConfig(data_root=str(tmp_path), output_root=str(tmp_path / "out")).resolved()
    run_config = local_runner._sized(run_config, 10**6 if sized else 10**4)
    built = pipeline_lib.create_pipeline(**run_config.pipeline_args(["span-1"]))
    modes = {node.id: _direct(node.executor_spec.beam_pipeline_args)[0]
             for node in built.components if isinstance(node, BaseBeamComponent)}
    if sized:
        assert {node for node, mode in modes.items() if mode == "multi_processing"} == {"Evaluator"}
        assert modes["ImportExampleGen"] == "multi_threading"
        assert modes["Transform"] == "in_memory"
    else:
        assert set(modes.values()) == {"in_memory"}


@pytest.mark.parametrize("rows, train_buckets", [(15_002, 4), (250_000, 4), (250_001, 5), (1_000_000, 19),
                                                  (5_000_000, 99)])
def test_the_eval_split_stays_near_its_row_limit(rows, train_buckets):
    evaluation = config.sized_evaluation(config.EvaluationConfig(), rows)
    assert (evaluation.train_buckets, evaluation.eval_buckets) == (train_buckets, 1)
    assert rows / (evaluation.train_buckets + 1) <= max(config.EvaluationConfig().max_eval_rows, rows / 5)


@pytest.mark.parametrize("args, here", [
    ((), True),
    (config.LOCAL_BEAM_ARGS, True),
    (("--runner=direct",), True),
    (("--runner", "DirectRunner", "--direct_running_mode=multi_processing"), True),
    (("--runner=PrismRunner",), True),
    (("--runner=PortableRunner", "--job_endpoint=localhost:8099"), False),
    (("--runner=DataflowRunner",), False),
    (config.LOCAL_BEAM_ARGS + ("--runner=FlinkRunner",), False),
])
def test_which_runners_keep_beam_s_workers_in_this_environment(args, here):
    assert beam_args.runs_here(args) is here


def test_a_flink_jobmanager_that_accepts_and_never_answers_is_refused_in_seconds():
    import time

    silent, address = _silent_socket()
    started = time.monotonic()
    try:
        with pytest.raises(ValueError) as refused:
            beam_args.check_reachable(beam_args.BeamTarget(kind="flink", flink_master=address), timeout=1.0)
    finally:
        silent.close()
    assert str(refused.value) == (
        f"the Flink JobManager (--flink-master) at {address} accepts connections but does not answer (no HTTP "
        "answer within 1 s): check that it is Flink's REST address and running (not stopped), or fix the address")
    assert time.monotonic() - started < 10


def test_a_flink_address_that_is_no_http_server_is_named_not_raised():
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)

    def answer_garbage():
        connection = server.accept()[0]
        connection.recv(1024)
        connection.sendall(b"\x00\x01 not http\r\n\r\n")
        connection.close()

    threading.Thread(target=answer_garbage, daemon=True).start()
    try:
        why = beam_args.http_silence(f"127.0.0.1:{server.getsockname()[1]}", 2.0)
    finally:
        server.close()
    assert why.startswith("not an HTTP server (")
