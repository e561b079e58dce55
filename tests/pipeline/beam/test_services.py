"""A `--beam` target's services are checked before a command starts: one that accepts
no connection, or accepts and never answers, stops the command in seconds, named."""

import pytest

from pipeline.beam import options as beam_options
from pipeline.beam import services
from tests.helpers import SilentSocket, free_ports


def test_a_service_that_does_not_answer_stops_the_command_before_it_starts(tmp_path, taxi_pipeline):
    """A job submitted to nothing would wait forever; a silent pool leaves a job waiting."""
    job_port, pool_port = free_ports(2)
    result = taxi_pipeline("run", "--data-root", str(tmp_path / "data"), "--output-root", str(tmp_path / "out"),
                           "--serving-dir", str(tmp_path / "serving"), "--beam", "portable",
                           "--job-endpoint", f"127.0.0.1:{job_port}", "--worker-pool", f"127.0.0.1:{pool_port}")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"error: the Beam job service (--job-endpoint) at 127.0.0.1:{job_port} does not answer (Connection refused): "
        f"start it with `taxi-pipeline beam-services`, or fix the address")
    assert not (tmp_path / "out").exists()


def test_a_service_that_accepts_and_never_answers_stops_the_command_in_seconds(tmp_path, taxi_pipeline):
    """A stopped job service's kernel still accepts connections: Beam's runner would wait a
    minute for its handshake and end on a bare `FutureTimeoutError`."""
    import time

    started = time.monotonic()
    with SilentSocket() as silent:
        address = silent.address
        result = taxi_pipeline("run", "--data-root", str(tmp_path / "data"), "--output-root", str(tmp_path / "out"),
                               "--serving-dir", str(tmp_path / "serving"), "--beam", "portable",
                               "--job-endpoint", address, "--worker-pool", address)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"error: the Beam job service (--job-endpoint) at {address} accepts connections but does not answer (no "
        "gRPC handshake within 5 s): check that it is Beam's and running (not stopped) with `taxi-pipeline "
        "beam-services`, or fix the address")
    assert time.monotonic() - started < 30
    assert not (tmp_path / "out").exists()


def test_a_flink_jobmanager_that_accepts_and_never_answers_is_refused_in_seconds():
    import time

    started = time.monotonic()
    with SilentSocket() as silent, pytest.raises(ValueError) as refused:
        address = silent.address
        services.check_reachable(beam_options.BeamTarget(kind="flink", flink_master=address), timeout=1.0)
    assert str(refused.value) == (
        f"the Flink JobManager (--flink-master) at {address} accepts connections but does not answer (no HTTP "
        "answer within 1 s): check that it is Flink's REST address and running (not stopped), or fix the address")
    assert time.monotonic() - started < 10


def test_a_flink_address_that_is_no_http_server_is_named_not_raised():
    def answer_garbage(connection) -> bool:
        connection.recv(1024)
        connection.sendall(b"\x00\x01 not http\r\n\r\n")
        return True

    with SilentSocket(answer=answer_garbage) as server:
        why = services.http_silence(server.address, 2.0)
    assert why.startswith("not an HTTP server (")
