"""Each fix to what TFX compiles: TFX still compiles the thing being fixed (else the fix
is dead code to remove), and the fix applies."""

import pytest
from tfx.dsl.compiler import compiler

from pipeline import compiled_fixes, config, kubeflow_runner, local_runner
from pipeline import pipeline as pipeline_lib

IMAGE = "example.com/taxi-pipeline:1"


def _caching(ir):
    return {node.pipeline_node.node_info.id: node.pipeline_node.execution_options.caching_options.enable_cache
            for node in ir.nodes}


@pytest.mark.parametrize("window_size", [None, 3])
def test_the_span_window_is_compiled_cached_and_the_fix_turns_only_its_cache_off(tmp_path, window_size):
    run_config = config.RunConfig(
        output_root=str(tmp_path), settings=config.Settings(window_size=window_size)
    ).resolved()
    ir = compiler.Compiler().compile(local_runner.build_pipeline(run_config))
    assert _caching(ir)["SpanWindow"] is True  # what TFX 1.16 compiles
    caching = _caching(compiled_fixes.span_window_uncached_in_ir(ir))
    assert caching.pop("SpanWindow") is False
    assert caching and all(caching.values())


def test_the_local_ir_carries_our_run_id(tmp_path):
    ir = local_runner.compile_ir(config.RunConfig(output_root=str(tmp_path)).resolved(), "run-42")
    assert "run-42" in str(ir) and _caching(ir)["SpanWindow"] is False


def _job():
    kfp_config = config.KubeflowConfig(image=IMAGE, pipeline_root="gs://b/p", data_root="gs://b/d",
                                       serving_dir="gs://b/s")
    from tfx import v1 as tfx

    runner = tfx.orchestration.experimental.KubeflowV2DagRunner(
        config=tfx.orchestration.experimental.KubeflowV2DagRunnerConfig(default_image=IMAGE), output_dir="/tmp")
    return runner.run(kubeflow_runner.build_pipeline(kfp_config), write_out=False)


@pytest.fixture(scope="module")
def compiled_job():
    return _job()


def test_the_compiled_job_caches_the_span_window_and_the_fix_turns_it_off(compiled_job):
    tasks = compiled_job["pipelineSpec"]["root"]["dag"]["tasks"]
    assert tasks["SpanWindow"].get("cachingOptions", {}).get("enableCache") is True
    fixed = compiled_fixes.span_window_uncached_in_job(_job())["pipelineSpec"]["root"]["dag"]["tasks"]
    assert fixed["SpanWindow"]["cachingOptions"] == {"enableCache": False}
    assert fixed["Transform"]["cachingOptions"] == {"enableCache": True}


def test_runtime_parameters_are_compiled_from_a_missing_task_and_the_fix_names_the_real_one(compiled_job):
    producer = (compiled_job["pipelineSpec"]["root"]["dag"]["tasks"]["ImportExampleGen"]["inputs"]["parameters"]
                ["input_config"]["taskOutputParameter"]["producerTask"])
    assert producer == "SpanWindow_task"  # what TFX 1.16 compiles: no such task
    fixed = compiled_fixes.producer_tasks_named_as_compiled(_job())
    producer = (fixed["pipelineSpec"]["root"]["dag"]["tasks"]["ImportExampleGen"]["inputs"]["parameters"]
                ["input_config"]["taskOutputParameter"]["producerTask"])
    assert producer == "SpanWindow"


def test_transform_and_trainer_read_the_window_splits():
    splits = pipeline_lib.window_splits(3)
    assert splits.train == ("train_2", "train_1") and splits.eval == "eval"
    assert pipeline_lib.window_splits(None).train == ("train",)
