"""The Kubeflow Pipelines mode's own rules (tests/image/kubeflow.py), on small specs: no
image needed."""

import json

import pytest
import yaml

from tests.image import kubeflow, vertex

SPEC = {
    "schemaVersion": "2.1.0", "pipelineInfo": {"name": "p"}, "defaultPipelineRoot": "gs://b/root/",
    "root": {"dag": {"tasks": {"T": {"componentRef": {"name": "T"}, "taskInfo": {"name": "T"}}}}},
    "components": {"T": {"executorLabel": "T_executor", "inputDefinitions": {"parameters": {
        "text": {"parameterType": "STRING"}, "count": {"parameterType": "NUMBER_INTEGER"}}}}},
    "deploymentSpec": {"executors": {"T_executor": {"container": {"image": "i", "command": ["true"]}}}},
}
PLATFORM = {"platforms": {"kubernetes": {"deploymentSpec": {"executors": {"T_executor": {"secretAsEnv": [{
    "secretName": "hook", "secretNameParameter": {"runtimeValue": {"constant": "hook"}},
    "keyToEnv": [{"secretKey": "url", "envVar": "URL"}], "optional": True}]}}}}}}


def _job(tmp_path, *documents, secrets=None):
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump_all(list(documents)))
    return kubeflow.KubeflowJob(str(path), None, None, str(tmp_path / "state"), kubernetes_secrets=secrets)


def test_the_upload_is_refused_as_kfp_refuses_it(tmp_path):
    with pytest.raises(vertex.HarnessError, match="unknown template format"):
        _job(tmp_path, {"pipelineSpec": SPEC, "runtimeConfig": {}})
    with pytest.raises(vertex.HarnessError, match="KFP only supports schema version 2.1.0, but got 2.0.0"):
        _job(tmp_path, dict(SPEC, schemaVersion="2.0.0"))
    resolving = json.loads(json.dumps(SPEC))
    resolving["deploymentSpec"]["executors"]["R_executor"] = {"resolver": {"outputArtifactQueries": {}}}
    with pytest.raises(vertex.HarnessError, match="R_executor: resolver not implemented yet"):
        _job(tmp_path, resolving)
    job = _job(tmp_path, SPEC)
    assert (job.root, job.pipeline) == ("gs://b/root", "p")


def test_parameters_take_the_2_1_0_form_and_an_upstream_number_becomes_text_for_a_string(tmp_path):
    job = _job(tmp_path, SPEC)
    assert job.constant_value({"constant": "{{$.pipeline_job_uuid}}"}, "STRING") == job.job_id
    assert job.constant_value({"constant": 4.0}, "NUMBER_INTEGER") == 4.0
    assert job.passed_value(1.0, "STRING") == "1" and job.passed_value(1.0, "NUMBER_INTEGER") == 1.0
    status = {"state": "SUCCEEDED", "pipelineTaskName": "tfx-dag"}
    assert job.final_status_value(status) == status  # a Struct, not Vertex's JSON text
    assert job.PARAMETERS == "parameterValues" and not job.RUNS_HOOKS and not job.KEYED_BY_ENV


def test_a_secret_sets_its_variable_and_a_missing_one_is_unset_or_keeps_the_pod_from_starting(tmp_path):
    component, container = SPEC["components"]["T"], SPEC["deploymentSpec"]["executors"]["T_executor"]["container"]
    assert _job(tmp_path, SPEC, PLATFORM, secrets={("hook", "url"): "https://h"}).task_env(component, container) == {
        "URL": "https://h"}
    assert _job(tmp_path, SPEC, PLATFORM).task_env(component, container) == {}
    required = json.loads(json.dumps(PLATFORM))
    (secret,) = required["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["T_executor"]["secretAsEnv"]
    secret["optional"] = False
    assert _job(tmp_path, SPEC, required).task_env(component, container) is None


def test_the_cache_key_leaves_the_environment_out_as_kfp_s_does():
    container = {"image": "i", "command": ["c"], "env": [{"name": "A", "value": "1"}]}
    executor_input = {"inputs": {"parameterValues": {"x": "1"}, "artifacts": {}}, "outputs": {"artifacts": {}}}
    other_env = dict(container, env=[{"name": "A", "value": "2"}])
    assert vertex.cache_key("i", container, executor_input, {}, environment=False) == vertex.cache_key(
        "i", other_env, executor_input, {}, environment=False)
    assert vertex.cache_key("i", container, executor_input, {}) != vertex.cache_key("i", other_env, executor_input, {})
    changed = {"inputs": {"parameterValues": {"x": "2"}, "artifacts": {}}, "outputs": {"artifacts": {}}}
    assert vertex.cache_key("i", container, executor_input, {}, environment=False) != vertex.cache_key(
        "i", container, changed, {}, environment=False)
