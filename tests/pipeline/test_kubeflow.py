"""`taxi-pipeline compile`: the KFP v2 / Vertex AI PipelineJob JSON."""

import json
import os
import tempfile

import pytest
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2

from pipeline import cli

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMAGE = "europe-west4-docker.pkg.dev/project/repo/taxi-pipeline:1.0"
TASKS = {
    "ImportExampleGen", "StatisticsGen", "InferredSchemaGen", "ImportSchemaGen", "ExampleValidator", "DataGate",
    "Transform", "Trainer", "LatestBlessedModelResolver-model-resolver",
    "LatestBlessedModelResolver-model-blessing-resolver", "Evaluator", "Pusher",
}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    output = tmp_path_factory.mktemp("kfp") / "pipeline.json"
    status = cli.main(["compile", "--image", IMAGE, "--pipeline-root", "gs://bucket/pipelines",
                       "--data-root", "gs://bucket/data", "--serving-dir", "gs://bucket/serving",
                       "--output", str(output), "--", "--runner=DataflowRunner", "--region=europe-west4"])
    assert status == 0
    text = output.read_text()
    spec = json_format.ParseDict(json.loads(text)["pipelineSpec"], pipeline_spec_pb2.PipelineSpec(),
                                 ignore_unknown_fields=True)
    return text, spec


def test_every_node_is_a_task_running_the_pipeline_image(compiled):
    _, spec = compiled
    assert set(spec.root.dag.tasks) == TASKS
    executors = spec.deployment_spec["executors"]
    containers = [executors[name]["container"] for name in executors if "container" in executors[name]]
    assert len(containers) >= 10
    assert {container["image"] for container in containers} == {IMAGE}


def test_user_code_is_referred_to_through_the_installed_package(compiled):
    text, spec = compiled
    transform = spec.root.dag.tasks["Transform"].inputs.parameters
    assert transform["preprocessing_fn"].runtime_value.constant_value.string_value == "components.preprocessing.preprocessing_fn"
    assert spec.root.dag.tasks["Trainer"].inputs.parameters["run_fn"].runtime_value.constant_value.string_value == (
        "components.trainer.run.run_fn")
    assert "module_file" not in text
    assert "components.pusher.Executor" in text
    assert "/pipeline/components/schema/schema.pbtxt" in text


def test_no_local_path_of_the_build_machine_leaks(compiled):
    text, _ = compiled
    for local in (REPO, os.path.expanduser("~") + os.sep, tempfile.gettempdir(), "setup.py", "direct_running_mode"):
        assert local not in text


def test_the_gate_and_the_beam_args_are_compiled(compiled):
    text, spec = compiled
    condition = spec.root.dag.tasks["Transform"].trigger_policy.condition
    assert "_DataGate.verdict" in condition and "['blessed'] == 1" in condition
    assert "--runner=DataflowRunner" in text


def test_local_paths_are_refused_for_a_remote_pipeline(tmp_path, capsys):
    status = cli.main(["compile", "--image", IMAGE, "--pipeline-root", str(tmp_path), "--data-root", "gs://b/d",
                       "--serving-dir", "gs://b/s", "--output", str(tmp_path / "p.json")])
    assert status == 1
    assert "pipeline_root must be a remote URI" in capsys.readouterr().err
