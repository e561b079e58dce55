"""A path the user names that does not exist is an error naming it; one that exists but
holds nothing says so. One case per row of docs/operations.md's "Paths that do not exist"
table, each through the command line, as a user types it."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import assert_one_clear_line

pytestmark = pytest.mark.slow  # each case starts the command line; an empty folder's, TensorFlow too

# (command line with {missing} / {empty} / {tmp} for folders, exit status, what its last
# line starts with). {missing} does not exist; {empty} is a folder holding nothing.
MISSING = [
    (("serving", "list", "--serving-dir", "{missing}"), 1, "--serving-dir {missing} does not exist"),
    (("serving", "card", "--serving-dir", "{missing}"), 1, "--serving-dir {missing} does not exist"),
    (("serving", "rollback", "--serving-dir", "{missing}"), 1, "--serving-dir {missing} does not exist"),
    (("history", "--output-root", "{missing}"), 1, "--output-root {missing} does not exist"),
    (("report", "--output-root", "{missing}"), 1, "--output-root {missing} does not exist"),
    (("gc", "--output-root", "{missing}"), 1, "--output-root {missing} does not exist"),
    (("lineage", "1", "--output-root", "{missing}"), 1, "--output-root {missing} does not exist"),
    (("lineage", "1", "--output-root", "{empty}", "--serving-dir", "{missing}"), 1,
     "--serving-dir {missing} does not exist"),
    (("predict", "--input", "{missing}/*.gz", "--output", "{tmp}/scores", "--serving-dir", "{empty}"), 1,
     "--input {missing}/*.gz: its folder {missing} does not exist"),
    (("predict", "--input", "{missing}/part.gz", "--output", "{tmp}/scores", "--serving-dir", "{empty}"), 1,
     "--input {missing}/part.gz does not exist"),
    (("predict", "--input", "{empty}/*.gz", "--output", "{tmp}/scores", "--serving-dir", "{missing}"), 1,
     "--serving-dir {missing} does not exist"),
    (("monitor", "--requests", "{missing}/*", "--serving-dir", "{empty}", "--output-root", "{empty}"), 1,
     "--requests {missing}/*: its folder {missing} does not exist"),
    (("monitor", "--requests", "{empty}/*", "--serving-dir", "{missing}", "--output-root", "{empty}"), 1,
     "--serving-dir {missing} does not exist"),
    (("run", "--data-root", "{missing}", "--output-root", "{tmp}/out", "--serving-dir", "{tmp}/serving"), 1,
     "data root {missing} does not exist"),
    (("make-data", "--source-csv", "{missing}/data.csv", "--out", "{tmp}/made"), 1,
     "{missing}/data.csv does not exist"),
]
EMPTY = [
    (("serving", "list", "--serving-dir", "{empty}"), "No model versions in {empty}/big_tip."),
    (("history", "--output-root", "{empty}"), "No runs: no run wrote to --output-root {empty} yet"),
    (("report", "--output-root", "{empty}"), "No runs: no run wrote to --output-root {empty} yet"),
    (("gc", "--output-root", "{empty}"), "Nothing to collect: no run wrote to --output-root {empty} yet"),
    (("predict", "--input", "{empty}/*.gz", "--output", "{tmp}/scores", "--serving-dir", "{empty}"),
     "No files match --input {empty}/*.gz: nothing scored."),
    (("monitor", "--requests", "{empty}/*", "--serving-dir", "{empty}", "--output-root", "{empty}"),
     "No files match --requests {empty}/*: no traffic to judge."),
]


def _folders(tmp_path: Path) -> dict:
    (tmp_path / "empty").mkdir()
    return {"missing": str(tmp_path / "missing"), "empty": str(tmp_path / "empty"), "tmp": str(tmp_path)}


@pytest.mark.parametrize("command, code, says", MISSING, ids=[" ".join(case[0][:2]) for case in MISSING])
def test_a_path_that_does_not_exist_is_an_error_naming_it(tmp_path, taxi_pipeline, command, code, says):
    folders = _folders(tmp_path)
    result = taxi_pipeline(*(part.format(**folders) for part in command))
    assert_one_clear_line(result, code, says.format(**folders))
    # Nothing was made where the path was missing, and nothing was written beside it.
    assert not Path(folders["missing"]).exists() and not list(Path(folders["empty"]).iterdir())
    assert not (tmp_path / "scores").exists()


@pytest.mark.parametrize("command, code, says", MISSING, ids=[" ".join(case[0][:2]) for case in MISSING])
def test_a_path_that_does_not_exist_is_answered_before_tensorflow_loads(tmp_path, command, code, says):
    """The paths are checked first: a mistyped one costs a second, not TensorFlow's import."""
    folders = _folders(tmp_path)
    assert _without_tensorflow([part.format(**folders) for part in command]) == code


def test_a_scheduled_monitor_told_of_a_missing_path_alerts_before_tensorflow_loads(tmp_path, webhook):
    url, received = webhook
    folders = _folders(tmp_path)
    code = _without_tensorflow(["monitor", "--requests", f"{folders['missing']}/*", "--serving-dir",
                                folders["empty"], "--output-root", folders["empty"], "--notify", url])
    assert code == 1
    (alert,) = received
    assert alert["command"] == "monitor" and alert["exit_code"] == 1 and folders["missing"] in alert["error"], alert


def _without_tensorflow(argv) -> int:
    """`taxi-pipeline *argv` in a process that reports its exit status and whether it
    imported TensorFlow (which must be False)."""
    probe = ("import sys; from pipeline import cli; code = int(cli.main(sys.argv[1:])); "
             "print(code, 'tensorflow' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=120)
    assert result.stdout.split()[-1:] == ["False"], result.stdout + result.stderr
    return int(result.stdout.split()[-2])


@pytest.mark.parametrize("command, says", EMPTY, ids=[" ".join(case[0][:2]) for case in EMPTY])
def test_a_path_that_exists_but_holds_nothing_says_so(tmp_path, taxi_pipeline, command, says):
    folders = _folders(tmp_path)
    result = taxi_pipeline(*(part.format(**folders) for part in command))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().splitlines()[-1].startswith(says.format(**folders)), result.stdout + result.stderr
    assert not list(Path(folders["empty"]).iterdir()) and not (tmp_path / "scores").exists()
