"""Beam's services: whether those a `--beam` target names answer (`check_reachable`,
before a command starts; the greetings `pipeline.run.watch` repeats while a run works),
and a job service with a Python worker pool on this machine, the `--beam portable` target
of `run`, `retrain` and `predict` (`taxi-pipeline beam-services`).

A job submitted there is a portable pipeline proto, run by the job service; its DoFns are
unpickled and run by worker processes the pool starts, one per job, which share nothing
with the launching command but the file system: what Flink, Spark and Dataflow do, without
their cluster. Unlike Beam's `worker_pool_main`, the pool keeps one spare worker started
ahead with the heavy imports done, so a job does not wait for them. Both listen on
127.0.0.1 only (Beam's own worker pool binds every interface, and starts a process for
whoever asks, running the code it is sent).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Dict, Iterator, List, Optional

from pipeline.beam.options import BeamTarget


def grpc_silence(address: str, timeout: float) -> Optional[str]:
    """None when a new gRPC connection to `address` is ready within `timeout` seconds, else
    why not: a stopped server's kernel still accepts the TCP connection, but the
    handshake needs the server."""
    import grpc

    channel = grpc.insecure_channel(address)
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout)
        return None
    except grpc.FutureTimeoutError:
        return f"no gRPC handshake within {timeout:g} s"
    finally:
        channel.close()


def http_silence(address: str, timeout: float) -> Optional[str]:
    """None when the HTTP server at `address` (Flink's JobManager: its REST API) answers a
    request within `timeout` seconds, whatever its status; else why not."""
    import http.client
    import urllib.error
    import urllib.request

    # Straight to the address: a proxy's own error page would pass for the JobManager's answer.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"http://{address}/v1/overview", timeout=timeout):
            return None
    except urllib.error.HTTPError:
        return None  # an answer, if not the one asked for
    except http.client.HTTPException as err:
        return f"not an HTTP server ({type(err).__name__})"
    except (OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        if isinstance(reason, TimeoutError) or "timed out" in str(reason):
            return f"no HTTP answer within {timeout:g} s"
        return f"no HTTP answer ({getattr(reason, 'strerror', None) or reason})"


def check_reachable(target: BeamTarget, timeout: float = 5.0) -> None:
    """ValueError naming the first service of `target` that accepts no connection, or (a
    gRPC service) completes no handshake, within `timeout` seconds: a job submitted to
    nothing would wait forever, and Beam's runner waits a minute for a silent one."""
    start = " with `taxi-pipeline beam-services`" if target.kind == "portable" else ""
    for what, address in target.endpoints():
        host, _, port = address.rpartition(":")
        host = host.strip("[]") or "localhost"
        try:
            with socket.create_connection((host, int(port)), timeout=timeout):
                pass
        except (OSError, ValueError) as err:
            raise ValueError(f"{what} at {address} does not answer ({err.strerror or err}): "
                             f"start it{start}, or fix the address") from err
        if what.startswith("the Beam"):
            silence, whose = grpc_silence(address, timeout), "Beam's"
        else:
            silence, whose = http_silence(address, timeout), "Flink's REST address"
        if silence:
            raise ValueError(f"{what} at {address} accepts connections but does not answer ({silence}): "
                             f"check that it is {whose} and running (not stopped){start}, or fix the address")


HOST = "127.0.0.1"
START_SECONDS = 90
# What a worker of this package's pipelines imports before its first bundle: a spare
# worker imports them while the previous job runs (the launcher waits meanwhile), so a
# job's worker starts with them loaded (about 5 s less per job here).
# `components` first: it sets the stack's Keras switch before TensorFlow loads.
WARM_MODULES = ("components.custom.beam_fns", "tensorflow_data_validation", "tensorflow_transform.beam",
                "tensorflow_model_analysis", "tfx_bsl.public.beam.run_inference")
# A spare worker: warm imports, then the harness for the job whose control endpoint and
# worker id arrive on its standard input (nothing: the pool stopped; exit).
_SPARE_WORKER = """
import importlib
import sys

from apache_beam.runners.worker.sdk_worker import SdkHarness

for name in sys.argv[1:]:
    importlib.import_module(name)
request = sys.stdin.readline().split()
if request:
    SdkHarness(request[0], worker_id=request[1], state_cache_size=0, data_buffer_time_limit_ms=-1).run()
"""


@dataclasses.dataclass(frozen=True)
class Endpoints:
    job_endpoint: str
    worker_pool: str

    def flags(self) -> List[str]:
        """The command-line flags that send a command's Beam work here."""
        return ["--beam", "portable", "--job-endpoint", self.job_endpoint, "--worker-pool", self.worker_pool]


def _warm_pool():
    """Beam's process worker pool, each worker taken from a spare started ahead (`WARM_MODULES`)."""
    import threading

    from apache_beam.portability.api import beam_fn_api_pb2
    from apache_beam.runners.worker.worker_pool_main import BeamFnExternalWorkerPoolServicer

    class WarmPool(BeamFnExternalWorkerPoolServicer):
        def __init__(self) -> None:
            super().__init__(use_process=True, state_cache_size=0, data_buffer_time_limit_ms=-1)
            self._lock = threading.Lock()
            self.spare = self._start_spare()

        @staticmethod
        def _start_spare() -> subprocess.Popen:
            return subprocess.Popen([sys.executable, "-c", _SPARE_WORKER, *WARM_MODULES], stdin=subprocess.PIPE,
                                    stdout=subprocess.DEVNULL, close_fds=True)

        def StartWorker(self, request, unused_context):  # noqa: N802 (gRPC's name)
            with self._lock:
                worker, self.spare = self.spare, None
                try:
                    if worker.poll() is not None:  # the spare died: a cold one
                        worker = self._start_spare()
                    worker.stdin.write(f"{request.control_endpoint.url} {request.worker_id}\n".encode())
                    worker.stdin.close()
                    self._worker_processes[request.worker_id] = worker
                    return beam_fn_api_pb2.StartWorkerResponse()
                except OSError as err:
                    return beam_fn_api_pb2.StartWorkerResponse(error=f"could not start a worker: {err}")
                finally:
                    self.spare = self._start_spare()

    return WarmPool()


@contextlib.contextmanager
def serving(job_port: int = 0, pool_port: int = 0) -> Iterator[Endpoints]:
    """The job service and the worker pool in this process, until the block ends; a port
    of 0 picks a free one. Worker processes still running then are stopped."""
    import grpc
    from apache_beam.portability.api import beam_fn_api_pb2_grpc
    from apache_beam.runners.portability import local_job_service
    from apache_beam.runners.portability.fn_api_runner import worker_handlers
    from apache_beam.utils import thread_pool_executor

    # The job service tells each worker to call back at this machine's fully qualified
    # name, which a container or chroot without a hosts entry for its own name cannot
    # resolve: the worker gives up after 60 s and the job then waits for it forever. The
    # workers of this pool run on this machine.
    worker_handlers.ExternalWorkerHandler.host_from_worker = lambda handler: "localhost"
    jobs = local_job_service.LocalJobServicer()
    bound_job_port = jobs.start_grpc_server(job_port)
    pool = _warm_pool()
    pool_server = grpc.server(thread_pool_executor.shared_unbounded_instance())
    bound_pool_port = pool_server.add_insecure_port(f"{HOST}:{pool_port}")
    if not bound_pool_port:
        jobs.stop()
        raise OSError(f"the worker pool cannot listen on {HOST}:{pool_port} (in use?)")
    beam_fn_api_pb2_grpc.add_BeamFnExternalWorkerPoolServicer_to_server(pool, pool_server)
    pool_server.start()
    try:
        yield Endpoints(f"{HOST}:{bound_job_port}", f"{HOST}:{bound_pool_port}")
    finally:
        pool_server.stop(0)
        for worker in [pool.spare, *pool._worker_processes.values()]:  # noqa: SLF001 (Beam keeps them there)
            if worker is not None and worker.poll() is None:
                worker.terminate()
        jobs.stop()


def serve_forever(job_port: int, pool_port: int) -> None:
    """`taxi-pipeline beam-services`: serve until Ctrl-C or SIGTERM."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with serving(job_port, pool_port) as endpoints:
        print(f"Beam job service on {endpoints.job_endpoint}, worker pool on {endpoints.worker_pool}; "
              f"Ctrl-C stops both. Send a command's Beam work here with:", flush=True)
        print("    " + " ".join(endpoints.flags()), flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def in_background(log_path: str, env: Optional[Dict[str, str]] = None,
                  cwd: Optional[str] = None) -> Iterator[tuple]:
    """`taxi-pipeline beam-services` in a subprocess on two free ports, for benchmarks and
    tests: yields (Endpoints, its process) once both ports accept connections; stops it,
    workers included, when the block ends."""
    job_port, pool_port = free_port(), free_port()
    command = [os.path.join(os.path.dirname(sys.executable), "taxi-pipeline"), "beam-services",
               "--job-port", str(job_port), "--worker-pool-port", str(pool_port)]
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                   start_new_session=True)
    try:
        deadline = time.monotonic() + START_SECONDS
        for port in (job_port, pool_port):
            while not _listening(port):
                if process.poll() is not None or time.monotonic() > deadline:
                    with open(log_path) as log:
                        raise RuntimeError(f"beam-services did not start (exit {process.poll()}): "
                                           f"{log.read()[-2000:]}")
                time.sleep(0.3)
        yield Endpoints(f"{HOST}:{job_port}", f"{HOST}:{pool_port}"), process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _listening(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1):
            return True
    except OSError:
        return False
