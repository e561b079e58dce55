"""The one config core: every default, and the run settings shared by local runs and the
compiled (Kubeflow Pipelines v2 / Vertex AI) pipeline.

Plain dataclasses, no TensorFlow: the command line resolves them before anything heavy is
imported, and each runner turns them into `create_pipeline(...)`'s arguments with
`pipeline_args`.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, Optional, Sequence, Tuple

import components.model
from components.custom.promotion import PROMOTIONS
from components.model.trainer.settings import ExportConfig, TrainConfig
from components.setting import setting
from components.support import files, registry, serving_probe, source, spans, traffic
from pipeline import code_version
from pipeline.beam.options import LOCAL_BEAM_ARGS, VERTEX_BEAM_ARGS, runs_here

PIPELINE_NAME = "taxi-big-tip"  # KFP v2 allows [a-z0-9-] only
MODEL_NAME = ExportConfig.model_name
DATA_ROOT = "data"
OUTPUT_ROOT = "tfx_pipeline_output"
# The record of the last finished runs under the output root (`pipeline.run.run_state`).
LAST_RUN_FILE = "last_run.json"
# The components' outputs, in a local run's output root beside its metadata store.
PIPELINE_ROOT_DIR = "pipeline_root"
# The SQLite metadata store's file under the output root.
METADATA_FILE = "metadata.sqlite"
SERVING_DIR = "serving_model"
# Each run's page, `<output root>/reports/<run id>.html` (`pipeline.inspect.report_page`).
REPORTS_DIR = "reports"
# The data gate's statistics computed ahead while a run lasts (`pipeline.run.statistics_ahead`).
STATISTICS_AHEAD_DIR = "statistics-ahead"
# Pushed versions kept in the serving folder (the newest always among them).
KEEP_VERSIONS = 3
# Newest runs `retrain` and `gc` keep whole (pipeline.run.retention).
KEEP_RUNS = 10
# `monitor` and the shadow check: the formats of logged requests they read, and the bound
# on malformed records (`components.support.traffic`).
REQUEST_FORMATS, AUTO_FORMAT = traffic.REQUEST_FORMATS, traffic.AUTO_FORMAT
MONITOR_MAX_MALFORMED = traffic.MAX_MALFORMED
# Spans in the rolling window of `retrain` and of the compiled (scheduled) pipeline.
WINDOW_SIZE = 4
# How a local run is orchestrated: LocalDagRunner (the default) or BeamDagRunner.
ORCHESTRATORS = ("local", "beam")
# Where Vertex AI mounts Cloud Storage in every task's container (Cloud Storage FUSE):
# gs://BUCKET/x is /gcs/BUCKET/x there.
FUSE_ROOT = "/gcs/"
# The compiled pipeline's locations: Cloud Storage, whose generation preconditions the push
# lock takes (components/support/object_lock.py), and which TensorFlow and Beam in the
# image read without another file system (docs/beyond-one-machine.md, S3 or MinIO).
CLOUD_STORAGE = "gs://"
# Where the Dockerfile installs the package; the schema ships inside it.
IMAGE_SCHEMA_DIR = "/pipeline/components/model/schema"


@dataclasses.dataclass(frozen=True)
class EvaluationConfig:
    """When a candidate model is blessed."""

    min_auc: float = setting(0.80, "the candidate's eval AUC must reach this to be blessed, whatever the baseline")
    max_auc_drop: float = setting(0.005, "and may be at most this much below the AUC of the model that serves")
    # Train:eval hash buckets of ExampleGen's deterministic split (all-spans mode).
    train_buckets: int = 4
    eval_buckets: int = 1
    # A local run over more rows than this many eval rows would be keeps the eval split
    # near this size, the rest going to training (see `sized_evaluation`).
    max_eval_rows: int = 50_000


def report_path(output_root: str, run_id: str) -> str:
    return os.path.join(output_root, REPORTS_DIR, f"{run_id}.html")


def sized_evaluation(evaluation: EvaluationConfig, rows: int) -> EvaluationConfig:
    """`evaluation` with the hash buckets cut so that the eval split holds about
    `max_eval_rows` of `rows` when its share would hold more.

    The Evaluator's time grows with its rows (TFMA computes the metrics of every slice
    example by example), while the AUC it gates on is known to within about 0.002 at
    50,000 rows (its standard error at AUC 0.95 is below 0.001), and the candidate
    and the baseline are compared on the same rows.
    """
    total = evaluation.train_buckets + evaluation.eval_buckets
    if rows * evaluation.eval_buckets <= evaluation.max_eval_rows * total:
        return evaluation
    buckets = -(-rows // evaluation.max_eval_rows)
    return dataclasses.replace(evaluation, train_buckets=buckets - 1, eval_buckets=1)


def eval_rows(evaluation: EvaluationConfig, rows: int, window_size: Optional[int] = None) -> int:
    """About how many of `rows` the eval split holds: in window mode the newest of
    `window_size` spans (as if the window's rows were shared evenly), else the share of
    `evaluation`'s hash buckets."""
    if window_size is not None:
        return rows // window_size
    return rows * evaluation.eval_buckets // (evaluation.train_buckets + evaluation.eval_buckets)


@dataclasses.dataclass(frozen=True)
class ShadowConfig:
    """The shadow check before a push (`components.custom.shadow_check`); thresholds
    measured on clean traffic in docs/data-quality.md."""

    shadow_requests: str = setting("", "logged requests, a local or gs:// glob of any format `monitor` reads: the "
                                       "candidate and the serving model score the newest of them before a push; "
                                       "none: the check passes, saying so")
    shadow_sample_size: int = setting(2000, "how many of the newest requests both models score", minimum=100)
    max_flip_rate: float = setting(0.05, "the largest share of those requests whose class may flip at the serving "
                                         "threshold; over it, the candidate is not pushed (exit 8)", minimum=0.0)
    max_score_shift: float = setting(0.3, "the largest Kolmogorov-Smirnov distance between the two models' score "
                                          "distributions; over it, the candidate is not pushed (exit 8)",
                                     minimum=0.0)


@dataclasses.dataclass(frozen=True)
class Settings:
    """What the pipeline does, wherever it runs."""

    pipeline_name: str = PIPELINE_NAME
    keep_versions: int = setting(KEEP_VERSIONS, "pushed versions kept in the serving folder; older ones are deleted",
                                 minimum=1)
    # Train on the newest this many spans (the newest = eval split), chosen when the
    # pipeline runs; None: all spans, hash-split.
    window_size: Optional[int] = None
    warm_start: bool = setting(True, "start training from the serving model's weights when its features and shapes "
                                     "still match")
    promotion: str = setting(PROMOTIONS[0], "auto: a candidate that passes every check serves at once; approval: it "
                                            "is copied into the serving folder and awaits `taxi-pipeline serving "
                                            "approve VERSION`", choices=PROMOTIONS)
    latency_budget_ms: float = setting(serving_probe.DEFAULT_BUDGET_MS,
                                       "the serving check's p99 budget for a single-example request; over it, the "
                                       "model is not pushed (exit 6)")
    # The sections below are settings too, each flag named for its field.
    train: TrainConfig = TrainConfig()
    export: ExportConfig = ExportConfig()
    evaluation: EvaluationConfig = EvaluationConfig()
    shadow: ShadowConfig = ShadowConfig()
    beam_args: Tuple[str, ...] = ()
    # The Evaluator's own Beam options (`pipeline.beam.options.parallel_beam_args`); empty: the pipeline's.
    parallel_beam_args: Tuple[str, ...] = ()
    # ImportExampleGen's own (`pipeline.beam.options.threaded_beam_args`); empty: the pipeline's.
    ingest_beam_args: Tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.keep_versions < 1:
            raise ValueError(f"keep_versions must be at least 1, got {self.keep_versions}")
        if self.window_size is not None:
            spans.window_train_splits(self.window_size)  # refuses a window of fewer than 2 spans
        if self.promotion not in PROMOTIONS:
            raise ValueError(f"promotion must be one of {', '.join(PROMOTIONS)}, got {self.promotion!r}")
        if not self.latency_budget_ms > 0:
            raise ValueError(f"the latency budget must be a positive number of ms, got {self.latency_budget_ms}")

    @property
    def model_name(self) -> str:
        return self.export.model_name


# The settings that reach Transform or the Trainer, and so change the model trained: a
# candidate's inputs (`components.support.registry`), with the span window's files, the
# code and the libraries' versions. Every other setting only judges or places a model
# (the thresholds, the promotion, retention, the latency budget, Beam's placement): a
# change to one trains nothing and applies to the next candidate. docs/operations.md
# lists the same.
MODEL_INPUTS = ("window_size", "warm_start", "train", "export", "evaluation.train_buckets",
                "evaluation.eval_buckets", "evaluation.max_eval_rows")


def model_inputs(settings: Settings) -> Dict[str, Any]:
    """The values of `MODEL_INPUTS` in `settings`."""
    found = {}
    for name in MODEL_INPUTS:
        value: Any = settings
        for part in name.split("."):
            value = getattr(value, part)
        found[name] = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
    return found


def static_inputs(settings: Settings) -> str:
    """The part of a candidate's inputs known before the pipeline runs (`registry.static_inputs`)."""
    return registry.static_inputs(code_version.of_model(), model_inputs(settings))


# The MySQL account of `--metadata-mysql`, from the environment (never a flag or a file).
MYSQL_USER_ENV, MYSQL_PASSWORD_ENV = "TAXI_MLMD_USER", "TAXI_MLMD_PASSWORD"
# The alert webhook's URL, which carries its credential: from here or `--notify-file`,
# it stays out of shell history, cron files and `ps`.
NOTIFY_URL_ENV = "TAXI_NOTIFY_URL"


@dataclasses.dataclass(frozen=True)
class MySqlAddress:
    """A MySQL (or MariaDB) database for MLMD: `HOST:PORT/DATABASE`."""

    host: str
    port: int
    database: str

    @classmethod
    def parse(cls, text: str) -> "MySqlAddress":
        host_port, _, database = text.partition("/")
        host, _, port = host_port.rpartition(":")
        if not (host and port.isdigit() and database) or "/" in database:
            raise ValueError(f"--metadata-mysql must be HOST:PORT/DATABASE, got {text!r}")
        return cls(host, int(port), database)

    def __str__(self) -> str:
        return f"mysql://{self.host}:{self.port}/{self.database}"


@dataclasses.dataclass(frozen=True)
class MetadataConfig:
    """Where MLMD keeps its records: a SQLite file (the default, in the output root) or a
    MySQL database that runs on several hosts share."""

    sqlite_path: str
    mysql: Optional[MySqlAddress] = None

    def exists(self) -> bool:
        """Whether a run may have recorded anything there yet."""
        return self.mysql is not None or os.path.exists(self.sqlite_path)

    def __str__(self) -> str:
        return str(self.mysql) if self.mysql else self.sqlite_path


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """A run on this machine (LocalDagRunner or BeamDagRunner): the data root and serving
    folder local or gs://, the output root (SQLite MLMD, logs, lock) local."""

    data_root: str = DATA_ROOT
    output_root: str = OUTPUT_ROOT
    serving_dir: str = SERVING_DIR
    settings: Settings = Settings(beam_args=LOCAL_BEAM_ARGS)
    # MLMD in MySQL instead of the output root's SQLite file.
    metadata_mysql: Optional[MySqlAddress] = None

    def resolved(self) -> "RunConfig":
        """The same config with local paths made absolute."""
        return dataclasses.replace(
            self,
            data_root=_absolute(self.data_root),
            output_root=_absolute(self.output_root),
            serving_dir=_absolute(self.serving_dir),
        )

    @property
    def pipeline_root(self) -> str:
        return os.path.join(self.output_root, PIPELINE_ROOT_DIR)

    @property
    def metadata_path(self) -> str:
        return os.path.join(self.output_root, METADATA_FILE)

    @property
    def metadata(self) -> MetadataConfig:
        return MetadataConfig(self.metadata_path, self.metadata_mysql)

    @property
    def model_serving_dir(self) -> str:
        return os.path.join(self.serving_dir, self.settings.model_name)

    def __post_init__(self) -> None:
        special = spans.unquotable_glob_characters(self.output_root)
        if special:
            raise ValueError(
                f"the output root {self.output_root!r} has {' '.join(special)} in its path: TFX reads the pipeline "
                "root's files with glob patterns, which cannot quote them; pick a folder without them"
            )
        if files.is_remote(self.output_root):
            raise ValueError(
                f"the output root must be a local folder (MLMD's SQLite file, logs and the lock live there), "
                f"got {self.output_root!r}; data root and serving folder may be remote"
            )

    def pipeline_args(self, span_listing: Sequence[str], inputs: str = "") -> Dict[str, Any]:
        """`create_pipeline(...)`'s arguments for a run that found the span folders
        `span_listing` and planned a candidate of `inputs`; the schema is read from the
        installed package."""
        return dict(
            pipeline_args(self.settings, pipeline_root=self.pipeline_root, data_root=self.data_root,
                          serving_model_dir=self.model_serving_dir, schema_folder=schema_dir()),
            span_listing=",".join(span_listing), inputs=inputs,
        )


# What `compile` writes for: Vertex AI's PipelineJob, or the pipeline spec Kubeflow
# Pipelines' own backend takes (pipeline.cloud.kubeflow_target).
VERTEX, KUBEFLOW = "vertex", "kubeflow"
COMPILE_TARGETS = (VERTEX, KUBEFLOW)


@dataclasses.dataclass(frozen=True)
class KubeflowConfig:
    """The compiled pipeline: every path a remote URI the pipeline's pods can read."""

    image: str
    pipeline_root: str
    data_root: str
    serving_dir: str
    settings: Settings = Settings(window_size=WINDOW_SIZE, beam_args=VERTEX_BEAM_ARGS)
    schema_dir: str = IMAGE_SCHEMA_DIR
    # Where the exit handler reads the URL of the webhook it tells how each job ended (a
    # Secret Manager secret or env:NAME, `pipeline.cloud.secrets`); "" for no alert.
    notify_secret: str = ""
    target: str = VERTEX

    def __post_init__(self) -> None:
        if self.target not in COMPILE_TARGETS:
            raise ValueError(f"unknown target {self.target!r}; the targets are: {', '.join(COMPILE_TARGETS)}")
        # Vertex AI takes the pipeline root as gs:// only; the tasks may read the data root
        # through its Cloud Storage FUSE mount as well.
        if not self.pipeline_root.startswith(CLOUD_STORAGE):
            raise ValueError(f"pipeline_root must be a gs://BUCKET/... URI, got {self.pipeline_root!r}")
        if not self.data_root.startswith((CLOUD_STORAGE, FUSE_ROOT)):
            raise ValueError(
                "data_root must be a location every task of the pipeline can reach: gs://BUCKET/... or "
                f"its Cloud Storage FUSE path {FUSE_ROOT}BUCKET/..., got {self.data_root!r}"
            )
        # A push is whole and one at a time only through Cloud Storage itself: on the FUSE
        # mount a folder's rename is not atomic and a file lock reaches no other host.
        if not self.serving_dir.startswith(CLOUD_STORAGE):
            fuse = self.serving_dir.startswith(FUSE_ROOT)
            raise ValueError(
                f"serving_dir must be a gs://BUCKET/... URI, got {self.serving_dir!r}"
                + (f": on the Cloud Storage FUSE mount a push's rename is not atomic and its lock reaches no other "
                   f"host; give the same folder as gs://{self.serving_dir[len(FUSE_ROOT):]}" if fuse else "")
            )
        if not self.image:
            raise ValueError("an image is required")

    @property
    def model_serving_dir(self) -> str:
        return f"{self.serving_dir.rstrip('/')}/{self.settings.model_name}"

    def pipeline_args(self) -> Dict[str, Any]:
        """`create_pipeline(...)`'s arguments; the schema is read from inside the image. The
        spans of a future run are unknown: no span listing (see `components.custom.window`).

        Where Beam's work stays in each component's container (no remote runner given), the
        pipeline image is named as the workers' container: without a package, setup file or
        image named, TFX builds and stages an archive of itself before every Beam
        component (about 3 s each), which those workers never read. A remote runner gets
        its workers' image from the user's options (`--beam dataflow --sdk-image`)."""
        settings = self.settings
        if runs_here(settings.beam_args):
            settings = dataclasses.replace(
                settings, beam_args=tuple(settings.beam_args) + (f"--sdk_container_image={self.image}",))
        return dict(
            pipeline_args(settings, pipeline_root=self.pipeline_root, data_root=self.data_root,
                          serving_model_dir=self.model_serving_dir, schema_folder=self.schema_dir),
            span_listing="",
        )


def pipeline_args(
    settings: Settings, *, pipeline_root: str, data_root: str, serving_model_dir: str, schema_folder: str
) -> Dict[str, Any]:
    """`create_pipeline(...)`'s keyword arguments for these settings and locations."""
    return dict(
        settings=settings,
        pipeline_root=pipeline_root,
        data_root=data_root,
        schema_path=schema_folder,
        # The schema a compiled pipeline reads from its image is this package's own.
        schema_digest=spans.sha256(schema_file()),
        serving_model_dir=serving_model_dir,
        code_version=source.of_components(),
        static_inputs=static_inputs(settings),
    )


def schema_dir() -> str:
    """Folder of the curated schema shipped inside the `components` package."""
    return os.path.join(os.path.dirname(components.model.__file__), "schema")


def schema_file() -> str:
    """The curated schema shipped inside the `components` package."""
    return os.path.join(schema_dir(), components.model.SCHEMA_FILE)


def _absolute(path: str) -> str:
    return path if files.is_remote(path) else os.path.abspath(path)
