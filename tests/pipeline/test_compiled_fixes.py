"""Each fix to what TFX compiles: TFX still compiles the thing being fixed (else the fix
is dead code to remove), and the fix applies."""

import pytest

from pipeline import compiled_fixes, config, kubeflow_runner

IMAGE = "example.com/taxi-pipeline:1"


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


