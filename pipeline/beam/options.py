"""The options Beam is given, by every command: where the Beam components' work runs and
how, in this process (the default) or beyond it.

- A local run: `LOCAL_BEAM_ARGS` (`local_beam_args`: with this project's `setup.py`),
  Beam's in-memory engine in this process; worker processes for an Evaluator that scores
  `EVALUATOR_WORKERS_ROWS` rows or more (`parallel_beam_args`), and from
  `MULTI_PROCESS_ROWS` rows on a thread per core for ImportExampleGen
  (`threaded_beam_args`).
- The compiled pipeline: `VERTEX_BEAM_ARGS`, the same engine in each component's container.
- Beyond this process: a runner picked on the command line with `--beam KIND` and its
  settings (`BeamTarget`), its options put together with the local ones by `command_line`.

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

Where a set of options runs the work is `components.support.beam_place`'s answer
(`runs_here`); whether a target's services answer, `pipeline.beam.services`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from typing import List, Optional, Sequence, Tuple

import components
from components.support import beam_place

# The DirectRunner's in-memory engine, named: Beam >= 2.68's DirectRunner (TFX 1.21's
# Beam) first tries the Prism runner, which downloads a binary of its own and ignores the
# settings below, then falls back to this engine. The dotted path works on Beam 2.59 too.
IN_MEMORY_ENGINE = "apache_beam.runners.portability.fn_api_runner.FnApiRunner"
IN_MEMORY_RUNNER = f"--runner={IN_MEMORY_ENGINE}"
# Local runs: Beam's DirectRunner defaults, in memory with one worker, in this process.
# Above `MULTI_PROCESS_ROWS` the components that gain from it get worker processes
# (`parallel_beam_args`).
LOCAL_BEAM_ARGS: Tuple[str, ...] = (
    IN_MEMORY_RUNNER,
    # Beam >= 2.52 weighs every cached side input with objsize, which walks all loaded
    # modules' globals (TensorFlow's included) on each read; Beam's advice for
    # pipelines with materialized side inputs is to turn the cache off
    # (https://github.com/apache/beam/issues/30360).
    "--max_cache_memory_usage_mb=0",
    # Beam's other pickler: faster than dill for the pipelines' functions (dill also
    # resets the cache of every logger on each call).
    "--pickle_library=cloudpickle",
)
# On Vertex the Beam components run Dataflow or the portable runner, as the user says;
# the local in-memory settings and setup file make no sense there. Without a runner
# given, inside each component's container, the same in-memory engine as locally
# (not Beam 2.77's Prism, which would download a binary); a `--runner` given after wins.
VERTEX_BEAM_ARGS: Tuple[str, ...] = (IN_MEMORY_RUNNER, "--max_cache_memory_usage_mb=0")


def local_beam_args() -> Tuple[str, ...]:
    """LOCAL_BEAM_ARGS plus this project's setup.py, when it is installed from source.

    Naming the package source for Beam is what a distributed runner needs, and it stops
    TFX from building a throwaway sdist of itself before every Beam component.
    """
    setup_py = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(components.__file__))), "setup.py")
    return LOCAL_BEAM_ARGS + ((f"--setup_file={setup_py}",) if os.path.isfile(setup_py) else ())


# From this many rows on, ImportExampleGen runs on a thread per core; below, and for the
# other components but the Evaluator always, in this process. Its work is TensorFlow's
# reader and GZIP writer and a hash per record: threads cost no start-up, but at zlib's
# level 1 the per-record Python holds the GIL most of the time, so two threads gain
# little (docs/performance.md, "ImportExampleGen's split is bound by the GIL").
# StatisticsGen and Transform decode their records on a thread per core in this process
# (see `pipeline.patches.tfxio`), and were slower in worker processes, which add their
# start-up (a few seconds per component) and memory: at 1M rows StatisticsGen 14.9 s
# there against 10.8 s here, Transform 17.9 s against 11.9 s. The data gate reads a
# sample.
MULTI_PROCESS_ROWS = 300_000
# From this many rows scored on (its eval rows times the models it evaluates: the
# candidate, and the serving model when one serves), the Evaluator runs its Beam work in
# worker processes, one per core: it spends its time in TFMA's Python per example, which
# the workers share out, after about 6 s of start-up each (imports, the models loaded).
# The eval split (`config.eval_rows`; in window mode the newest span) is held near 50,000
# rows in all-spans mode (`config.sized_evaluation`), so there, at 1M rows and beyond, a
# first run scores 50,000 rows, which the Evaluator scores as fast in this process, with
# two workers' memory less, and a retrain 100,000, which the workers score faster
# (docs/performance.md, "the Evaluator sized by the rows it scores").
EVALUATOR_WORKERS_ROWS = 100_000


def parallel_beam_args(beam_args: Sequence[str], scored: int, cores: Optional[int] = None) -> Tuple[str, ...]:
    """The Evaluator's Beam options when it scores `scored` rows: from
    `EVALUATOR_WORKERS_ROWS` on, on several cores, the DirectRunner's multi_processing mode
    with one worker per core, followed by `beam_args` (so that a mode, worker count or
    runner the user gave still wins: Beam reads a repeated option's last value); else
    nothing (the pipeline's options)."""
    cores = cores or os.cpu_count() or 1
    if scored < EVALUATOR_WORKERS_ROWS or cores < 2:
        return ()
    return ("--direct_running_mode=multi_processing", f"--direct_num_workers={cores}") + tuple(beam_args)


def _shared_out(rows: int, cores: Optional[int] = None) -> bool:
    """Whether `rows` rows are worth sharing out over this machine's (or `cores`) cores."""
    return rows >= MULTI_PROCESS_ROWS and (cores or os.cpu_count() or 1) >= 2


def threaded_beam_args(beam_args: Sequence[str], rows: int, cores: Optional[int] = None) -> Tuple[str, ...]:
    """ImportExampleGen's Beam options for `rows` rows: from `MULTI_PROCESS_ROWS` on, on
    several cores, the DirectRunner's multi_threading mode, followed by `beam_args` (what
    the user gave still wins); else nothing. Its work is TensorFlow's record reader and
    GZIP writer, which leave the GIL while they work, so a thread per core shares out the
    span files without the start-up of worker processes (1M rows: 6.7 s -> 4.7-5.4 s).
    The thread count is said as 0, Beam's "one per core": the options are part of the
    node's cache key, which must not change with the machine a root is run on."""
    if not _shared_out(rows, cores):
        return ()
    return ("--direct_running_mode=multi_threading", "--direct_num_workers=0") + tuple(beam_args)


# The `--beam` targets: where the work goes beyond this process (see the module doc).
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
    if target.kind == "direct" and beam_place.option(given, "runner") in (None, "DirectRunner", IN_MEMORY_ENGINE):
        return local + given
    kept = tuple(arg for arg in local if not arg.startswith("--setup_file="))
    setup_files = [arg.split("=", 1)[1] for arg in local if arg.startswith("--setup_file=")]
    archive = (f"--extra_packages={package_archive(setup_files[-1])}",) if setup_files else ()
    return kept + archive + target.args() + given


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
