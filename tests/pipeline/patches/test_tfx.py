"""The patches to TFX: work handed on once a node published its outputs, no archive of
TFX for Beam workers that stay in this environment, and imports deferred."""

import inspect
import os
import subprocess
import sys
import types

import pytest
from tfx.dsl.components.base import base_beam_executor

from components import compat
from pipeline.patches import machinery
from pipeline.patches import tfx as tfx_patches


class _Launcher:
    """Stands for TFX's Launcher: it publishes a node's outputs once its executor ran."""

    def __init__(self, node_id):
        self._pipeline_node = types.SimpleNamespace(node_info=types.SimpleNamespace(id=node_id))
        self.published = []

    def _publish_successful_execution(self, execution_id, contexts, output_dict, executor_output):
        self.published.append(execution_id)


def test_work_left_for_a_node_runs_once_it_published_its_outputs_and_never_fails_it(caplog):
    publish = tfx_patches._calling_back(_Launcher._publish_successful_execution)
    outputs = {"model": ["artifact"]}
    seen = []

    def failing(_):
        raise RuntimeError("boom")

    with tfx_patches.when_done("Trainer", seen.append), tfx_patches.when_done("Trainer", failing):
        transform = _Launcher("Transform")
        publish(transform, 1, [], {"transform_graph": []}, None)
        assert transform.published == [1] and seen == []
        trainer = _Launcher("Trainer")
        publish(trainer, 2, [], outputs, None)
        assert trainer.published == [2]
    assert seen == [outputs]
    assert "work after node Trainer failed" in caplog.text
    publish(_Launcher("Trainer"), 3, [], outputs, None)
    assert seen == [outputs]  # the block's end took the work back
    assert "Trainer" not in tfx_patches._when_done


def test_the_launcher_patch_targets_tfx_s_publishing_of_a_run_node_only():
    from tfx.orchestration.portable import launcher

    original = launcher.Launcher._publish_successful_execution
    assert list(inspect.signature(original).parameters) == [
        "self", "execution_id", "contexts", "output_dict", "executor_output"]
    assert "self._pipeline_node = pipeline_node" in inspect.getsource(launcher.Launcher.__init__)
    # Called after the executor ran, and only there: a cached node publishes otherwise.
    launch = inspect.getsource(launcher.Launcher.launch)
    assert launch.count("self._publish_successful_execution(") == 1
    assert launch.index("self._run_executor(") < launch.index("self._publish_successful_execution(")
    assert "_publish_successful_execution" not in inspect.getsource(launcher.Launcher._prepare_execution)
    with machinery.patched(tfx_patches.patches()):
        assert launcher.Launcher._publish_successful_execution is not original
    assert launcher.Launcher._publish_successful_execution is original


class _BeamExecutor(base_beam_executor.BaseBeamExecutor):
    def Do(self, input_dict, output_dict, exec_properties):
        raise AssertionError("never run")


@pytest.mark.parametrize("args, archive_built", [
    ([], False),
    (["--runner=apache_beam.runners.portability.fn_api_runner.FnApiRunner"], False),
    (["--direct_running_mode=multi_processing", "--direct_num_workers=2"], False),
    (["--runner=PortableRunner", "--job_endpoint=localhost:8099"], True),
    (["--runner=DataflowRunner"], True),
])
def test_tfx_archives_itself_only_for_workers_beyond_this_environment(monkeypatch, args, archive_built):
    from tfx.utils import dependency_utils

    built = []
    monkeypatch.setattr(dependency_utils, "build_ephemeral_package", lambda: built.append(1) or "/tmp/tfx.tar.gz")
    given = ["--max_cache_memory_usage_mb=0"] + args
    with machinery.patched(tfx_patches.patches()):
        executor = _BeamExecutor(_BeamExecutor.Context(beam_pipeline_args=list(given)))
    assert bool(built) == archive_built
    assert ("--extra_package=/tmp/tfx.tar.gz" in executor._beam_pipeline_args) == archive_built
    assert executor._beam_pipeline_args[:len(given)] == given
    # Without the patch TFX builds its archive whatever the runner.
    built.clear()
    _BeamExecutor(_BeamExecutor.Context(beam_pipeline_args=list(given)))
    assert built == [1]



DEFERRED = """
import sys
import tensorflow as tf
from pipeline import patches
from pipeline.run import process

with process.local_runner(True):
    # Autograph asks every module in sys.modules for its __file__ when it converts a function.
    def step(x):
        return x + 1 if x > 0 else x

    tf.function(step)(tf.constant(1))
    deferred = patches.tfx.deferred_modules()
    package, runner_module = patches.tfx.DEFERRED_PACKAGE, deferred[-1]
    # The run's imports imported the Evaluator's constants from inside the package.
    print("tfx.components.evaluator.constants" in sys.modules, package in deferred,
          type(sys.modules[package]).__name__, "keras_tuner" in sys.modules, "kubernetes" in sys.modules)
    # First use: the package runs its __init__, whose InfraValidator holds the other one.
    tuner = sys.modules[package].Tuner.__name__
    executor = sys.modules["tfx.components.infra_validator.executor"]
    held = executor.kubernetes_runner is sys.modules[runner_module]
    loaded = "kubernetes" in sys.modules
    runner = executor.kubernetes_runner.KubernetesRunner.__name__
    print(tuner, "keras_tuner" in sys.modules, held, loaded, runner, "kubernetes" in sys.modules)
"""


def test_the_deferred_modules_are_imported_by_tfx_and_load_on_first_use_only(tmp_path):
    script = tmp_path / "deferred.py"  # a file: autograph converts only functions with a source
    script.write_text(DEFERRED)
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240,
                         env={**os.environ, machinery.ENV: "1"}, cwd=os.getcwd())
    assert ran.returncode == 0, ran.stderr[-3000:]
    # Neither loaded by the run's imports nor by autograph; each whole once used.
    run_imports, first_use = ran.stdout.splitlines()[-2:]
    # The package before TFX 1.17 only: TFX 1.21's sets TFMA's config classes, which its
    # Evaluator reads (the run's imports fail without).
    if compat.TFX_VERSION < (1, 17):
        assert run_imports.split() == ["True", "True", "DeferredModule", "False", "False"]
    else:
        assert run_imports.split() == ["True", "False", "module", "True", "False"]
    assert first_use.split() == ["Tuner", "True", "True", "False", "KubernetesRunner", "True"]
