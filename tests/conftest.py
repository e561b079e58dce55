"""Fixtures shared by every test: the repository, copies of data/ spans, the command
line in a subprocess, MLMD read-outs, and one finished pipeline run per session.

Tests that run the pipeline run `taxi-pipeline` in a subprocess, as a user does: nothing
a run changes in a process (library patches, GC state, logging, environment) reaches
other tests. The finished run is never mutated: a test that needs an earlier run's state
works on its own copy (`copy_of_finished_run`).
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, List, Sequence

import pytest

from tests import pages
from tests.helpers import REPO_ROOT, RUN_TIMEOUT_SECONDS, SLICE_SPANS, Workspace, cli_command, copy_span_folders

# The longest modules, longest first (each module runs on one worker; their times are in
# docs/testing.md): then they run beside the others, and the last to start are short, so
# neither worker ends alone on a long one. The rest keep their random order, but a test
# marked `after_module` runs after the rest of its module.
LONGEST_MODULES = ("tests/test_soak.py", "tests/test_crash_safety.py", "tests/test_operations.py",
                   "tests/test_bad_input.py", "tests/test_beam_portable.py", "tests/test_operator.py",
                   "tests/test_metadata_mysql.py", "tests/test_decisions.py", "tests/test_monitor.py",
                   "tests/components/model/trainer/test_export.py", "tests/test_orchestrators.py",
                   "tests/components/model/trainer/test_run.py", "tests/test_failures.py",
                   "tests/test_interrupts.py", "tests/test_failures_disk.py", "tests/test_scale.py",
                   "tests/pipeline/run/test_watch.py", "tests/test_retraining.py",
                   # `make image-tests`: each image's schedule, its jobs one after the other
                   "tests/image/test_vertex_pipeline.py", "tests/image/test_vertex_other_stack.py",
                   "tests/image/test_vertex_push.py")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "after_module: runs after the other tests of its module (it changes what "
                                       "they read)")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: List[pytest.Item]) -> None:
    def first(module: str) -> int:
        return LONGEST_MODULES.index(module) if module in LONGEST_MODULES else len(LONGEST_MODULES)

    items.sort(key=lambda item: (first(item.nodeid.split("::")[0]),
                                 item.get_closest_marker("after_module") is not None))


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def copy_spans() -> Callable[[Path, Sequence[int]], Path]:
    """`copy_spans(data_root, spans)`: copies those span folders of data/ under `data_root`."""

    def copy(data_root: Path, numbers: Sequence[int]) -> Path:
        copy_span_folders(data_root, numbers)
        return data_root

    return copy


@pytest.fixture(scope="session")
def taxi_pipeline() -> Callable[..., subprocess.CompletedProcess]:
    """`taxi_pipeline(*args, env=None)`: the command line in a subprocess, with a time limit."""

    def run(*args: str, env: Dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            cli_command(*args), capture_output=True, text=True, timeout=RUN_TIMEOUT_SECONDS,
            env={**os.environ, **(env or {})},
        )

    return run


@pytest.fixture(scope="session")
def executions() -> Callable[[Path], Dict[str, list]]:
    """`executions(metadata_path)`: node id -> the states of its executions, from MLMD."""
    from ml_metadata import metadata_store
    from ml_metadata.proto import metadata_store_pb2

    def read(metadata_path: Path) -> Dict[str, list]:
        config = metadata_store_pb2.ConnectionConfig()
        config.sqlite.filename_uri = str(metadata_path)
        config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
        store = metadata_store.MetadataStore(config)
        return {
            context.name.split(".", 1)[1]: [e.last_known_state for e in store.get_executions_by_context(context.id)]
            for context in store.get_contexts_by_type("node")
        }

    return read


@pytest.fixture(scope="session")
def last_run() -> Callable[[Path], dict]:
    """`last_run(output_root)`: the run record the last finished run wrote."""
    def read(output_root: Path) -> dict:
        return json.loads((output_root / "last_run.json").read_text())["report"]

    return read


@dataclasses.dataclass(frozen=True)
class FinishedRun:
    workspace: Workspace
    result: subprocess.CompletedProcess


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory, worker_id, copy_spans, taxi_pipeline) -> FinishedRun:
    """`taxi-pipeline run` once on SLICE_SPANS, into a fresh output root and serving folder:
    once for the whole session, whichever worker asks first (under a lock, in the folder the
    workers share); the others read what it left, which no test changes."""
    shared = tmp_path_factory.getbasetemp()
    if worker_id != "master":
        shared = shared.parent
    workspace = Workspace(shared / "finished-run")
    record = shared / "finished-run.json"
    with open(shared / "finished-run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not record.exists():
            # What a worker that died making it left is made again.
            shutil.rmtree(workspace.root, ignore_errors=True)
            copy_spans(workspace.data, SLICE_SPANS)
            # Its own temporary folder, to see what the run leaves there.
            temporary = workspace.root / "tmp"
            temporary.mkdir()
            try:
                made = taxi_pipeline("run", *workspace.locations(), env={"TMPDIR": str(temporary)})
                done = {"args": made.args, "returncode": made.returncode, "stdout": made.stdout,
                        "stderr": made.stderr}
            except BaseException as err:  # a time limit, say: the other worker reads why, then it goes on
                done = {"args": ["run"], "returncode": -1, "stdout": "",
                        "stderr": f"the session's run did not finish on worker {worker_id}: {err!r}"}
                raise
            finally:
                record.write_text(json.dumps(done))
    result = subprocess.CompletedProcess(**json.loads(record.read_text()))
    assert result.returncode == 0, result.stdout + result.stderr
    return FinishedRun(workspace, result)


@pytest.fixture
def copied_finished_run(finished_run, tmp_path) -> Workspace:
    """This test's own copy of the finished run's data, output root and serving folder,
    as `cp -r` leaves it: its records still name the finished run's paths."""
    workspace = Workspace(tmp_path / "copy")
    for name in ("data", "out", "serving"):
        shutil.copytree(finished_run.workspace.root / name, workspace.root / name)
    return workspace


@pytest.fixture
def copy_of_finished_run(copied_finished_run) -> Workspace:
    """`copied_finished_run` with its records pointing at it, as the first command in a
    copied root makes them (`pipeline.run.relocation`, tested on its own in
    tests/test_end_to_end.py): a test's "nothing else changed" compares with this."""
    from pipeline import config
    from pipeline.run import relocation

    workspace = copied_finished_run
    relocation.relocate(config.RunConfig(data_root=str(workspace.data), output_root=str(workspace.out),
                                         serving_dir=str(workspace.serving)).resolved())
    return workspace


@pytest.fixture
def workspace(tmp_path) -> Workspace:
    """An empty workspace: no data, no output root, no serving folder."""
    return Workspace(tmp_path / "ws")


@pytest.fixture
def slice_workspace(workspace, copy_spans) -> Workspace:
    """A workspace whose data root holds SLICE_SPANS, nothing run yet."""
    copy_spans(workspace.data, SLICE_SPANS)
    return workspace


@pytest.fixture(scope="session")
def examples_without_label() -> Callable[[Path, int], List[bytes]]:
    """`examples_without_label(data_root, count)`: the first `count` serialized examples
    of the spans under `data_root`, label removed, as a client would send them."""
    from pipeline.data import dataset

    def read(data_root: Path, count: int) -> List[bytes]:
        return dataset.requests(str(data_root), count)

    return read


@pytest.fixture(scope="session")
def cli_argv() -> Callable[..., List[str]]:
    """`cli_argv(*args)`: the argv of `taxi-pipeline *args`, for tests that drive the process."""
    return cli_command


@pytest.fixture(scope="session")
def run_timeout() -> int:
    return RUN_TIMEOUT_SECONDS


@pytest.fixture
def project_copy(tmp_path) -> Callable[..., subprocess.CompletedProcess]:
    """A copy of the project's packages an operator can edit (its schema, its code):
    `project_copy.path`, and `project_copy(*args)` runs `taxi-pipeline *args` from it."""
    root = tmp_path / "project"
    for package in ("components", "pipeline"):
        shutil.copytree(REPO_ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, cwd=root,
            timeout=RUN_TIMEOUT_SECONDS, env={**os.environ, "PYTHONPATH": str(root)},
        )

    run.path = root
    return run


@pytest.fixture
def webhook():
    """(URL, the JSON bodies received): a webhook on 127.0.0.1 for this test."""
    yield from pages.serve_webhook()
