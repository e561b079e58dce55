"""`compile --target kubeflow`, read as Kubeflow Pipelines' backend reads it. What the
backend supports is written in the tests from its source (kubeflow/pipelines at 7b70c7b9,
the files named in docs/beyond-one-machine.md; here and in tests/image/kubeflow.py), not
taken from the package under test."""

import json
import re

import pytest
import yaml
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2

from pipeline import cli, config
from pipeline.cloud import kubeflow_target

# What the backend takes, as the image harness's KFP mode holds it.
from tests.image.kubeflow import EXECUTOR_KINDS, SCHEMA_VERSION

IMAGE = "registry.example.com/ml/taxi-pipeline:1.0"
URL = "https://hooks.example.com/services/T0/B0/s3cr3t-token"
LOCATIONS = ["--pipeline-root", "gs://bucket/pipelines", "--data-root", "gs://bucket/data",
             "--serving-dir", "gs://bucket/serving"]

# The parameter types of pipeline_spec.proto that backend/src/v2/driver reads by `parameterType`.
PARAMETER_TYPES = {"STRING", "NUMBER_INTEGER", "NUMBER_DOUBLE", "BOOLEAN", "LIST", "STRUCT", "TASK_FINAL_STATUS"}
# The whole-value placeholders backend/src/v2/driver resolves in a constant.
PLACEHOLDERS = {"{{$.pipeline_job_name}}", "{{$.pipeline_job_uuid}}", "{{$.pipeline_job_resource_name}}",
                "{{$.pipeline_job_create_time_utc}}"}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    output = tmp_path_factory.mktemp("kfp") / "pipeline.yaml"
    status = cli.main(["compile", "--target", "kubeflow", "--image", IMAGE, *LOCATIONS, "--output", str(output),
                       "--notify-secret", "k8s:alert-webhook/url"])
    assert status == 0
    text = output.read_text()
    return text, list(yaml.safe_load_all(text))


def _walk(value, path=()):
    """Every (path, dict) in a JSON-like value."""
    if isinstance(value, dict):
        yield path, value
        for key, item in value.items():
            yield from _walk(item, path + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk(item, path + (index,))


def test_the_upload_is_a_pipeline_spec_of_schema_2_1_and_a_platform_spec(compiled):
    _, (spec, platform) = compiled
    assert "pipelineSpec" not in spec and "runtimeConfig" not in spec  # not a PipelineJob
    assert spec["schemaVersion"] == SCHEMA_VERSION
    assert spec["defaultPipelineRoot"] == "gs://bucket/pipelines"
    # Both parse, field for field, as KFP's protos.
    json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec())
    json_format.ParseDict(platform, pipeline_spec_pb2.PlatformSpec())


def test_every_executor_and_parameter_is_one_the_backend_runs(compiled):
    _, (spec, _) = compiled
    executors = spec["deploymentSpec"]["executors"]
    for label, executor in executors.items():
        assert set(executor) <= EXECUTOR_KINDS and len(executor) == 1, (label, sorted(executor))
        # No lifecycle hook: the backend runs none (ImportExampleGen's preCacheCheck was one).
        assert "lifecycle" not in executor.get("container", {}), label
    for path, node in _walk(spec):
        if path and path[-1] == "parameters" and any(part in ("inputDefinitions", "outputDefinitions")
                                                    for part in path):
            for name, definition in node.items():
                assert set(definition) <= {"parameterType", "isOptional", "defaultValue"}, (path, name, definition)
                assert definition["parameterType"] in PARAMETER_TYPES, (path, name, definition)
        if "runtimeValue" in node:
            assert set(node["runtimeValue"]) == {"constant"}, (path, node)  # not 2.0.0's constantValue
            constant = node["runtimeValue"]["constant"]
            if isinstance(constant, str):
                assert set(re.findall(r"\{\{\$[^}]*\}\}", constant)) <= PLACEHOLDERS, (path, constant)


def test_no_task_is_a_resolver_anywhere(compiled):
    text, (spec, _) = compiled
    assert "resolver" not in json.dumps(spec["deploymentSpec"]).lower()
    assert "Resolver" not in text


def test_a_resolver_task_is_refused_with_the_backend_s_words():
    spec = {"deploymentSpec": {"executors": {"Baseline_executor": {"resolver": {"outputArtifactQueries": {}}}}}}
    with pytest.raises(ValueError, match=r"resolver tasks \(Baseline_executor\).*resolver not implemented yet"):
        kubeflow_target.refuse_resolvers(spec)


def test_example_gen_is_keyed_by_the_window_s_files_not_by_a_hook(compiled):
    _, (spec, _) = compiled
    tasks = spec["components"]["tfx-dag"]["dag"]["tasks"]
    given = tasks["ImportExampleGen"]["inputs"]["parameters"][kubeflow_target.WINDOW_INPUTS_PARAMETER]
    assert given == {"taskOutputParameter": {"producerTask": "SpanWindow", "outputParameterKey": "inputs_used"}}
    definitions = spec["components"]["ImportExampleGen"]["inputDefinitions"]["parameters"]
    assert definitions[kubeflow_target.WINDOW_INPUTS_PARAMETER] == {"parameterType": "STRING"}
    # The job's id and name, in the 2.1.0 form the driver reads.
    job, run = tasks["SpanWindow"]["inputs"]["parameters"]["job"], tasks["Pusher"]["inputs"]["parameters"]["run"]
    assert job == {"runtimeValue": {"constant": "{{$.pipeline_job_uuid}}"}}
    assert run == {"runtimeValue": {"constant": "{{$.pipeline_job_name}}"}}


def test_the_exit_handler_s_url_comes_from_the_kubernetes_secret_and_is_nowhere_in_the_output(compiled):
    text, (spec, platform) = compiled
    handler = spec["root"]["dag"]["tasks"]["NotifyFinalStatus"]
    assert handler["triggerPolicy"]["strategy"] == "ALL_UPSTREAM_TASKS_COMPLETED"
    assert handler["inputs"]["parameters"]["url_from"] == {"runtimeValue": {"constant": "k8s:alert-webhook/url"}}
    label = spec["components"][handler["componentRef"]["name"]]["executorLabel"]
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert set(executors) == {label}
    (secret,) = executors[label]["secretAsEnv"]
    assert secret["secretNameParameter"] == {"runtimeValue": {"constant": "alert-webhook"}}
    assert secret["keyToEnv"] == [{"secretKey": "url", "envVar": config.NOTIFY_URL_ENV}]
    assert "hooks.example.com" not in text


def test_a_kubernetes_secret_is_refused_for_vertex_and_a_url_for_either(tmp_path, capsys):
    status = cli.main(["compile", "--image", IMAGE, *LOCATIONS, "--output", str(tmp_path / "p.json"),
                       "--notify-secret", "k8s:alert-webhook/url"])
    assert status == 1 and not (tmp_path / "p.json").exists()
    assert "names a Kubernetes Secret, which only Kubeflow Pipelines on a cluster reads: give --target kubeflow" in (
        capsys.readouterr().err)
    status = cli.main(["compile", "--target", "kubeflow", "--image", IMAGE, *LOCATIONS,
                       "--output", str(tmp_path / "p.yaml"), "--notify-secret", URL])
    said = capsys.readouterr()
    assert status == 1 and not (tmp_path / "p.yaml").exists() and "s3cr3t" not in said.out + said.err
    assert "or on Kubeflow Pipelines in a Kubernetes Secret and give k8s:SECRET/KEY" in said.err
