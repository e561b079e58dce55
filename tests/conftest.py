"""Fixtures shared by every test: the repository, copies of data/ spans, the command
line in a subprocess, MLMD read-outs, and one finished pipeline run per session.

Tests that run the pipeline run `taxi-pipeline` in a subprocess, as a user does: nothing
a run changes in a process (library patches, GC state, logging, environment) reaches
other tests. The finished run is never mutated: a test that needs an earlier run's state
works on its own copy (`copy_of_finished_run`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, List, Sequence

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
# A small slice of data/ that trains a model worth blessing in a few seconds.
SLICE_SPANS = (12, 13, 14, 15, 16)
# The longest a pipeline run may take in a test before it is stopped and fails.
RUN_TIMEOUT_SECONDS = 600


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def copy_spans() -> Callable[[Path, Sequence[int]], Path]:
    """`copy_spans(data_root, spans)`: copies those span folders of data/ under `data_root`."""

    def copy(data_root: Path, numbers: Sequence[int]) -> Path:
        for span in numbers:
            shutil.copytree(REPO_ROOT / "data" / f"span-{span}", data_root / f"span-{span}")
        return data_root

    return copy


@dataclasses.dataclass(frozen=True)
class Workspace:
    """The three locations of a run."""

    root: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def out(self) -> Path:
        return self.root / "out"

    @property
    def serving(self) -> Path:
        return self.root / "serving"

    @property
    def model_dir(self) -> Path:
        return self.serving / "big_tip"

    @property
    def metadata(self) -> Path:
        return self.out / "metadata.sqlite"

    def locations(self, data: Path | None = None) -> List[str]:
        return ["--data-root", str(data or self.data), "--output-root", str(self.out),
                "--serving-dir", str(self.serving)]

    def versions(self) -> List[str]:
        """The version folders, as TF Serving sees them (numeric names only)."""
        if not self.model_dir.exists():
            return []
        return sorted(name for name in os.listdir(self.model_dir) if name.isdigit())

    def serving_entries(self) -> List[str]:
        """Everything in the model's serving folder."""
        return sorted(os.listdir(self.model_dir)) if self.model_dir.exists() else []

    def good_state(self) -> Dict[str, object]:
        """What a failure must not touch: the served versions with every file's bytes,
        `models.config`, the metadata store and the last run's record (each file's bytes,
        None when absent)."""
        state: Dict[str, object] = {}
        for path in sorted(self.serving.rglob("*")) if self.serving.exists() else ():
            if path.is_file():
                state[str(path.relative_to(self.root))] = hashlib.sha256(path.read_bytes()).hexdigest()
        for path in (self.metadata, self.out / "last_run.json"):
            state[str(path.relative_to(self.root))] = (
                hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None
            )
        return state


def cli_command(*args: str) -> List[str]:
    return [os.path.join(os.path.dirname(sys.executable), "taxi-pipeline"), *args]


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
    import json

    def read(output_root: Path) -> dict:
        return json.loads((output_root / "last_run.json").read_text())["report"]

    return read


@dataclasses.dataclass(frozen=True)
class FinishedRun:
    workspace: Workspace
    result: subprocess.CompletedProcess


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory, copy_spans, taxi_pipeline) -> FinishedRun:
    """`taxi-pipeline run` once on SLICE_SPANS, into a fresh output root and serving folder."""
    workspace = Workspace(tmp_path_factory.mktemp("finished-run"))
    copy_spans(workspace.data, SLICE_SPANS)
    result = taxi_pipeline("run", *workspace.locations())
    assert result.returncode == 0, result.stdout + result.stderr
    return FinishedRun(workspace, result)


@pytest.fixture
def copy_of_finished_run(finished_run, tmp_path) -> Workspace:
    """This test's own copy of the finished run's data, output root and serving folder."""
    workspace = Workspace(tmp_path / "copy")
    for name in ("data", "out", "serving"):
        shutil.copytree(finished_run.workspace.root / name, workspace.root / name)
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
    import tensorflow as tf

    from components import features

    def read(data_root: Path, count: int) -> List[bytes]:
        files = sorted(str(path) for path in data_root.glob("span-*/*"))
        serialized = []
        for record in tf.data.TFRecordDataset(files, compression_type="GZIP").take(count):
            example = tf.train.Example.FromString(record.numpy())
            del example.features.feature[features.LABEL_KEY]
            serialized.append(example.SerializeToString())
        return serialized

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


def write_gzip_records(path: Path, records: Sequence[bytes]) -> None:
    """GZIP TFRecords at `path`, as a span's file."""
    import tensorflow as tf

    path.parent.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(path), tf.io.TFRecordOptions(compression_type="GZIP")) as writer:
        for record in records:
            writer.write(record)


def span_like(source_dir: Path, every: int, edit: Callable) -> List[bytes]:
    """The examples of a span folder, `edit` applied to one in `every`."""
    import tensorflow as tf

    records = []
    files = sorted(glob.glob(str(source_dir / "*.gz")))
    for index, record in enumerate(tf.data.TFRecordDataset(files, compression_type="GZIP")):
        example = tf.train.Example.FromString(record.numpy())
        if index % every == 0:
            edit(example)
        records.append(example.SerializeToString())
    return records


def unknown_payment(example) -> None:
    """A payment type outside the schema's domain."""
    example.features.feature["payment_type"].bytes_list.value[:] = [b"Bitcoin"]


# What the failure tests (tests/test_failures*.py) check of a failed command.


def last_line(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    return lines[-1] if lines else ""


def assert_one_clear_line(result: subprocess.CompletedProcess, code: int, starts: str) -> str:
    """The exit status, and a last line that starts with `starts` and carries no traceback."""
    assert result.returncode == code, result.stdout + result.stderr
    line = last_line(result)
    assert line.startswith(f"error: {starts}"), result.stderr
    assert "Traceback" not in result.stderr + result.stdout and "b'" not in line and "CREATE TABLE" not in line
    return line


def full_log(result: subprocess.CompletedProcess) -> str:
    """The text of the log file the failure named (its traceback is there)."""
    (named,) = [line for line in result.stderr.splitlines() if line.startswith("Full log: ")]
    return Path(named[len("Full log: "):]).read_text()


@contextlib.contextmanager
def tmpfs(path: Path, size_kb: int, read_only: bool = False, fill_from: Path | None = None):
    """A small file system mounted at `path` (a full disk, a read-only one), holding a copy
    of `fill_from`; skips the test where this user cannot mount."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(path)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}): run the suite as root")
    try:
        if fill_from is not None:
            shutil.copytree(fill_from, path, dirs_exist_ok=True)
        if read_only:
            subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True)
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
