"""What a run did, and whether the next one needs to do anything.

Nothing here imports TensorFlow or TFX: an unchanged re-run is decided and reported
in well under a second, before any heavy import.

An unchanged re-run does nothing. The run's inputs are fingerprinted: the data files
(path, size, mtime), this project's source and schema (which define the DAG and its
user code), the resolved run settings and the versions of the libraries that execute
it. When the fingerprint matches the last finished run and that run's pushed version
is still in place, the last run is reported instead of starting another. Without
this, the latest-blessed baseline would change under an unchanged candidate on every
re-run, and the Evaluator and Pusher would run again and push a duplicate version.
"""

from __future__ import annotations

import dataclasses
import enum
import glob
import hashlib
import json
import os
import time
from importlib import metadata as package_metadata
from typing import Dict, List, Optional

import components
from components import spans
import pipeline as pipeline_package
from pipeline import config as config_lib

LAST_RUN_FILE = "last_run.json"
# Records decoded at a time when the data is checked before a run.
_CHECK_BATCH = 10_000
# Distributions whose version changes what a run computes.
_RUNTIME_DISTRIBUTIONS = (
    "tfx", "tensorflow", "tensorflow-transform", "tensorflow-model-analysis",
    "tensorflow-data-validation", "apache-beam", "ml-metadata",
)


class DataRootError(ValueError):
    """The data root is missing or holds no span files (exit 1)."""


class BadDataError(ValueError):
    """A span or file that cannot be ingested: empty, truncated, corrupt or not a
    TFRecord of tf.Example (exit 4, like data the schema rejects)."""


class Outcome(enum.Enum):
    PUSHED = "pushed"
    UP_TO_DATE = "up to date"
    NOT_BLESSED = "not blessed"
    DATA_REJECTED = "data rejected"

    @property
    def exit_code(self) -> int:
        return {Outcome.PUSHED: 0, Outcome.UP_TO_DATE: 0, Outcome.NOT_BLESSED: 3, Outcome.DATA_REJECTED: 4}[self]


@dataclasses.dataclass
class NodeRun:
    node_id: str
    state: str  # "ran", "cached" or "failed"
    seconds: float


@dataclasses.dataclass
class RunReport:
    outcome: Outcome
    pushed_version_dir: Optional[str] = None
    anomalies: List[str] = dataclasses.field(default_factory=list)
    eval_metrics: Dict[str, float] = dataclasses.field(default_factory=dict)
    nodes: List[NodeRun] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    reused_previous_run: bool = False
    # Window mode: the spans used (the newest is the eval split).
    spans: List[int] = dataclasses.field(default_factory=list)
    # The Trainer's warm-start decision and its reason, when it trained.
    warm_start: str = ""
    # Why nothing was run, when nothing was.
    note: str = ""

    def to_json(self) -> Dict[str, object]:
        record = dataclasses.asdict(self)
        record["outcome"] = self.outcome.value
        return record

    @classmethod
    def from_json(cls, record: Dict[str, object]) -> "RunReport":
        record = dict(record)
        record["outcome"] = Outcome(record["outcome"])
        record["nodes"] = [NodeRun(**node) for node in record.get("nodes", [])]
        return cls(**record)


def _is_remote(path: str) -> bool:
    return "://" in path


def span_files(data_root: str) -> List[str]:
    """Every file the pipeline would ingest, or DataRootError naming the problem."""
    pattern = os.path.join(data_root, spans.ALL_SPANS_PATTERN)
    if _is_remote(data_root):
        import tensorflow as tf

        exists, files = tf.io.gfile.isdir(data_root), sorted(tf.io.gfile.glob(pattern))
        sizes = {path: tf.io.gfile.stat(path).length for path in files}
    else:
        exists, files = os.path.isdir(data_root), sorted(p for p in glob.glob(pattern) if os.path.isfile(p))
        sizes = {path: os.path.getsize(path) for path in files}
    if not exists:
        raise DataRootError(f"data root {data_root} does not exist or is not a folder")
    if not files:
        raise DataRootError(
            f"data root {data_root} holds no span files (expected {spans.ALL_SPANS_PATTERN}); "
            "build them with `taxi-pipeline make-data`"
        )
    empty = [path for path in files if sizes[path] == 0]
    if empty:
        raise BadDataError(f"empty data files: {', '.join(empty)}")
    span_dirs = {os.path.dirname(path) for path in files}
    all_spans = (
        [p for p in (os.path.join(data_root, name) for _, name in spans.numbered(os.listdir(data_root)))
         if os.path.isdir(p)]
        if not _is_remote(data_root) else sorted(span_dirs)
    )
    empty_spans = sorted(set(all_spans) - span_dirs)
    if empty_spans:
        raise BadDataError(f"span folders without files: {', '.join(empty_spans)}")
    return files


def check_records(files: List[str]) -> int:
    """Reads every file through: each must be a GZIP TFRecord of tf.Example.

    Returns the number of examples; raises BadDataError naming the first bad file. Run
    before the pipeline, so bad input stops the run before anything is written to MLMD.
    """
    import tensorflow as tf
    from tfx_bsl.coders import example_coder

    decoder = example_coder.ExamplesToRecordBatchDecoder()
    total = 0
    for path in files:
        count = 0
        try:
            batches = tf.data.TFRecordDataset(path, compression_type="GZIP").batch(_CHECK_BATCH)
            for batch in batches.as_numpy_iterator():
                try:
                    decoder.DecodeBatch(list(batch))
                except RuntimeError as err:
                    raise BadDataError(
                        f"{path}: a record among {count + 1}-{count + len(batch)} is not a serialized tf.Example ({err})"
                    ) from err
                count += len(batch)
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as err:
            raise BadDataError(
                f"{path} is not a readable GZIP TFRecord file (truncated or corrupt after {count} records): "
                f"{err.message.splitlines()[0]}"
            ) from err
        if count == 0:
            raise BadDataError(f"{path} holds no records")
        total += count
    return total


def _file_stamp(path: str) -> str:
    if _is_remote(path):
        import tensorflow as tf

        stat = tf.io.gfile.stat(path)
        return f"{stat.length}\0{stat.mtime_nsec}"
    stat = os.stat(path)
    return f"{stat.st_size}\0{stat.st_mtime_ns}"


def fingerprint(run_config: config_lib.RunConfig, files: List[str]) -> str:
    """Changes whenever the data, the project's code, the settings or the runtime change."""
    digest = hashlib.sha256()
    for package in (components, pipeline_package):
        digest.update(config_lib.source_digest(os.path.dirname(package.__file__)).encode())
    digest.update(json.dumps(dataclasses.asdict(run_config), sort_keys=True).encode())
    for name in _RUNTIME_DISTRIBUTIONS:
        digest.update(f"{name}=={package_metadata.version(name)}\n".encode())
    for path in files:
        digest.update(f"{path}\0{_file_stamp(path)}\n".encode())
    return digest.hexdigest()


def _exists(path: str) -> bool:
    if _is_remote(path):
        import tensorflow as tf

        return tf.io.gfile.exists(path)
    return os.path.exists(path)


def load_last_run(output_root: str) -> Optional[Dict[str, object]]:
    path = os.path.join(output_root, LAST_RUN_FILE)
    if not _exists(path):
        return None
    if _is_remote(path):
        import tensorflow as tf

        with tf.io.gfile.GFile(path) as handle:
            return json.load(handle)
    with open(path) as handle:
        return json.load(handle)


def save_last_run(output_root: str, run_fingerprint: str, report: RunReport) -> None:
    """Written after the run finished, by an atomic rename: never half a record."""
    import tensorflow as tf

    path = os.path.join(output_root, LAST_RUN_FILE)
    staged = path + ".tmp"
    with tf.io.gfile.GFile(staged, "w") as handle:
        json.dump({"fingerprint": run_fingerprint, "report": report.to_json()}, handle, indent=2)
    tf.io.gfile.rename(staged, path, overwrite=True)


@dataclasses.dataclass
class RunPlan:
    files: List[str]
    fingerprint: str
    # The last run's report when nothing changed since; None when a run is needed.
    previous: Optional[RunReport]


def plan(run_config: config_lib.RunConfig) -> RunPlan:
    """Lists the data (or raises DataRootError) and decides whether a run is needed."""
    started = time.perf_counter()
    files = span_files(run_config.data_root)
    run_fingerprint = fingerprint(run_config, files)
    previous = reusable_report(run_config.output_root, run_fingerprint)
    if previous is not None:
        previous.seconds = time.perf_counter() - started
    return RunPlan(files, run_fingerprint, previous)


def reusable_report(output_root: str, run_fingerprint: str) -> Optional[RunReport]:
    """The last run's report, if it had this fingerprint and what it pushed still serves."""
    last = load_last_run(output_root)
    if not last or last.get("fingerprint") != run_fingerprint:
        return None
    previous = RunReport.from_json(last["report"])
    if previous.outcome is Outcome.PUSHED or previous.outcome is Outcome.UP_TO_DATE:
        if not (previous.pushed_version_dir and _exists(previous.pushed_version_dir)):
            return None
    previous.reused_previous_run = True
    if previous.outcome is Outcome.PUSHED:
        previous.outcome = Outcome.UP_TO_DATE
    previous.nodes = []
    return previous
