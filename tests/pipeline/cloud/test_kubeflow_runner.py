"""`taxi-pipeline compile`: the KFP v2 / Vertex AI PipelineJob JSON."""

import json
import os
import tempfile

import pytest
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2

from components.support import source, spans
from pipeline import cli, config

IMAGE = "europe-west4-docker.pkg.dev/project/repo/taxi-pipeline:1.0"
TASKS = {
    "ImportExampleGen", "StatisticsGen", "InferredSchemaGen", "ImportSchemaGen", "ExampleValidator", "DataGate",
    "Transform", "ServingBaseline", "Trainer", "Evaluator", "ServingCheck", "ShadowCheck", "Pusher", "SpanWindow",
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


def test_the_baseline_is_a_container_task_keyed_by_the_version_the_window_read_and_no_task_resolves(compiled):
    """No resolver task (Kubeflow Pipelines' own backend refuses them); the baseline's
    cache key is the serving version SpanWindow read on the job, by value."""
    text, spec = compiled
    executors = spec.deployment_spec["executors"]
    assert not [name for name in executors if "resolver" in executors[name]]
    assert "resolver" not in text.lower().replace("producertask", "")
    serving = spec.root.dag.tasks["ServingBaseline"].inputs.parameters["serving"].task_output_parameter
    assert (serving.producer_task, serving.output_parameter_key) == ("SpanWindow", "serving_version")
    model_dir = spec.root.dag.tasks["ServingBaseline"].inputs.parameters["model_dir"]
    assert model_dir.runtime_value.constant_value.string_value == f"gs://bucket/serving/{config.MODEL_NAME}"
    for task, key in (("Trainer", "base_model"), ("Evaluator", "baseline_model")):
        (channel,) = spec.root.dag.tasks[task].inputs.artifacts[key].task_output_artifact,
        assert (channel.producer_task, channel.output_artifact_key) == ("ServingBaseline", "model")
    assert "components.custom.evaluator.Executor" in text


def test_user_code_is_referred_to_through_the_installed_package(compiled):
    text, spec = compiled
    transform = spec.root.dag.tasks["Transform"].inputs.parameters
    assert transform["preprocessing_fn"].runtime_value.constant_value.string_value == (
        "components.model.preprocessing.preprocessing_fn")
    assert spec.root.dag.tasks["Trainer"].inputs.parameters["run_fn"].runtime_value.constant_value.string_value == (
        "components.model.trainer.run.run_fn")
    assert "module_file" not in text
    assert "components.custom.pusher.Executor" in text
    assert "/pipeline/components/model/schema/schema.pbtxt" in text


def test_no_local_path_of_the_build_machine_leaks(compiled, repo):
    text, _ = compiled
    home = os.path.expanduser("~") + os.sep
    for local in (str(repo), home, tempfile.gettempdir(), "setup.py", "direct_running_mode"):
        assert local not in text


def test_the_gate_and_the_beam_args_are_compiled(compiled):
    text, spec = compiled
    condition = spec.root.dag.tasks["Transform"].trigger_policy.condition
    assert "_DataGate.verdict" in condition and "['blessed'] == 1" in condition
    assert "--runner=DataflowRunner" in text


def test_the_window_is_chosen_on_each_run_and_feeds_example_gen(compiled):
    _, spec = compiled
    tasks = spec.root.dag.tasks
    window = tasks["SpanWindow"]
    assert window.inputs.parameters["window_size"].runtime_value.constant_value.int_value == 4
    assert window.inputs.parameters["data_root"].runtime_value.constant_value.string_value == "gs://bucket/data"
    # Same parameters every run: a cached SpanWindow would keep the first run's spans.
    assert not window.caching_options.enable_cache
    assert tasks["Transform"].caching_options.enable_cache
    input_config = tasks["ImportExampleGen"].inputs.parameters["input_config"].task_output_parameter
    assert (input_config.producer_task, input_config.output_parameter_key) == ("SpanWindow", "input_config")
    assert "SpanWindow" in tasks["ImportExampleGen"].dependent_tasks
    assert "input_config" in spec.components["SpanWindow"].output_definitions.parameters
    trainer = tasks["Trainer"].inputs.parameters
    train_args = json.loads(trainer["train_args"].runtime_value.constant_value.string_value)
    eval_args = json.loads(trainer["eval_args"].runtime_value.constant_value.string_value)
    assert (train_args["splits"], eval_args["splits"]) == (["train_3", "train_2", "train_1"], ["eval"])


def test_every_task_input_names_an_existing_producer_task(compiled):
    _, spec = compiled
    tasks = spec.root.dag.tasks
    for name, task in tasks.items():
        for dependency in task.dependent_tasks:
            assert dependency in tasks, (name, dependency)
        for parameter in task.inputs.parameters.values():
            if parameter.HasField("task_output_parameter"):
                assert parameter.task_output_parameter.producer_task in tasks, name
        for artifact in task.inputs.artifacts.values():
            if artifact.HasField("task_output_artifact"):
                assert artifact.task_output_artifact.producer_task in tasks, name


def test_the_job_s_first_task_is_given_the_code_it_was_compiled_for(compiled):
    _, spec = compiled
    parameter = spec.root.dag.tasks["SpanWindow"].inputs.parameters["code_version"]
    assert parameter.runtime_value.constant_value.string_value == source.of_components()


def test_window_zero_compiles_the_all_spans_pipeline(tmp_path):
    output = tmp_path / "p.json"
    assert cli.main(["compile", "--image", IMAGE, "--pipeline-root", "gs://b/p", "--data-root", "gs://b/d",
                     "--serving-dir", "gs://b/s", "--window", "0", "--output", str(output)]) == 0
    tasks = json.loads(output.read_text())["pipelineSpec"]["root"]["dag"]["tasks"]
    # SpanWindow only records the spans; ExampleGen reads every span as one split.
    window_size = tasks["SpanWindow"]["inputs"]["parameters"]["window_size"]["runtimeValue"]
    assert window_size == {"constantValue": {"intValue": "0"}}
    input_config = tasks["ImportExampleGen"]["inputs"]["parameters"]["input_config"]
    assert "taskOutputParameter" not in input_config and spans.ALL_SPANS_PATTERN in json.dumps(input_config)


def test_local_paths_and_other_object_stores_are_refused_for_a_remote_pipeline(tmp_path, capsys):
    output = tmp_path / "p.json"
    status = cli.main(["compile", "--image", IMAGE, "--pipeline-root", str(tmp_path), "--data-root", "gs://b/d",
                       "--serving-dir", "gs://b/s", "--output", str(output)])
    assert status == 1
    assert "pipeline_root must be a gs://BUCKET/... URI" in capsys.readouterr().err
    # Another object store: the image reads none, and the push lock is Cloud Storage's.
    for flag, setting in (("--pipeline-root", "pipeline_root"), ("--data-root", "data_root"),
                          ("--serving-dir", "serving_dir")):
        given = {"--pipeline-root": "gs://b/p", "--data-root": "gs://b/d", "--serving-dir": "gs://b/s", flag: "s3://b/x"}
        assert cli.main(["compile", "--image", IMAGE, *[part for item in given.items() for part in item],
                         "--output", str(output)]) == 1
        error = capsys.readouterr().err
        assert f"{setting} must be " in error and "got 's3://b/x'" in error and not output.exists()


def test_the_data_root_may_be_a_cloud_storage_fuse_path_the_serving_folder_and_pipeline_root_not(tmp_path, capsys):
    """Vertex AI mounts Cloud Storage at /gcs/ in every task: the data root, which the job
    only reads, may be given that way. The serving folder may not: there a push's rename is
    not atomic and its lock reaches no other host. Nor the pipeline root, which Vertex takes."""
    output = tmp_path / "p.json"
    assert cli.main(["compile", "--image", IMAGE, "--pipeline-root", "gs://b/p", "--data-root", "/gcs/b/d",
                     "--serving-dir", "gs://b/s", "--output", str(output)]) == 0
    job = json.loads(output.read_text())
    assert job["runtimeConfig"]["gcsOutputDirectory"] == "gs://b/p"
    assert '"/gcs/b/d"' in json.dumps(job) and "gs://b/s/big_tip" in json.dumps(job)
    output.unlink()
    assert cli.main(["compile", "--image", IMAGE, "--pipeline-root", "gs://b/p", "--data-root", "/gcs/b/d",
                     "--serving-dir", "/gcs/b/s", "--output", str(output)]) == 1
    assert capsys.readouterr().err.rstrip().endswith(
        "serving_dir must be a gs://BUCKET/... URI, got '/gcs/b/s': on the Cloud Storage FUSE mount a push's rename "
        "is not atomic and its lock reaches no other host; give the same folder as gs://b/s")
    assert not output.exists()
    assert cli.main(["compile", "--image", IMAGE, "--pipeline-root", "/gcs/b/p", "--data-root", "/gcs/b/d",
                     "--serving-dir", "gs://b/s", "--output", str(output)]) == 1
    assert "pipeline_root must be a gs://BUCKET/... URI" in capsys.readouterr().err


def test_a_window_of_one_span_is_refused_when_compiling(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        cli.main(["compile", "--image", IMAGE, "--pipeline-root", "gs://b/p", "--data-root", "gs://b/d",
                  "--serving-dir", "gs://b/s", "--window", "1", "--output", str(tmp_path / "p.json")])
    assert stopped.value.code == 2
    assert "--window: must be 0 (every span) or at least 2 spans" in capsys.readouterr().err
    assert not (tmp_path / "p.json").exists()


SECRET = "projects/taxi-prod/secrets/alert-webhook"


def test_notify_compiles_an_exit_handler_that_runs_after_any_outcome(tmp_path):
    output = tmp_path / "pipeline.json"
    status = cli.main(["compile", "--image", IMAGE, "--pipeline-root", "gs://bucket/pipelines",
                       "--data-root", "gs://bucket/data", "--serving-dir", "gs://bucket/serving",
                       "--output", str(output), "--notify-secret", SECRET])
    assert status == 0
    spec = json.loads(output.read_text())["pipelineSpec"]
    root_tasks = spec["root"]["dag"]["tasks"]
    # The pipeline's nodes become one sub-DAG; the handler runs after it, whatever its state.
    assert set(root_tasks) == {"tfx-dag", "NotifyFinalStatus"}
    handler = root_tasks["NotifyFinalStatus"]
    assert handler["triggerPolicy"]["strategy"] == "ALL_UPSTREAM_TASKS_COMPLETED"
    assert handler["dependentTasks"] == ["tfx-dag"]
    parameters = handler["inputs"]["parameters"]
    assert parameters["final_status"] == {"taskFinalStatus": {"producerTask": "tfx-dag"}}
    # The secret's name, read when the job ends; never the URL.
    assert parameters["url_from"]["runtimeValue"]["constantValue"]["stringValue"] == SECRET
    # What the handler reads to tell what the job pushed: the model's folder, and the job's
    # name as a whole-value constant the backend resolves, the one the Pusher records.
    assert parameters["model_dir"]["runtimeValue"]["constantValue"]["stringValue"] == "gs://bucket/serving/big_tip"
    assert parameters["job"]["runtimeValue"]["constantValue"]["stringValue"] == "{{$.pipeline_job_name}}"
    pusher_run = spec["components"]["tfx-dag"]["dag"]["tasks"]["Pusher"]["inputs"]["parameters"]["run"]
    assert pusher_run["runtimeValue"]["constantValue"]["stringValue"] == "{{$.pipeline_job_name}}"
    # Every node is in the sub-DAG, and the compiled fixes still apply there.
    inner = spec["components"]["tfx-dag"]["dag"]["tasks"]
    assert set(inner) == TASKS
    assert inner["SpanWindow"]["cachingOptions"] == {"enableCache": False}
    assert "job" in inner["SpanWindow"]["inputs"]["parameters"]


@pytest.mark.parametrize("given", ["--notify", "--notify-secret"])
def test_a_webhook_url_is_never_compiled_into_the_job(tmp_path, capsys, monkeypatch, given):
    url = "https://hooks.example.com/services/T0/B0/s3cr3t-token"
    monkeypatch.setenv("TAXI_NOTIFY_URL", url)
    status = cli.main(["compile", "--image", IMAGE, "--pipeline-root", "gs://bucket/pipelines",
                       "--data-root", "gs://bucket/data", "--serving-dir", "gs://bucket/serving",
                       "--output", str(tmp_path / "p.json"), given, url])
    said = capsys.readouterr()
    assert status == 1 and not (tmp_path / "p.json").exists()
    assert "store the URL in Secret Manager" in said.err or "store it in Secret Manager" in said.err, said.err
    assert "s3cr3t-token" not in said.out + said.err
    assert not [path for path in tmp_path.rglob("*") if path.is_file() and "s3cr3t-token" in path.read_text()]


def test_the_environment_s_webhook_url_is_not_compiled_in(tmp_path, monkeypatch):
    monkeypatch.setenv("TAXI_NOTIFY_URL", "https://hooks.example.com/services/T0/B0/s3cr3t-token")
    output = tmp_path / "p.json"
    assert cli.main(["compile", "--image", IMAGE, "--pipeline-root", "gs://bucket/pipelines", "--data-root",
                     "gs://bucket/data", "--serving-dir", "gs://bucket/serving", "--output", str(output)]) == 0
    assert "s3cr3t-token" not in output.read_text()
    assert "NotifyFinalStatus" not in output.read_text()


@pytest.mark.parametrize("reference", ["projects/p", "env:", "projects/p/secrets/s/versions", "env:1X"])
def test_a_notify_secret_that_names_nothing_is_refused(tmp_path, capsys, reference):
    status = cli.main(["compile", "--image", IMAGE, "--pipeline-root", "gs://bucket/pipelines",
                       "--data-root", "gs://bucket/data", "--serving-dir", "gs://bucket/serving",
                       "--output", str(tmp_path / "p.json"), "--notify-secret", reference])
    assert status == 1 and not (tmp_path / "p.json").exists()
    assert "is none of a Secret Manager secret" in capsys.readouterr().err


def _beam_args(spec, executor="Transform_executor"):
    args = list(spec.deployment_spec["executors"][executor]["container"]["args"])
    return args[args.index("{{$}}") + 1:]


def test_beam_in_the_containers_names_the_pipeline_image_for_its_workers(tmp_path, monkeypatch):
    from tfx.utils import dependency_utils

    output = tmp_path / "pipeline.json"
    assert cli.main(["compile", "--image", IMAGE, "--pipeline-root", "gs://bucket/pipelines", "--data-root",
                     "gs://bucket/data", "--serving-dir", "gs://bucket/serving", "--output", str(output)]) == 0
    spec = json_format.ParseDict(json.loads(output.read_text())["pipelineSpec"], pipeline_spec_pb2.PipelineSpec(),
                                 ignore_unknown_fields=True)
    beam_args = _beam_args(spec)
    assert f"--sdk_container_image={IMAGE}" in beam_args
    # So TFX does not build and stage an archive of itself in each Beam component's container.
    monkeypatch.setattr(dependency_utils, "build_ephemeral_package", lambda: pytest.fail("archive built"))
    assert dependency_utils.make_beam_dependency_flags(beam_args) == beam_args


def test_a_remote_runner_gets_no_image_it_was_not_given(compiled):
    # Dataflow's workers need an image with Beam's boot entry point: the user names one.
    _, spec = compiled
    assert "--runner=DataflowRunner" in _beam_args(spec)
    assert not any(arg.startswith("--sdk_container_image=") for arg in _beam_args(spec))
