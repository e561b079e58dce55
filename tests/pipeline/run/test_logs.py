"""Progress lines on the console, read from the orchestrators' own log messages."""

import io
import logging
import os
import pathlib
import subprocess
import sys

import pytest
import tfx

from components.model.trainer.settings import EPOCH_PROGRESS
from pipeline.run import logs

TFX_ROOT = pathlib.Path(tfx.__file__).parent


@pytest.mark.parametrize("source, messages", [
    ("orchestration/local/local_dag_runner.py", (logs.RUNNING[0], logs.FINISHED[0])),
    ("orchestration/beam/beam_dag_runner.py", (logs.RUNNING[1], logs.FINISHED[1])),
    ("orchestration/portable/launcher.py", (logs.CACHED, logs.SKIPPED)),
])
def test_tfx_still_logs_the_messages_progress_is_read_from(source, messages):
    text = (TFX_ROOT / source).read_text()
    for message in messages:
        assert f"'{message}'" in text, f"{source} no longer logs {message!r}: progress lines would vanish"


def _record(msg, *args):
    return logging.LogRecord("tfx", logging.INFO, __file__, 1, msg, args, None)


@pytest.mark.parametrize("running, finished", list(zip(logs.RUNNING, logs.FINISHED)))
def test_one_line_per_component_with_its_time_or_cached(running, finished):
    out = io.StringIO()
    handler = logs.ProgressHandler(out)
    handler.emit(_record(running, "Transform"))
    handler.emit(_record(finished, "Transform"))
    handler.emit(_record(running, "Trainer"))
    handler.emit(_record(logs.CACHED, 7))
    handler.emit(_record(finished, "Trainer"))
    handler.emit(_record("something else %s", "x"))
    handler.emit(_record(running, "Evaluator"))
    handler.emit(_record(logs.SKIPPED, "Evaluator"))
    handler.emit(_record(finished, "Evaluator"))
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    assert "Transform" in lines[0] and lines[0].endswith(" s")
    assert "Trainer" in lines[1] and lines[1].endswith("cached")
    assert "Evaluator" in lines[2] and lines[2].endswith("skipped")


def test_the_trainer_epochs_are_echoed_under_their_component():
    out = io.StringIO()
    handler = logs.ProgressHandler(out)
    handler.emit(_record(logs.RUNNING[0], "Trainer"))
    handler.emit(_record(EPOCH_PROGRESS, 3, 8, 0.25, 0.3, 0.91, 12.0))
    handler.emit(_record(logs.FINISHED[0], "Trainer"))
    lines = out.getvalue().splitlines()
    assert lines[0].strip() == "Trainer: epoch 3 of 8: train loss 0.2500, eval loss 0.3000, eval AUC 0.9100 (12 s)"
    assert lines[1].lstrip().startswith("[") and "Trainer" in lines[1]


def test_what_tensorflow_prints_while_it_loads_goes_to_the_log_file(tmp_path):
    """In a fresh interpreter, as the CLI runs it: TensorFlow's native start-up lines
    (oneDNN, on both stacks at the default log level) land in the log file, and stderr
    works as before once TensorFlow is loaded. TensorFlow prints the oneDNN line by default
    only on some processors (not on AMD EPYC, say): the test turns oneDNN on so that the
    line is printed on every machine."""
    log_path = tmp_path / "run.log"
    code = (
        "import os, sys\n"
        "from pipeline.run import logs\n"
        f"logs.import_tensorflow({str(log_path)!r}, verbose=False)\n"
        "print('after', file=sys.stderr, flush=True)\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    env["TF_ENABLE_ONEDNN_OPTS"] = "1"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "after\n"
    assert "oneDNN" in log_path.read_text()


def test_a_run_log_that_cannot_be_written_goes_on_in_the_state_folder_not_the_console(tmp_path, monkeypatch,
                                                                                       capsys):
    """A full disk under the output root: the standard handler printed each record's
    traceback on the console; the records now go on in the user's state folder."""

    class FullDisk(io.StringIO):
        def flush(self):
            raise OSError(28, "No space left on device")

    monkeypatch.setenv(logs.STATE_DIR_ENV, str(tmp_path / "state"))
    (tmp_path / "out").mkdir()
    handler = logs.RunLogHandler(str(tmp_path / "out" / "run-1.log"))
    handler.stream = FullDisk()
    logger = logging.getLogger("test_full_disk")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.error("first after the disk filled")
        logger.error("second")
    finally:
        logger.removeHandler(handler)
        handler.close()
    moved = tmp_path / "state" / "taxi-pipeline" / "logs" / "run-1.log"
    assert handler.baseFilename == str(moved)
    assert moved.read_text().splitlines() == ["first after the disk filled", "second"]
    assert capsys.readouterr().err == ""
