"""The compiled tasks' command: TFX's entry point run as `python -m` runs it, ended at once."""

import os
import subprocess
import sys

import pytest

from pipeline.run import process

# Like TFX's entry points: a module whose work is under `if __name__ == "__main__"`.
ENTRY_POINT = '''
import atexit, gc, sys

if __name__ == "__main__":
    atexit.register(lambda: open(sys.argv[1], "w").close())
    print("argv", *sys.argv[1:], "gc", gc.get_threshold()[0], gc.isenabled(), end="")
    if sys.argv[2] == "fail":
        raise RuntimeError("the executor broke")
    sys.exit(int(sys.argv[2]) if sys.argv[2].isdigit() else sys.argv[2])
'''


@pytest.fixture
def task(tmp_path):
    # Inside a package, as TFX's entry points are (runpy warns of a module of a package
    # it finds imported already).
    (tmp_path / "some_package").mkdir()
    (tmp_path / "some_package" / "__init__.py").write_text("")
    (tmp_path / "some_package" / "some_entry_point.py").write_text(ENTRY_POINT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}

    def run(how: str):
        marker = tmp_path / "exit-handlers-ran"
        ended = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m", "pipeline.cloud.task",
                                "some_package.some_entry_point", str(marker), how],
                               env=env, capture_output=True, text=True, timeout=60)
        return ended, marker.exists()

    return run


@pytest.mark.parametrize("how, status", [("0", 0), ("3", 3), ("a message", 1)])
def test_the_entry_point_runs_with_its_arguments_and_the_process_ends_at_once_with_its_status(task, how, status):
    ended, exit_handlers_ran = task(how)
    assert ended.returncode == status, ended.stderr
    # Its output flushed though it ended without a newline; the collector on, less often.
    assert ended.stdout.endswith(f"exit-handlers-ran {how} gc {process.GC_THRESHOLDS[0]} True")
    assert not exit_handlers_ran
    assert ("a message" in ended.stderr) == (how == "a message")


def test_an_entry_point_that_fails_ends_as_python_ends_it(task):
    ended, exit_handlers_ran = task("fail")
    assert ended.returncode == 1
    assert ended.stderr.rstrip().endswith("RuntimeError: the executor broke") and "Traceback" in ended.stderr
    assert exit_handlers_ran


def test_a_task_imports_tfx_s_components_without_what_no_task_runs(tmp_path):
    (tmp_path / "imports_tfx.py").write_text(
        'import sys\nimport tfx.components\nif __name__ == "__main__":\n    print("kubernetes" in sys.modules)\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    ended = subprocess.run([sys.executable, "-m", "pipeline.cloud.task", "imports_tfx"], env=env,
                           capture_output=True, text=True, timeout=240)
    assert ended.returncode == 0, ended.stderr[-3000:]
    assert ended.stdout.split() == ["False"]
