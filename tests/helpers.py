"""What the tests share that is not a fixture: the repository, the data slice, the run
timeout, a run's locations (`Workspace`), the command line, span files made to order, the
schema and a local Beam pipeline, what a failed command must show, and the loopback
sockets a test plays a server with (a free port, a server that never answers). Fixtures
live in conftest.py files; tests import this."""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import hashlib
import ipaddress
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable, Dict, List, Sequence

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

# A small slice of data/ that trains a model worth blessing in a few seconds.
SLICE_SPANS = (12, 13, 14, 15, 16)

# The longest a pipeline run may take in a test before it is stopped and fails.
RUN_TIMEOUT_SECONDS = 600

# Where every server a test plays listens: this machine's loopback, never a network interface.
LOOPBACK = "127.0.0.1"


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


# The libraries a command that only reads the metadata store or the serving folder must
# not load, and a `sitecustomize` that makes importing any of them fail.
HEAVY_LIBRARIES = ("tensorflow", "tfx", "tensorflow_model_analysis", "tensorflow_data_validation",
                   "tensorflow_transform", "apache_beam", "keras", "tf_keras")
_BLOCKER = f"""
import sys


class _Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {HEAVY_LIBRARIES!r}:
            raise ImportError("this process must not import " + name)
        return None


sys.meta_path.insert(0, _Refuse())
"""


def without_heavy_libraries(folder: Path) -> Dict[str, str]:
    """The environment of a process in which importing any of `HEAVY_LIBRARIES` fails (a
    `sitecustomize` written to `folder`): what answers there never loaded them."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(_BLOCKER)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(folder), os.environ.get("PYTHONPATH"))))}


def cli_command(*args: str) -> List[str]:
    return [os.path.join(os.path.dirname(sys.executable), "taxi-pipeline"), *args]


def run_until(argv: Sequence[str], marker: str, then: Callable[[], None],
              env: Dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`argv` in a subprocess (`env` over this environment); `then()` as soon as a line of
    its output holds `marker` (a step under way); how it ended, with all it wrote."""
    process = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, **(env or {})})
    seen = []
    try:
        for line in process.stdout:
            seen.append(line)
            if marker in line:
                then()
                break
        stdout, stderr = process.communicate(timeout=RUN_TIMEOUT_SECONDS)
    finally:
        process.kill()
    return subprocess.CompletedProcess(process.args, process.returncode, "".join(seen) + stdout, stderr)


def write_records(path: Path, records: Sequence[bytes], compression: str = "GZIP") -> Path:
    """TFRecords at `path`, GZIP as a span's file (`compression` "": none), its folder made."""
    import tensorflow as tf

    path.parent.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(path), tf.io.TFRecordOptions(compression_type=compression)) as writer:
        for record in records:
            writer.write(record)
    return path


def edited(records: Sequence[bytes], edit: Callable, every: int = 1) -> List[bytes]:
    """The serialized examples `records`, `edit(example)` applied to one in `every`."""
    import tensorflow as tf

    changed = []
    for index, record in enumerate(records):
        example = tf.train.Example.FromString(record)
        if index % every == 0:
            edit(example)
        changed.append(example.SerializeToString())
    return changed


def span_like(source_dir: Path, every: int, edit: Callable) -> List[bytes]:
    """The examples of a span folder, `edit` applied to one in `every`."""
    import tensorflow as tf

    files = sorted(glob.glob(str(source_dir / "*.gz")))
    return edited([record.numpy() for record in tf.data.TFRecordDataset(files, compression_type="GZIP")], edit, every)


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
    """The text of the log file the command named (a failure's traceback is there)."""
    (named,) = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("Full log: ")]
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


def served_models(serving_dir) -> list:
    """The model entries of the serving folder's `models.config`, parsed by TF Serving's own
    proto (`model_server_config_pb2.ModelConfig`)."""
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    from components.support import serving_config

    text = (Path(serving_dir) / serving_config.CONFIG_FILE).read_text()
    return list(text_format.Parse(text, model_server_config_pb2.ModelServerConfig()).model_config_list.config)


def inferred_schema(output_root: Path) -> str:
    """The schema InferredSchemaGen wrote under `output_root`, as text with its features
    and string domains in name order (`pipeline.inspect.parity.inferred_schema`)."""
    from pipeline.inspect import parity

    found = parity.inferred_schema(str(output_root))
    assert found, f"no schema of InferredSchemaGen under {output_root}"
    return found


def curated_schema():
    """The curated schema the pipeline imports (`config.schema_file()`), parsed."""
    import tensorflow_data_validation as tfdv

    from pipeline import config

    return tfdv.load_schema_text(config.schema_file())


def local_beam_pipeline(*extra: str):
    """A Beam pipeline on the local runs' options (`LOCAL_BEAM_ARGS`), then `extra`."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipeline.beam.options import LOCAL_BEAM_ARGS

    return beam.Pipeline(options=PipelineOptions([*LOCAL_BEAM_ARGS, *extra]))


# -- Servers a test plays, on the loopback only ------------------------------------------


def free_ports(count: int = 1) -> List[int]:
    """`count` different ports of 127.0.0.1 that nothing listens on: a connection to one is
    refused until something binds it (`(port,) = free_ports()`)."""
    probes = [socket.socket() for _ in range(count)]
    try:
        for probe in probes:  # all bound at once, so the kernel hands out different ports
            probe.bind((LOOPBACK, 0))
        return [probe.getsockname()[1] for probe in probes]
    finally:
        for probe in probes:
            probe.close()


class SilentSocket:
    """A TCP socket that accepts every connection and never says a word, as a hung or
    stopped server's kernel does: its `port`, `address` (HOST:PORT) and the connections it
    `held`, open and unanswered. `answer(connection)`, when given, may answer a connection
    instead: returning True, the connection is closed, not held. On 127.0.0.1 unless `host`
    names another loopback address (a test that needs a fixed `port`, 443, on an address of
    its own). A context manager; `close()` stops it and closes what it holds."""

    def __init__(self, host: str = LOOPBACK, port: int = 0,
                 answer: Callable[[socket.socket], bool] | None = None) -> None:
        assert ipaddress.ip_address(host).is_loopback, f"{host} is not a loopback address"
        self.answer = answer
        self.held: List[socket.socket] = []
        self._listener = socket.socket()
        try:
            self._listener.bind((host, port))
        except OSError:
            self._listener.close()
            raise
        self._listener.listen(16)
        self.host, self.port = self._listener.getsockname()[:2]
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def _accept(self) -> None:
        with contextlib.suppress(OSError):  # until `close()`
            while True:
                connection = self._listener.accept()[0]
                if self.answer is not None and self.answer(connection):
                    connection.close()
                else:
                    self.held.append(connection)

    def close(self) -> None:
        # A listener closed while another thread waits in accept() would go on accepting.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._accepting.join(timeout=5)
        for connection in self.held:
            connection.close()

    def __enter__(self) -> "SilentSocket":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
