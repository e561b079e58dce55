"""Where the Beam components' work runs: this process (the default), or a Beam runner
beyond it, picked on the command line with `--beam KIND` and its settings.

| `--beam`   | runner                                  | workers                                   |
|------------|-----------------------------------------|-------------------------------------------|
| `direct`   | Beam's in-memory engine in this process | this process                              |
| `portable` | a Beam job service (`--job-endpoint`)   | a Python worker pool (`--worker-pool`)    |
| `flink`    | Flink (`--flink-master`)                | worker pools beside the TaskManagers, or the image in Docker |
| `spark`    | a Spark job server (`--job-endpoint`)   | worker pools, or the image in Docker      |
| `dataflow` | Google Cloud Dataflow                   | the pipeline image as SDK container       |

Options given after `--` still come last, so they win over these.

The workers must have this package and its locked dependencies: a worker pool is
`python -m apache_beam.runners.worker.worker_pool_main` started from this package's
environment (or from the pipeline image), and a Docker environment is the pipeline image.
Beyond this process, one source archive of this package is built per command and staged
(`--extra_packages`), instead of Beam building it again for every Beam component from
`--setup_file`, or TFX building and staging an archive of TFX itself when neither is given.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from typing import List, Optional, Sequence, Tuple

from components.support import beam_place

KINDS = ("direct", "portable", "flink", "spark", "dataflow")
# The settings each kind needs, as their command-line flags.
REQUIRED = {
    "portable": ("job_endpoint", "worker_pool"),
    "flink": ("flink_master",),
    "spark": ("job_endpoint",),
    "dataflow": ("dataflow_project", "dataflow_region", "temp_location", "sdk_image"),
}
# Kinds whose workers are either a worker pool (EXTERNAL) or the image in Docker.
POOL_OR_IMAGE = ("flink", "spark")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


@dataclasses.dataclass(frozen=True)
class BeamTarget:
    """A Beam runner and its settings, from `--beam KIND` and the flags of that kind."""

    kind: str = "direct"
    # portable, spark: Beam's job service, HOST:PORT.
    job_endpoint: str = ""
    # portable, flink, spark: a Python worker pool, HOST:PORT (`--environment_type=EXTERNAL`).
    worker_pool: str = ""
    # flink: the JobManager's REST address, HOST:PORT.
    flink_master: str = ""
    # flink: the Flink job server jar, for machines that cannot fetch it from Maven Central.
    flink_job_server_jar: str = ""
    # flink, spark without a pool: the pipeline image the Docker environment runs;
    # dataflow: its SDK container.
    sdk_image: str = ""
    # Worker processes per job on Flink and Spark (Flink's parallelism too), or Dataflow's
    # most workers; 0: the runner's default. Beam's local job service (portable) always
    # gives a job one worker process.
    workers: int = 0
    # dataflow: the Google Cloud project and region, and a gs:// folder for its files.
    dataflow_project: str = ""
    dataflow_region: str = ""
    temp_location: str = ""

    def problems(self) -> List[str]:
        """What is missing or contradictory, each said as the flag to give; empty when usable."""
        if self.kind not in KINDS:
            return [f"--beam {self.kind}: not one of {', '.join(KINDS)}"]
        found = [f"--beam {self.kind} needs {_flag(name)}" for name in REQUIRED.get(self.kind, ())
                 if not getattr(self, name)]
        if self.kind in POOL_OR_IMAGE and not (self.worker_pool or self.sdk_image):
            found.append(f"--beam {self.kind} needs --worker-pool HOST:PORT (Python worker pools beside the "
                         f"workers) or --sdk-image IMAGE (the pipeline image, run in Docker)")
        if self.kind in POOL_OR_IMAGE and self.worker_pool and self.sdk_image:
            found.append(f"--beam {self.kind}: give --worker-pool or --sdk-image, not both")
        if self.kind == "portable" and self.workers:
            found.append("--beam-workers: Beam's local job service gives each job one worker process; "
                         "it applies to flink, spark and dataflow")
        if self.workers < 0:
            found.append(f"--beam-workers must be 0 or more, got {self.workers}")
        if (self.flink_job_server_jar and not self.flink_job_server_jar.startswith(("http://", "https://"))
                and not os.path.isfile(self.flink_job_server_jar)):
            found.append(f"--flink-job-server-jar {self.flink_job_server_jar} does not exist: give the path of "
                         "Beam's Flink job server jar on this machine")
        return found

    def args(self) -> Tuple[str, ...]:
        """The Beam options of this target (none for `direct`: the caller's local defaults)."""
        if self.kind == "direct":
            return ()
        if self.kind == "dataflow":
            return dataflow(self.dataflow_project, self.dataflow_region, self.temp_location, self.sdk_image,
                            self.workers or 10)
        if self.kind == "flink":
            runner = ("--runner=FlinkRunner", f"--flink_master={self.flink_master}")
            if self.workers:
                runner += (f"--parallelism={self.workers}",)
            if self.flink_job_server_jar:
                runner += (f"--flink_job_server_jar={self.flink_job_server_jar}",)
        else:
            runner = ("--runner=PortableRunner", f"--job_endpoint={self.job_endpoint}")
        if self.worker_pool:
            environment = ("--environment_type=EXTERNAL", f"--environment_config={self.worker_pool}")
        else:
            environment = ("--environment_type=DOCKER", f"--environment_config={self.sdk_image}",
                           f"--sdk_container_image={self.sdk_image}")
        parallelism = (f"--sdk_worker_parallelism={self.workers}",) if self.workers else ()
        return runner + environment + parallelism

    def endpoints(self) -> List[Tuple[str, str]]:
        """(what, HOST:PORT) of the services this target needs reachable from here."""
        named = [("the Beam job service (--job-endpoint)", self.job_endpoint),
                 ("the Flink JobManager (--flink-master)", self.flink_master)]
        if self.kind == "portable":
            # Flink's and Spark's pools sit beside their workers, not necessarily reachable from here.
            named.append(("the Beam worker pool (--worker-pool)", self.worker_pool))
        return [(what, address) for what, address in named if address and self.kind != "direct"]


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


def command_line(local: Tuple[str, ...], target: BeamTarget, given: Tuple[str, ...]) -> Tuple[str, ...]:
    """The Beam options of a local command: this machine's defaults `local` (kept: a
    runner ignores the options it does not read), then the target's, then the ones given
    after `--`. Beyond this process (a `--beam` target, or a `--runner` given after `--`),
    the `--setup_file` of the local defaults becomes this package's source archive, built
    once per version of the source (`package_archive`): Docker and Dataflow workers
    install it, so they run the launcher's code even from an older image; worker pools
    already have the package and leave it be."""
    if target.kind == "direct" and beam_place.option(given, "runner") in (None, "DirectRunner", _IN_MEMORY):
        return local + given
    kept = tuple(arg for arg in local if not arg.startswith("--setup_file="))
    setup_files = [arg.split("=", 1)[1] for arg in local if arg.startswith("--setup_file=")]
    archive = (f"--extra_packages={package_archive(setup_files[-1])}",) if setup_files else ()
    return kept + archive + target.args() + given


_IN_MEMORY = "apache_beam.runners.portability.fn_api_runner.FnApiRunner"


def runs_here(args: Sequence[str]) -> bool:
    """Whether Beam options `args` keep Beam's workers in this environment: this process
    or its children, on its Python environment (`components.support.beam_place`)."""
    return beam_place.place_of(args) is not beam_place.Place.ELSEWHERE


CACHE_ENV = "XDG_CACHE_HOME"
PACKAGES = ("components", "pipeline")


def archive_cache() -> str:
    """Where built source archives are kept: `$XDG_CACHE_HOME/taxi-pipeline/beam-package`."""
    base = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "taxi-pipeline", "beam-package")


def _source_key(root: str) -> str:
    digest = hashlib.sha256()
    for package in PACKAGES:
        for folder, subfolders, files in os.walk(os.path.join(root, package)):
            subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
            for name in sorted(files):
                path = os.path.join(folder, name)
                digest.update(os.path.relpath(path, root).encode())
                with open(path, "rb") as handle:
                    digest.update(handle.read())
    with open(os.path.join(root, "setup.py"), "rb") as handle:
        digest.update(handle.read())
    return digest.hexdigest()[:16]


@functools.cache
def package_archive(setup_py: str) -> str:
    """This package's source archive, built once per version of its source and kept in
    `archive_cache()` (only the newest: older versions are removed). Beam would build it
    again for every Beam component from `--setup_file`, about a second each."""
    root = os.path.dirname(setup_py)
    cache = archive_cache()
    folder = os.path.join(cache, _source_key(root))
    if os.path.isdir(folder) and os.listdir(folder):
        return os.path.join(folder, sorted(os.listdir(folder))[0])
    os.makedirs(cache, exist_ok=True)
    building = tempfile.mkdtemp(prefix=".building-", dir=cache)
    result = subprocess.run(
        [sys.executable, "setup.py", "-q", "sdist", "--dist-dir", building],
        cwd=root, capture_output=True, text=True, check=False,
    )
    logging.info("Built %s's source archive for the Beam workers: %s", root, (result.stdout + result.stderr).strip())
    if result.returncode != 0 or not os.listdir(building):
        shutil.rmtree(building, ignore_errors=True)
        raise RuntimeError(f"could not build the source archive of {root} for the Beam workers: "
                           f"{(result.stderr or result.stdout).strip()[-300:]}")
    for old in os.listdir(cache):
        if old != os.path.basename(building):
            shutil.rmtree(os.path.join(cache, old), ignore_errors=True)
    try:
        os.rename(building, folder)
    except OSError:  # another command built the same version meanwhile
        shutil.rmtree(building, ignore_errors=True)
    return os.path.join(folder, sorted(os.listdir(folder))[0])


def target_from(kind: str = "direct", **settings: Optional[object]) -> BeamTarget:
    """A BeamTarget from the command line's values (None: not given)."""
    given = {name: value for name, value in settings.items() if value is not None}
    return BeamTarget(kind=kind, **given)
