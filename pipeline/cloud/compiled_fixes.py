"""Fixes to what TFX 1.16 and 1.21 compile (their KubeflowV2 compilers are the same), where
they leave no public switch. One function per fix.

Each has a test (tests/pipeline/cloud/test_compiled_fixes.py) that compiles the real pipeline
and checks both that TFX still compiles the thing being fixed and that the fix applies,
so a TFX upgrade that changes either fails loudly instead of silently.
"""

from __future__ import annotations

from typing import Any, Dict

from components.custom import pusher, window
from components.custom.recorded import NodeId
from pipeline import cloud_storage
from pipeline.cloud import task as task_command

# KFP's placeholders for the pipeline job's id and name, resolved by the backend when a task runs.
PIPELINE_JOB_ID = "{{$.pipeline_job_uuid}}"
PIPELINE_JOB_NAME = "{{$.pipeline_job_name}}"
# With an exit handler, TFX compiles the pipeline's tasks into a sub-DAG of this name.
TFX_DAG = "tfx-dag"


def dag_tasks(job: Dict[str, Any]) -> Dict[str, Any]:
    """The pipeline's tasks: the root DAG's, or with an exit handler the `tfx-dag`
    component's (the root DAG then holds that sub-DAG and the handler)."""
    spec = job["pipelineSpec"]
    sub_dag = spec.get("components", {}).get(TFX_DAG, {}).get("dag")
    return (sub_dag or spec["root"]["dag"])["tasks"]


def cloud_storage_bounded_in_job(job: Dict[str, Any]) -> Dict[str, Any]:
    """Every task's container gets `cloud_storage.BOUNDS` in its environment (the spec's
    `env`, which Vertex AI sets in the container): a bucket that stops answering ends the
    task within minutes instead of about 25 minutes per operation."""
    for executor in job["pipelineSpec"]["deploymentSpec"]["executors"].values():
        container = executor.get("container")
        if container is None:
            continue
        env = container.setdefault("env", [])
        named = {variable["name"] for variable in env}
        env.extend({"name": name, "value": value} for name, value in cloud_storage.BOUNDS.items()
                   if name not in named)
    return job


def tasks_end_at_once_in_job(job: Dict[str, Any]) -> Dict[str, Any]:
    """Every command TFX compiles, `python -m` one of its container entry points (each
    executor's, and ImportExampleGen's `preCacheCheck` driver), runs through
    `pipeline.cloud.task`, which ends the task's process once the entry point returned."""
    for executor in job["pipelineSpec"]["deploymentSpec"]["executors"].values():
        container = executor.get("container") or {}
        for spec in (container, container.get("lifecycle", {}).get("preCacheCheck", {})):
            command = spec.get("command", [])
            if command[:2] == ["python", "-m"] and command[2:3] != [task_command.__name__]:
                spec["command"] = ["python", "-m", task_command.__name__, *command[2:]]
    return job


def span_window_uncached_in_job(job: Dict[str, Any]) -> Dict[str, Any]:
    """The KFP v2 PipelineJob JSON with the SpanWindow task's cache off.

    A compiled pipeline cannot know the spans of a future run, so the task's parameters
    are the same on every run: Vertex would reuse the first run's window forever. TFX
    1.16-1.21 compile caching only from the pipeline-wide `enable_cache` (`step_builder`
    sets no per-task option).
    """
    tasks = dag_tasks(job)
    if NodeId.WINDOW in tasks:
        tasks[NodeId.WINDOW]["cachingOptions"] = {"enableCache": False}
    return job


def component_of(spec: Dict[str, Any], task: Dict[str, Any]) -> Dict[str, Any]:
    """The component a task of `spec` runs."""
    return spec["components"][task["componentRef"]["name"]]


def string_parameter(job: Dict[str, Any], task_name: str, parameter: str, given: Dict[str, Any]) -> None:
    """Declares the string `parameter` of task `task_name` and gives it `given` (a task
    input spec), in the form of the spec's schema: 2.0.0 (TFX's default, Vertex AI's
    PipelineJob) types a parameter with `type`, 2.1.0 (Kubeflow Pipelines' backend) with
    `parameterType`."""
    spec = job["pipelineSpec"]
    tasks = dag_tasks(job)
    tasks[task_name].setdefault("inputs", {}).setdefault("parameters", {})[parameter] = given
    component = component_of(spec, tasks[task_name])
    definitions = component.setdefault("inputDefinitions", {}).setdefault("parameters", {})
    definitions[parameter] = {"parameterType": "STRING"} if schema_2_1(job) else {"type": "STRING"}


def schema_2_1(job: Dict[str, Any]) -> bool:
    return job["pipelineSpec"].get("schemaVersion") == "2.1.0"


def _job_constant(job: Dict[str, Any], task_name: str, parameter: str, placeholder: str) -> Dict[str, Any]:
    """Task `task_name` takes `placeholder` (resolved per job by the backend) as its string `parameter`."""
    if task_name in dag_tasks(job):
        constant = {"constant": placeholder} if schema_2_1(job) else {"constantValue": {"stringValue": placeholder}}
        string_parameter(job, task_name, parameter, {"runtimeValue": constant})
    return job


def span_window_keyed_by_job(job: Dict[str, Any]) -> Dict[str, Any]:
    """The SpanWindow task takes the pipeline job's id as its `job` parameter.

    Turning its cache off is not enough: `aiplatform.PipelineJob(..., enable_caching=True)`
    (and the console's "enable caching") sets every task's caching option, and the window
    would again be the first run's forever. With the job's id among its inputs, no two
    jobs' SpanWindow tasks have the same cache key, whatever caching is asked for.
    """
    return _job_constant(job, NodeId.WINDOW, window.JOB_PARAMETER, PIPELINE_JOB_ID)


def pusher_names_its_job(job: Dict[str, Any]) -> Dict[str, Any]:
    """The Pusher task takes the pipeline job's name as its `run` parameter, which the
    model's record names each candidate by (TFX's Vertex entry point gives the executor no
    run id). A push is then never a cache hit: one that would be is made again, and finds
    its version already whole (the Pusher's fingerprint) and its fate recorded."""
    return _job_constant(job, NodeId.PUSHER, pusher.RUN_KEY, PIPELINE_JOB_NAME)


def producer_tasks_named_as_compiled(job: Dict[str, Any]) -> Dict[str, Any]:
    """Points each runtime parameter at the task that produces it.

    TFX 1.16-1.21 compile a parameter taken from another node's output (`.future()[0].value`)
    as coming from task `<node id>_task`, but names that task `<node id>`: no task
    of that name exists, and the run could not resolve the parameter.
    """
    tasks = dag_tasks(job)
    for task in tasks.values():
        for parameter in task.get("inputs", {}).get("parameters", {}).values():
            output = parameter.get("taskOutputParameter")
            if output and output["producerTask"] not in tasks and output["producerTask"].endswith("_task"):
                producer = output["producerTask"][: -len("_task")]
                if producer in tasks:
                    output["producerTask"] = producer
    return job
