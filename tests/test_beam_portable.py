"""The Beam work beyond the launching process: Beam's portable job service and a Python
worker pool on 127.0.0.1, as Flink, Spark and Dataflow run a pipeline. The pipeline is
submitted as a portable proto and its DoFns are unpickled and run by the pool's worker
processes, which share nothing with the launcher but the file system.

Each worker records which of the watched modules it imported (a `sitecustomize` on the
pool's PYTHONPATH only), so the tests see from the workers themselves that TFDV's, TFT's,
TFMA's and our own DoFns ran there. The launcher runs from another folder than the pool,
with relative paths, as a user types them.
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
from pathlib import Path
from typing import Dict, Iterator, List, Set

import numpy as np
import pytest

from tests.conftest import SLICE_SPANS, Workspace, full_log

pytestmark = pytest.mark.slow

# The modules whose import in a worker shows that their DoFns (or functions pickled into
# the pipeline) ran there: StatisticsGen/DataGate, Transform, the Evaluator, RunInference,
# our ImportExampleGen and DataGate.
WATCHED = ("tensorflow_data_validation", "tensorflow_transform", "tensorflow_model_analysis", "tfx_bsl",
           "components.ingest", "components.drift")
MARKER_ENV = "TAXI_TEST_WORKER_MARKERS"
RECORDER = f'''
import os
import sys

_WATCHED = {WATCHED!r}
_DIR = os.environ.get({MARKER_ENV!r})


class _RecordImports:
    def find_spec(self, name, path=None, target=None):
        if _DIR and name in _WATCHED:
            with open(os.path.join(_DIR, "%d-%d-%s" % (os.getpid(), os.getppid(), name)), "w"):
                pass
        return None


sys.meta_path.insert(0, _RecordImports())
'''
START_SECONDS = 90
# One job per Beam component: ImportExampleGen, StatisticsGen, DataGate, Transform, Evaluator.
BEAM_JOBS = 5


@dataclasses.dataclass(frozen=True)
class BeamServices:
    job_endpoint: str
    worker_pool: str
    pool_pid: int
    markers: Path
    launcher_dir: Path

    def beam_flags(self) -> List[str]:
        return ["--beam", "portable", "--job-endpoint", self.job_endpoint, "--worker-pool", self.worker_pool]

    def imports(self) -> Dict[int, Set[str]]:
        """Worker pid -> the watched modules it imported; only the pool's children count."""
        found: Dict[int, Set[str]] = {}
        for marker in os.listdir(self.markers):
            pid, parent, module = marker.split("-", 2)
            assert int(parent) == self.pool_pid, f"{module} imported by {pid}, not a child of the worker pool"
            found.setdefault(int(pid), set()).add(module)
        return found

    def clear(self) -> None:
        for marker in os.listdir(self.markers):
            os.unlink(self.markers / marker)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for(port: int, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        assert process.poll() is None, f"exited {process.returncode}: {log.read_text()[-2000:]}"
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.5)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port} after {START_SECONDS} s: {log.read_text()[-2000:]}")


@contextlib.contextmanager
def _service(argv: List[str], port: int, log: Path, cwd: Path, env: Dict[str, str]) -> Iterator[subprocess.Popen]:
    with open(log, "w") as output:
        process = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, cwd=cwd, env=env,
                                   start_new_session=True)
    try:
        _wait_for(port, process, log)
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="module")
def beam_services(tmp_path_factory) -> Iterator[BeamServices]:
    """Beam's job service and a Python worker pool on 127.0.0.1, each in its own folder,
    from this environment (its `bin` on PATH, as the pool's workers start `python`)."""
    root = tmp_path_factory.mktemp("beam-services")
    hooks, markers, pool_dir, launcher_dir = (root / name for name in ("hooks", "markers", "pool", "launcher"))
    for folder in (hooks, markers, pool_dir, launcher_dir):
        folder.mkdir()
    (hooks / "sitecustomize.py").write_text(RECORDER)
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    pool_env = {**env, "PYTHONPATH": str(hooks), MARKER_ENV: str(markers)}
    job_port, pool_port = _free_port(), _free_port()
    job_argv = [sys.executable, "-m", "apache_beam.runners.portability.local_job_service_main", f"--port={job_port}"]
    pool_argv = [sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main", f"--service_port={pool_port}"]
    with _service(job_argv, job_port, root / "job-service.log", root, env), \
            _service(pool_argv, pool_port, root / "worker-pool.log", pool_dir, pool_env) as pool:
        yield BeamServices(f"127.0.0.1:{job_port}", f"127.0.0.1:{pool_port}", pool.pid, markers, launcher_dir)


def _in(folder: Path, *args: str, timeout: int) -> subprocess.CompletedProcess:
    """`taxi-pipeline *args` run from `folder`."""
    from tests.conftest import cli_command

    return subprocess.run(cli_command(*args), capture_output=True, text=True, cwd=folder, timeout=timeout)


def _relative_locations(ws: Workspace, cwd: Path) -> List[str]:
    return [item if item.startswith("--") else os.path.relpath(item, cwd) for item in ws.locations()]


def _inferred_schema(out: Path) -> str:
    (schema,) = out.glob("pipeline_root/InferredSchemaGen/schema/*/schema.pbtxt")
    return schema.read_text()


@pytest.fixture(scope="module")
def portable_run(beam_services, tmp_path_factory, copy_spans, run_timeout):
    """`taxi-pipeline run --beam portable ...` on SLICE_SPANS, from the launcher's folder."""
    beam_services.clear()
    ws = Workspace(tmp_path_factory.mktemp("portable-run"))
    copy_spans(ws.data, SLICE_SPANS)
    result = _in(beam_services.launcher_dir, "run", *_relative_locations(ws, beam_services.launcher_dir),
                 *beam_services.beam_flags(), timeout=run_timeout)
    assert result.returncode == 0, result.stdout + result.stderr
    return ws, result, beam_services.imports()


def test_the_portable_run_pushes_with_its_dofns_in_the_pools_workers(portable_run, last_run):
    ws, result, imports = portable_run
    assert len(ws.versions()) == 1
    assert last_run(ws.out)["outcome"] == "pushed"
    # Beam's local job service asks the pool for a new worker process for each job.
    assert len(imports) >= BEAM_JOBS, imports
    ran = set().union(*imports.values())
    assert ran >= {"tensorflow_data_validation", "tensorflow_transform", "tensorflow_model_analysis",
                   "components.ingest", "components.drift"}, ran
    # This package's source archive is built once (or reused), not by Beam for each job
    # from --setup_file, whose build printed to the console.
    assert "'sdist'" not in full_log(result)
    assert "No module named" not in result.stdout + result.stderr


def test_the_portable_run_gives_the_default_runs_schema_metrics_and_model(portable_run, finished_run, last_run,
                                                                         examples_without_label):
    import tensorflow as tf

    ws, _, _ = portable_run
    default = finished_run.workspace
    assert _inferred_schema(ws.out) == _inferred_schema(default.out)
    portable_metrics, default_metrics = last_run(ws.out)["eval_metrics"], last_run(default.out)["eval_metrics"]
    assert portable_metrics.keys() == default_metrics.keys()
    for name, value in default_metrics.items():
        assert portable_metrics[name] == pytest.approx(value, abs=1e-6), name
    examples = tf.constant(examples_without_label(default.data, 200))
    (portable_version,), (default_version,) = ws.versions(), default.versions()
    outputs = [
        tf.saved_model.load(str(served.model_dir / version)).signatures["serving_default"](examples=examples)
        for served, version in ((ws, portable_version), (default, default_version))
    ]
    assert outputs[0]["probability"].shape == (200,)
    np.testing.assert_allclose(outputs[0]["probability"].numpy(), outputs[1]["probability"].numpy(), atol=1e-6)


def test_predict_on_the_portable_runner_scores_as_the_default_one(beam_services, finished_run, tmp_path,
                                                                 run_timeout):
    from pipeline import predict

    default = finished_run.workspace
    common = ["predict", "--input", str(default.data / "span-16" / "*"), "--serving-dir", str(default.serving)]
    beam_services.clear()
    portable = _in(beam_services.launcher_dir, *common, "--output", str(tmp_path / "portable"),
                   *beam_services.beam_flags(), timeout=run_timeout)
    assert portable.returncode == 0, portable.stdout + portable.stderr
    assert "tfx_bsl" in set().union(*beam_services.imports().values())
    local = _in(tmp_path, *common, "--output", str(tmp_path / "local"), timeout=run_timeout)
    assert local.returncode == 0, local.stdout + local.stderr
    portable_scores = predict.read_scores(str(tmp_path / "portable"))
    local_scores = predict.read_scores(str(tmp_path / "local"))
    assert len(local_scores) > 100 and portable_scores.keys() == local_scores.keys()
    np.testing.assert_allclose([portable_scores[key] for key in local_scores], list(local_scores.values()),
                               atol=1e-6)


def test_retrain_on_the_portable_runner_reads_per_span_statistics_and_pushes(beam_services, workspace, copy_spans,
                                                                            last_run, run_timeout):
    ws = workspace
    copy_spans(ws.data, (14, 15, 16))
    beam_services.clear()
    result = _in(beam_services.launcher_dir, "retrain", "--window", "3",
                 *_relative_locations(ws, beam_services.launcher_dir), *beam_services.beam_flags(),
                 timeout=run_timeout)
    assert result.returncode == 0, result.stdout + result.stderr
    record = last_run(ws.out)
    assert (record["outcome"], record["spans"], record["window_size"]) == ("pushed", [14, 15, 16], 3)
    assert "Spans: trained on 14, 15; evaluated on 16" in result.stdout
    ran = set().union(*beam_services.imports().values())
    assert ran >= {"tensorflow_data_validation", "tensorflow_transform", "tensorflow_model_analysis"}, ran
