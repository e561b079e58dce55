"""The Beam work beyond the launching process: Beam's portable job service and a Python
worker pool on 127.0.0.1, as Flink, Spark and Dataflow run a pipeline. The pipeline is
submitted as a portable proto and its DoFns are unpickled and run by the pool's worker
processes, which share nothing with the launcher but the file system. The tests start
both as a user does, with `taxi-pipeline beam-services` (on two free ports).

Each worker records the transforms of every stage it runs (a `sitecustomize` on the
services' PYTHONPATH only), so the tests see from the workers themselves that TFDV's,
TFT's, TFMA's, RunInference's and our own DoFns ran there. The launcher runs from another folder than the pool,
with relative paths, as a user types them.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path
from typing import Dict, Iterator, List, Set

import numpy as np
import pytest

from pipeline.beam import services as beam_services
from tests.helpers import SLICE_SPANS, Workspace, inferred_schema

pytestmark = pytest.mark.slow

MARKER_ENV = "TAXI_TEST_WORKER_MARKERS"
# In each process of the services' tree: once Beam's bundle processor is loaded, every
# stage a process runs writes a marker `<pid>-<parent pid>-<stage id>` holding the names
# of the stage's transforms, before it runs (the workers' own account of their work).
RECORDER = f"""
import importlib.util
import os
import sys

_DIR = os.environ.get({MARKER_ENV!r})
_MODULE = "apache_beam.runners.worker.bundle_processor"


def _record(process_bundle):
    def recorded(self, *args, **kwargs):
        descriptor = self.process_bundle_descriptor
        path = os.path.join(_DIR, "%d-%d-%s" % (os.getpid(), os.getppid(), descriptor.id))
        if not os.path.exists(path):
            with open(path, "w") as marker:
                marker.write("\\n".join(t.unique_name for t in descriptor.transforms.values()))
        return process_bundle(self, *args, **kwargs)
    return recorded


class _PatchOnLoad:
    def find_spec(self, name, path=None, target=None):
        if name != _MODULE or not _DIR:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            module.BundleProcessor.process_bundle = _record(module.BundleProcessor.process_bundle)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _PatchOnLoad())
"""
# A transform of each Beam component's job, as the workers name it.
JOB_TRANSFORMS = {
    "ImportExampleGen": "SplitFiles",
    "StatisticsGen": "GenerateStatistics",
    "DataGate": "ReadSpanFiles",
    "Transform": "ApplySavedModel",
    "Evaluator": "ExtractEvaluateAndWriteResults",
}
BEAM_JOBS = len(JOB_TRANSFORMS)


@dataclasses.dataclass(frozen=True)
class BeamServices:
    endpoints: beam_services.Endpoints
    services_pid: int
    markers: Path
    launcher_dir: Path

    def beam_flags(self) -> List[str]:
        return self.endpoints.flags()

    def transforms(self) -> Dict[int, Set[str]]:
        """Worker pid -> the names of the transforms it ran; only the pool's workers count
        (the services process itself runs no stage)."""
        found: Dict[int, Set[str]] = {}
        for marker in os.listdir(self.markers):
            pid, parent, _ = marker.split("-", 2)
            assert int(pid) != self.services_pid, (self.markers / marker).read_text()
            if int(parent) == self.services_pid:
                found.setdefault(int(pid), set()).update((self.markers / marker).read_text().splitlines())
        return found

    def clear(self) -> None:
        for marker in os.listdir(self.markers):
            os.unlink(self.markers / marker)


@pytest.fixture(scope="module")
def services(tmp_path_factory) -> Iterator[BeamServices]:
    """`taxi-pipeline beam-services` on two free ports of 127.0.0.1, in its own folder, its
    workers recording the stages they run."""
    root = tmp_path_factory.mktemp("beam-services")
    hooks, markers, services_dir, launcher_dir = (root / name for name in ("hooks", "markers", "services", "launcher"))
    for folder in (hooks, markers, services_dir, launcher_dir):
        folder.mkdir()
    (hooks / "sitecustomize.py").write_text(RECORDER)
    env = {**os.environ, "PYTHONPATH": str(hooks), MARKER_ENV: str(markers)}
    with beam_services.in_background(str(root / "beam-services.log"), env=env, cwd=str(services_dir)) as started:
        endpoints, process = started
        yield BeamServices(endpoints, process.pid, markers, launcher_dir)


def _in(folder: Path, *args: str, timeout: int) -> subprocess.CompletedProcess:
    """`taxi-pipeline *args` run from `folder`."""
    from tests.helpers import cli_command

    return subprocess.run(cli_command(*args), capture_output=True, text=True, cwd=folder, timeout=timeout)


def _relative_locations(ws: Workspace, cwd: Path) -> List[str]:
    return [item if item.startswith("--") else os.path.relpath(item, cwd) for item in ws.locations()]


@pytest.fixture(scope="module")
def portable_run(services, tmp_path_factory, copy_spans, run_timeout):
    """`taxi-pipeline run --beam portable ...` on SLICE_SPANS, from the launcher's folder."""
    services.clear()
    ws = Workspace(tmp_path_factory.mktemp("portable-run"))
    copy_spans(ws.data, SLICE_SPANS)
    result = _in(services.launcher_dir, "run", *_relative_locations(ws, services.launcher_dir),
                 *services.beam_flags(), timeout=run_timeout)
    assert result.returncode == 0, result.stdout + result.stderr
    return ws, result, services.transforms()


def test_the_portable_run_pushes_with_its_dofns_in_the_pools_workers(portable_run, last_run):
    ws, result, transforms = portable_run
    assert len(ws.versions()) == 1
    assert last_run(ws.out)["outcome"] == "pushed"
    # Beam's local job service asks the pool for a worker process for each job.
    assert len(transforms) >= BEAM_JOBS, transforms
    names = sorted(set().union(*transforms.values()))
    for component, transform in JOB_TRANSFORMS.items():
        assert any(transform in name for name in names), (component, names)
    # This package's source archive is built once (or reused), not by Beam for each job
    # from --setup_file, whose build printed to the console.
    (log,) = (ws.out / "logs").glob("run-*.log")
    assert "'sdist'" not in log.read_text()
    assert "No module named" not in result.stdout + result.stderr


def test_the_portable_run_gives_the_default_runs_schema_metrics_and_model(portable_run, finished_run, last_run,
                                                                         examples_without_label):
    import tensorflow as tf

    ws, _, _ = portable_run
    default = finished_run.workspace
    assert inferred_schema(ws.out) == inferred_schema(default.out)
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


def test_predict_on_the_portable_runner_scores_as_the_default_one(services, finished_run, tmp_path,
                                                                 run_timeout):
    from pipeline.ops import predict

    default = finished_run.workspace
    common = ["predict", "--input", str(default.data / "span-16" / "*"), "--serving-dir", str(default.serving)]
    services.clear()
    portable = _in(services.launcher_dir, *common, "--output", str(tmp_path / "portable"),
                   *services.beam_flags(), timeout=run_timeout)
    assert portable.returncode == 0, portable.stdout + portable.stderr
    assert any("RunInference" in name for name in set().union(*services.transforms().values()))
    local = _in(tmp_path, *common, "--output", str(tmp_path / "local"), timeout=run_timeout)
    assert local.returncode == 0, local.stdout + local.stderr
    portable_scores = predict.read_scores(str(tmp_path / "portable"))
    local_scores = predict.read_scores(str(tmp_path / "local"))
    assert len(local_scores) > 100 and portable_scores.keys() == local_scores.keys()
    np.testing.assert_allclose([portable_scores[key] for key in local_scores], list(local_scores.values()),
                               atol=1e-6)


def test_retrain_on_the_portable_runner_reads_per_span_statistics_and_pushes(services, workspace, copy_spans,
                                                                            last_run, run_timeout):
    ws = workspace
    copy_spans(ws.data, (14, 15, 16))
    services.clear()
    result = _in(services.launcher_dir, "retrain", "--window", "3",
                 *_relative_locations(ws, services.launcher_dir), *services.beam_flags(),
                 timeout=run_timeout)
    assert result.returncode == 0, result.stdout + result.stderr
    record = last_run(ws.out)
    assert (record["outcome"], record["spans"], record["window_size"]) == ("pushed", [14, 15, 16], 3)
    assert "Spans: trained on 14, 15; evaluated on 16" in result.stdout
    names = set().union(*services.transforms().values())
    for component in ("StatisticsGen", "Transform", "Evaluator"):
        assert any(JOB_TRANSFORMS[component] in name for name in names), (component, sorted(names))
