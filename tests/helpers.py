"""What the tests share that is not a fixture: the repository, the data slice, the run
timeout, a run's locations (`Workspace`), the command line, span files made to order, and
what a failed command must show. Fixtures live in conftest.py files; tests import this."""

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


def copy_span_folders(data_root: Path, numbers: Sequence[int], name: str = "span-{}") -> None:
    """Spans of data/ under `data_root`, each folder named `name` with its number."""
    for span in numbers:
        shutil.copytree(REPO_ROOT / "data" / f"span-{span}", data_root / name.format(span))


def copy_padded_spans(data_root: Path, numbers: Sequence[int]) -> None:
    """Spans of data/ under `data_root`, their folders named as some exports name them:
    zero-padded (span-010)."""
    copy_span_folders(data_root, numbers, "span-{:03d}")


def write_leftovers(data_root: Path, *span_folders: str) -> List[Path]:
    """What people leave in a data root beside the spans, in the span folders `span_folders`
    and at the top: hidden and bookkeeping files, editor leftovers, notes."""
    first, second = span_folders
    leftovers = {
        f"{second}/._trips.tfrecord.gz": b"\x00\x05\x16\x07 AppleDouble",
        f"{second}/_SUCCESS": b"",
        f"{second}/trips.tfrecord.gz~": b"editor backup",
        f"{first}/.trips.tfrecord.gz.swp": b"swap",
        f"{first}/notes.txt": b"re-exported on Monday",
        "README.md": b"# taxi trips",
    }
    for name, content in leftovers.items():
        (data_root / name).write_bytes(content)
    return [data_root / name for name in leftovers]


def assert_ignored_in_log(result: subprocess.CompletedProcess, leftovers: Sequence[Path]) -> None:
    """The run's log lists each of `leftovers` as read by nothing."""
    (named,) = [line for line in result.stdout.splitlines() if line.startswith("Full log: ")]
    logged = Path(named[len("Full log: "):]).read_text()
    for path in leftovers:
        assert f"ignored (not a span folder or span data file, read by nothing): {path}" in logged


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


def inferred_schema(output_root: Path) -> str:
    """The schema InferredSchemaGen wrote under `output_root`, as text with its features
    and string domains in name order (`pipeline.inspect.parity.inferred_schema`)."""
    from pipeline.inspect import parity

    found = parity.inferred_schema(str(output_root))
    assert found, f"no schema of InferredSchemaGen under {output_root}"
    return found
