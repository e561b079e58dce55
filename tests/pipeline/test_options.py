"""One route for settings: each is declared once (its default and help) and is a flag of
every command that builds the DAG, reaching the pipeline whole; no flag is declared twice."""

from __future__ import annotations

import ast
import dataclasses
import json

import pytest

from components import setting
from components.model.trainer.settings import ExportConfig, TrainConfig
from pipeline import cli, config, options
from pipeline.cloud import compiled_fixes
from tests.helpers import REPO_ROOT, assert_one_clear_line, tmpfs

DAG_COMMANDS = {
    "run": [],
    "retrain": [],
    "compile": ["--image", "i", "--pipeline-root", "gs://b/p", "--data-root", "gs://b/d", "--serving-dir", "gs://b/s"],
}
SECTIONS = (config.Settings, TrainConfig, ExportConfig, config.EvaluationConfig, config.ShadowConfig)
# Flags of the same name that two commands declare apart, each for its own result.
SAME_NAME_OWN_MEANING = {
    "--output": "compile writes a JSON file there, predict a folder of scores",
    "--seed": "make-data's synthetic rows; the Trainer's initial weights and shuffling",
}


def _parse(command: str, *more: str):
    return cli.parser().parse_args([command, *DAG_COMMANDS[command], *more])


def test_the_sections_are_the_settings_dataclasses():
    assert tuple(options._setting_classes()) == SECTIONS


@pytest.mark.parametrize("command", sorted(DAG_COMMANDS))
def test_every_declared_setting_is_a_flag_with_its_declared_default(command):
    args = _parse(command)
    declared = [field for cls in SECTIONS for field in setting.declared(cls)]
    assert len(declared) >= 15
    for field in declared:
        assert getattr(args, field.name) == field.default, field.name
    built = options.settings(args, ())
    assert dataclasses.replace(built, beam_args=()) == config.Settings()


def test_flags_reach_their_section_of_the_settings():
    args = _parse("run", "--epochs", "3", "--batch-size", "64", "--no-warm-start", "--tflite", "--warmup-requests",
                  "7", "--min-auc", "0.6", "--keep-versions", "2", "--model-name", "tips", "--run-eagerly")
    built = options.settings(args, ())
    assert (built.train.epochs, built.train.batch_size, built.train.run_eagerly) == (3, 64, True)
    assert built.export == ExportConfig(model_name="tips", warmup_requests=7, tflite=True)
    assert (built.evaluation.min_auc, built.keep_versions, built.warm_start) == (0.6, 2, False)
    assert built.model_name == "tips"


@pytest.mark.parametrize("given, says", [
    (("--epochs", "0"), "must be at least 1"),
    (("--warmup-requests", "-1"), "must be at least 0"),
    (("--window", "1"), "--window: must be at least 2, got 1"),
    (("--window", "0"), "--window: must be at least 2, got 0"),
    (("--batch-size", "many"), "invalid int value"),
])
def test_a_setting_out_of_range_is_refused_by_the_parser(capsys, given, says):
    with pytest.raises(SystemExit) as stopped:
        cli.parser().parse_args(["retrain", *given])
    assert stopped.value.code == 2
    assert says in capsys.readouterr().err


def test_compile_writes_the_trainer_export_and_pusher_settings_into_the_job(tmp_path):
    output = tmp_path / "job.json"
    assert cli.main(["compile", *DAG_COMMANDS["compile"], "--output", str(output), "--tflite",
                     "--warmup-requests", "9", "--epochs", "2", "--keep-versions", "5",
                     "--latency-budget-ms", "80"]) == 0
    tasks = compiled_fixes.dag_tasks(json.loads(output.read_text()))

    def parameter(task, name):
        (value,) = tasks[task]["inputs"]["parameters"][name]["runtimeValue"]["constantValue"].values()
        return value

    trainer = json.loads(parameter("Trainer", "custom_config"))
    assert trainer["export"] == {"model_name": ExportConfig.model_name, "warmup_requests": 9, "tflite": True}
    assert trainer["train"]["epochs"] == 2
    assert float(parameter("Pusher", "keep_versions")) == 5
    assert float(parameter("ServingCheck", "latency_budget_ms")) == 80


def test_predict_and_monitor_name_the_served_version_alike():
    parser = cli.parser()
    for command, more in (("predict", ["--input", "x", "--output", "y"]), ("monitor", ["--requests", "x"])):
        assert parser.parse_args([command, *more]).model == options.SERVING
        assert parser.parse_args([command, *more, "--model", "latest"]).model == options.SERVING
        assert parser.parse_args([command, *more, "--model", "4"]).model == "4"


def _declared_flags():
    """Every `--flag` string given to an `add_argument` call in pipeline/, with where."""
    for path in sorted((REPO_ROOT / "pipeline").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and str(arg.value).startswith("--"):
                        yield arg.value, f"{path.relative_to(REPO_ROOT)}:{node.lineno}"
    for cls in SECTIONS:
        for field in setting.declared(cls):
            yield setting.flag(field), cls.__name__


def test_no_flag_is_declared_twice():
    places = {}
    for flag, where in _declared_flags():
        places.setdefault(flag, []).append(where)
    repeated = {flag: where for flag, where in places.items() if len(where) > 1}
    assert set(repeated) == set(SAME_NAME_OWN_MEANING), repeated


@pytest.mark.parametrize("command, option", [
    ("run", "--serving-dir"), ("retrain", "--serving-dir"), ("run", "--output-root"), ("predict", "--output"),
])
def test_a_file_where_a_folder_will_be_written_is_named_before_the_work(command, option, slice_workspace,
                                                                        taxi_pipeline, tmp_path):
    """Found at the push, a serving folder that is a file cost a whole run; now in a second,
    before TensorFlow loads (a run would log its import first)."""
    ws = slice_workspace
    regular = tmp_path / "a-regular-file"
    regular.write_text("not a folder")
    given = {"--serving-dir": ["--serving-dir", str(regular)], "--output-root": ["--output-root", str(regular / "out")],
             "--output": ["--output", str(regular)]}[option]
    if command == "predict":
        ws.model_dir.mkdir(parents=True)
        args = ["predict", "--input", str(ws.data / "span-16" / "*"), "--serving-dir", str(ws.serving), *given]
    else:
        args = [command, "--data-root", str(ws.data), "--output-root", str(ws.out), "--serving-dir",
                str(ws.serving), *given]
    result = taxi_pipeline(*args)
    line = assert_one_clear_line(result, 1, f"{option} {given[1]} ")
    assert ("is a file, not a folder" in line if option != "--output-root"
            else f"cannot be made: {regular} is a file, not a folder" in line), line
    # Stopped before the work: no run log (made before TensorFlow is imported), no store.
    assert not (ws.out / "logs").exists() and not list(ws.root.rglob("metadata.sqlite"))


def test_a_read_only_serving_folder_is_named_before_the_run(slice_workspace, taxi_pipeline, tmp_path):
    ws = slice_workspace
    with tmpfs(tmp_path / "read-only", 64, read_only=True) as serving:
        result = taxi_pipeline("run", "--data-root", str(ws.data), "--output-root", str(ws.out), "--serving-dir",
                               str(serving / "models"))
    assert_one_clear_line(result, 1, f"--serving-dir {serving / 'models'} is on a read-only file system: mount it "
                                     "writable or point --serving-dir at another folder, then run again")
    assert not list(ws.root.rglob("metadata.sqlite"))
