"""Each fix to what TFX compiles: TFX still compiles the thing being fixed (else the fix
is dead code to remove), and the fix applies."""

import json

import pytest
from google.protobuf import json_format

from pipeline import cloud_storage, config
from pipeline.cloud import compiled_fixes, kubeflow_runner

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
    assert producer == "SpanWindow_task"  # what TFX 1.16-1.21 compile: no such task
    fixed = compiled_fixes.producer_tasks_named_as_compiled(_job())
    producer = (fixed["pipelineSpec"]["root"]["dag"]["tasks"]["ImportExampleGen"]["inputs"]["parameters"]
                ["input_config"]["taskOutputParameter"]["producerTask"])
    assert producer == "SpanWindow"


@pytest.mark.parametrize("fix, task, parameter, placeholder", [
    # The job's id keys the window: no two jobs share its cache.
    (compiled_fixes.span_window_keyed_by_job, "SpanWindow", "job", compiled_fixes.PIPELINE_JOB_ID),
    # The job's name names the run that made each candidate in the record.
    (compiled_fixes.pusher_names_its_job, "Pusher", "run", compiled_fixes.PIPELINE_JOB_NAME),
])
def test_tfx_compiles_no_job_parameter_and_the_fix_declares_it_as_the_jobs_placeholder(
        compiled_job, fix, task, parameter, placeholder):
    assert parameter not in compiled_job["pipelineSpec"]["root"]["dag"]["tasks"][task]["inputs"]["parameters"]
    fixed = fix(_job())["pipelineSpec"]
    given = fixed["root"]["dag"]["tasks"][task]["inputs"]["parameters"][parameter]
    assert given == {"runtimeValue": {"constantValue": {"stringValue": placeholder}}}
    assert fixed["components"][task]["inputDefinitions"]["parameters"][parameter] == {"type": "STRING"}


def _cache_key(spec, task_name, job_id):
    """What Vertex AI keys a task's cache on, as far as the JSON decides it: the component
    and the task's input values, the job id placeholder resolved for this job; None when
    the task's cache is off."""
    task = spec["root"]["dag"]["tasks"][task_name]
    if not task.get("cachingOptions", {}).get("enableCache", False):
        return None
    values = {
        name: json.dumps(value, sort_keys=True).replace(compiled_fixes.PIPELINE_JOB_ID, job_id)
        for name, value in task.get("inputs", {}).get("parameters", {}).items()
    }
    return json.dumps([task["componentRef"], values], sort_keys=True)


@pytest.mark.parametrize("enable_caching", [None, True, False])
def test_submitted_as_readme_says_the_window_is_chosen_again_by_every_job(tmp_path, enable_caching):
    """The JSON `taxi-pipeline compile` writes, loaded by `aiplatform.PipelineJob` offline as
    README says to submit it: two jobs never share the SpanWindow task's cache, whatever
    `enable_caching` is, while the Transform task keeps what was asked for."""
    from google.auth import credentials
    from google.cloud import aiplatform

    from pipeline.cloud import kubeflow_runner

    path = tmp_path / "pipeline.json"
    kubeflow_runner.compile_pipeline(
        config.KubeflowConfig(image=IMAGE, pipeline_root="gs://b/p", data_root="gs://b/d", serving_dir="gs://b/s"),
        str(path),
    )
    specs = []
    for day in ("monday", "tuesday"):
        job = aiplatform.PipelineJob(
            display_name="taxi", template_path=str(path), job_id=f"taxi-{day}", enable_caching=enable_caching,
            project="project", location="europe-west4", credentials=credentials.AnonymousCredentials(),
        )
        specs.append((json_format.MessageToDict(job._gca_resource._pb.pipeline_spec), job.job_id))
    (monday, monday_id), (tuesday, tuesday_id) = specs
    window_monday = _cache_key(monday, "SpanWindow", monday_id)
    window_tuesday = _cache_key(tuesday, "SpanWindow", tuesday_id)
    assert window_monday is None or window_monday != window_tuesday
    if enable_caching:
        assert window_monday is not None  # aiplatform forced the cache on: the job id is what keeps it fresh
    transform = [_cache_key(spec, "Transform", job_id) for spec, job_id in specs]
    assert (transform[0] is not None) is (enable_caching is not False)
    assert transform[0] == transform[1]


def test_every_artifact_type_of_the_compiled_job_is_importable_as_its_container_does(compiled_job):
    """A KFP v2 container finds each artifact's class by its type's title: a custom type
    whose class cannot be imported by that name fails the task at run time."""
    from kfp.pipeline_spec import pipeline_spec_pb2
    from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils
    from tfx.utils import import_utils

    schemas = set()

    def collect(node):
        if isinstance(node, dict):
            if "instanceSchema" in node:
                schemas.add(node["instanceSchema"])
            for value in node.values():
                collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    collect(compiled_job["pipelineSpec"])
    titles = set()
    for schema in schemas:
        type_schema = pipeline_spec_pb2.ArtifactTypeSchema(instance_schema=schema)
        class_path = kubeflow_v2_entrypoint_utils._retrieve_class_path(type_schema)
        titles.add(class_path)
        assert import_utils.import_class_by_path(class_path) is not None, class_path
    assert "components.ServedModelBlessing" in titles


def test_tfx_compiles_no_container_environment_and_the_fix_bounds_cloud_storage_in_every_task(compiled_job):
    executors = compiled_job["pipelineSpec"]["deploymentSpec"]["executors"]
    containers = [executor["container"] for executor in executors.values() if "container" in executor]
    assert len(containers) >= 10 and not any(container.get("env") for container in containers)
    job = _job()
    first = next(executor["container"] for executor in job["pipelineSpec"]["deploymentSpec"]["executors"].values()
                 if "container" in executor)
    first["env"] = [{"name": "GCS_REQUEST_IDLE_TIMEOUT_SECS", "value": "5"}]  # a user's own value stays
    fixed = compiled_fixes.cloud_storage_bounded_in_job(job)["pipelineSpec"]["deploymentSpec"]["executors"]
    for executor in fixed.values():
        if "container" not in executor:
            continue
        env = {variable["name"]: variable["value"] for variable in executor["container"]["env"]}
        assert set(env) == set(cloud_storage.BOUNDS)
        expected = "5" if executor["container"] is first else cloud_storage.BOUNDS["GCS_REQUEST_IDLE_TIMEOUT_SECS"]
        assert env["GCS_REQUEST_IDLE_TIMEOUT_SECS"] == expected


def test_tfx_compiles_its_entry_points_as_commands_and_the_fix_runs_each_through_the_task_command(compiled_job):
    def commands(job):
        found = {}
        for label, executor in job["pipelineSpec"]["deploymentSpec"]["executors"].items():
            container = executor["container"]
            found[label] = container["command"]
            if "lifecycle" in container:
                found[f"{label} preCacheCheck"] = container["lifecycle"]["preCacheCheck"]["command"]
        return found

    compiled = commands(compiled_job)
    assert {command[2] for command in compiled.values()} == {
        "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor",
        "tfx.orchestration.kubeflow.v2.file_based_example_gen.driver"}
    assert "ImportExampleGen_executor preCacheCheck" in compiled
    assert all(command[:2] == ["python", "-m"] and len(command) == 3 for command in compiled.values())
    fixed = compiled_fixes.tasks_end_at_once_in_job(_job())
    assert commands(fixed) == {label: ["python", "-m", "pipeline.cloud.task", command[2]]
                               for label, command in compiled.items()}
    assert compiled_fixes.tasks_end_at_once_in_job(json.loads(json.dumps(fixed))) == fixed  # applied once
