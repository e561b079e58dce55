"""`taxi-pipeline monitor`: logged serving traffic against the training data of the
version that served it, by TFDV.

1. The version (`--model`, default the one TF Serving serves) is traced in MLMD to the run
   that pushed it, and that run's ImportExampleGen examples: the training splits (every
   split but `eval`) are the data it was trained on.
2. One Beam pipeline computes TFDV statistics of the requests (`request_logs` reads each
   file, any size: it streams) and, once per training examples artifact (then kept
   beside the monitor's outputs, keyed by the schema too), of the training data, by the
   same code: both sides are decoded by the curated schema and summarised with the same
   options.
3. The requests' statistics are validated against the curated schema in its SERVING
   environment (the label not required), and compared with the training statistics by
   the schema's `skew_comparator`s (Jensen-Shannon divergence for numeric features,
   L-infinity for strings; thresholds in docs/data-quality.md).

Every finding is one line (feature, measure, distance, threshold); any finding is exit 4,
as the data gate's. Malformed records are counted and named; above `--max-malformed`
of the records the traffic is not judged (exit 1). Each monitor run leaves a page and
its statistics under `<output root>/monitor/<id>/` and one execution in MLMD (context
type `monitor_run`), which `history` lists beside the pipeline's runs.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import logging
import os
import time
from typing import Dict, List, Sequence, Tuple

from pipeline import config, failures
from pipeline.inspect import monitor_records
from pipeline.inspect import run_details as details_lib
from pipeline.outcome import ExitCode

MONITOR_DIR = "monitor"
TRAINING_CACHE = "training-statistics"
STATS = "FeatureStats.pb"
MALFORMED_FILE = "malformed.json"
# Malformed records named on the console and the page (all are counted).
MALFORMED_SHOWN = 20


@dataclasses.dataclass(frozen=True)
class MonitorConfig:
    requests_glob: str
    run_config: config.RunConfig
    model: str = "serving"  # the version TF Serving serves, or a version number
    file_format: str = config.AUTO_FORMAT
    # The largest fraction of malformed records the traffic is still judged with.
    max_malformed: float = config.MONITOR_MAX_MALFORMED
    beam_args: Sequence[str] = ()


@dataclasses.dataclass
class TrainingData:
    version: int
    run_id: str
    examples_id: int
    splits: List[str]
    files: List[str]


@dataclasses.dataclass
class MonitorResult:
    monitor_id: str
    version: int
    training: TrainingData
    files: Dict[str, str]  # request file -> its format
    requests: int
    malformed: int
    malformed_shown: List[str]
    skew: List[details_lib.DriftMeasure]
    anomalies: List[str]
    seconds: float
    page: str = ""
    serving_stats: Dict[str, details_lib.FeatureStats] = dataclasses.field(default_factory=dict)
    training_stats: Dict[str, details_lib.FeatureStats] = dataclasses.field(default_factory=dict)

    @property
    def findings(self) -> List[str]:
        return [f"feature {m.feature!r}: skew {m.measure} {m.value:.3f} (threshold {m.threshold:.3f})"
                for m in self.skew if m.over] + self.anomalies

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.DATA_REJECTED if self.findings else ExitCode.OK


def new_monitor_id() -> str:
    return f"monitor-{datetime.datetime.now(datetime.timezone.utc).strftime('%Y%m%d-%H%M%S-%f')}-{os.getpid()}"


def served_version(run_config: config.RunConfig, model: str) -> int:
    from components.support import serving_config

    current = serving_config.state(run_config.serving_dir, run_config.settings.model_name)
    model_dir = run_config.model_serving_dir
    if not current.on_disk:
        raise ValueError(f"no model versions in {model_dir}: nothing has served yet (run the pipeline first)")
    if model == "serving":
        return current.require_serving(model_dir)
    if not model.isdigit() or int(model) not in current.on_disk:
        raise ValueError(f"--model must be 'serving' or a version in {model_dir} "
                         f"({', '.join(map(str, current.on_disk))}), got {model!r}")
    return int(model)


def training_data(run_config: config.RunConfig, version: int) -> TrainingData:
    """The examples version `version` was trained on, through MLMD: its push, that run's
    ImportExampleGen output and its training splits' files."""
    import tensorflow as tf

    from components.custom.recorded import EXAMPLES_KEY, NodeId
    from pipeline.inspect import lineage, run_report
    from pipeline.pipeline import EVAL_SPLIT

    store = run_report.connect(run_config.metadata)
    pushed = lineage.pushed_model(store, run_config.model_serving_dir, version)
    if pushed is None:
        raise LookupError(f"no push of version {version} to {run_config.model_serving_dir} is recorded in "
                          f"{run_config.metadata}: give the --output-root (or --metadata-mysql) of the pipeline "
                          "that pushed it")
    push = next(e for e in store.get_events_by_artifact_ids([pushed.id]) if e.type in run_report.OUTPUT_EVENTS)
    [execution] = store.get_executions_by_id([push.execution_id])
    run_id = lineage.run_of(store, execution)
    records = run_report.run_records(store, run_config.settings.pipeline_name, run_id)
    examples = records.output(NodeId.EXAMPLE_GEN, EXAMPLES_KEY)
    if examples is None or not run_report.live(examples):
        raise LookupError(f"the training data of version {version} (run {run_id}) is no longer in "
                          f"{run_config.pipeline_root}: monitor a newer version with --model")
    splits = [s for s in json.loads(examples.properties["split_names"].string_value or "[]") if s != EVAL_SPLIT]
    files = sorted(f for split in splits for f in tf.io.gfile.glob(os.path.join(examples.uri, f"Split-{split}", "*")))
    if not files:
        raise LookupError(f"the training splits {splits} of version {version} hold no files under {examples.uri}")
    return TrainingData(version, run_id, examples.id, splits, files)


def _formats(paths: Sequence[str], named: str) -> Dict[str, str]:
    from components.support import request_logs

    return {path: request_logs.detect(path) if named == config.AUTO_FORMAT else named for path in paths}


def serving_schema(schema):
    """`schema` without the features its SERVING environment leaves out (the label): what
    requests are decoded by, so a logged label is not read as traffic."""
    decoding = type(schema)()
    decoding.CopyFrom(schema)
    del decoding.feature[:]
    decoding.feature.extend(
        f for f in schema.feature if monitor_records.SERVING_ENVIRONMENT not in f.not_in_environment)
    return decoding


def compute_statistics(items: Dict[str, Sequence[Tuple[str, str]]], schema, output_dir: str,
                       beam_args: Sequence[str]) -> Dict[str, Tuple[int, List[str]]]:
    """TFDV statistics of each named group of (file, format)s, in one Beam pipeline:
    `<output_dir>/<name>-FeatureStats.pb` each, and (malformed count, the first named)."""
    import apache_beam as beam
    import tensorflow_data_validation as tfdv
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipeline.ops import request_beam

    decoding = serving_schema(schema)
    with beam.Pipeline(options=PipelineOptions(list(beam_args))) as pipeline:
        for name, files in items.items():
            read = (
                pipeline
                | f"Files[{name}]" >> beam.Create(list(files))
                | f"Spread[{name}]" >> beam.Reshuffle()
                | f"Read[{name}]" >> beam.ParDo(request_beam.ReadRequests(decoding)).with_outputs(
                    request_beam.MALFORMED, main="batches")
            )
            _ = (
                read.batches
                | f"Statistics[{name}]" >> tfdv.GenerateStatistics(tfdv.StatsOptions())
                | f"Write[{name}]" >> tfdv.WriteStatisticsToBinaryFile(os.path.join(output_dir, f"{name}-{STATS}"))
            )
            _ = (
                read[request_beam.MALFORMED]
                | f"Malformed[{name}]" >> request_beam.SummarizeMalformed(MALFORMED_SHOWN)
                | f"WriteMalformed[{name}]" >> beam.io.WriteToText(
                    os.path.join(output_dir, f"{name}-{MALFORMED_FILE}"), shard_name_template="")
            )
    found = {}
    for name in items:
        with open(os.path.join(output_dir, f"{name}-{MALFORMED_FILE}"), encoding="utf-8") as handle:
            summary = json.loads(handle.read() or "{}")
        found[name] = (int(summary.get("count", 0)), list(summary.get("shown", [])))
    return found


def compare(serving, training, schema) -> Tuple[List[details_lib.DriftMeasure], List[str]]:
    """(every skew measure, one line per schema anomaly of the traffic in SERVING)."""
    import tensorflow_data_validation as tfdv
    from tensorflow_metadata.proto.v0 import anomalies_pb2

    from components.custom import gate

    traffic = tfdv.validate_statistics(serving, schema, environment=monitor_records.SERVING_ENVIRONMENT)
    lines = gate.anomaly_lines(traffic)
    skewed = tfdv.validate_statistics(training, schema, environment=monitor_records.SERVING_ENVIRONMENT,
                                      serving_statistics=serving)
    measures = [
        details_lib.DriftMeasure(info.path.step[0], anomalies_pb2.DriftSkewInfo.Measurement.Type.Name(m.type),
                                 m.value, m.threshold)
        for info in skewed.drift_skew_info if info.path.step for m in info.skew_measurements
    ]
    return sorted(measures, key=lambda m: m.feature), lines


def run(monitor: MonitorConfig) -> MonitorResult:
    """Judges the traffic of `monitor.requests_glob`; writes its page and MLMD record."""
    import tensorflow as tf

    started = time.perf_counter()
    if not 0 <= monitor.max_malformed < 1:
        raise ValueError(f"--max-malformed is a fraction in [0, 1), got {monitor.max_malformed}")
    paths = sorted(tf.io.gfile.glob(monitor.requests_glob))
    if not paths:
        raise ValueError(f"no files match --requests {monitor.requests_glob}")
    run_config = monitor.run_config
    version = served_version(run_config, monitor.model)
    failures.check_store(run_config.metadata, run_config.output_root)
    if not run_config.metadata.exists():
        raise ValueError(f"no metadata store at {run_config.metadata}: give the --output-root (or --metadata-mysql) "
                         f"of the pipeline that pushed version {version}")
    training = training_data(run_config, version)
    files = _formats(paths, monitor.file_format)
    monitor_id = new_monitor_id()
    root = os.path.join(run_config.output_root, MONITOR_DIR)
    output_dir = os.path.join(root, monitor_id)
    os.makedirs(output_dir)
    schema, serving_stats, training_stats, found = _statistics(monitor, files, training, version, root, output_dir)
    malformed, shown = found["serving"]
    requests = int(serving_stats.datasets[0].num_examples) if serving_stats.datasets else 0
    if malformed and malformed > monitor.max_malformed * (requests + malformed):
        raise ValueError(
            f"{malformed} of {requests + malformed} logged records are malformed (more than --max-malformed "
            f"{monitor.max_malformed:.0%}), e.g. {shown[0]}: fix the logger or name the format with --format; "
            "the traffic was not judged")
    if not requests:
        raise ValueError(f"no requests in {monitor.requests_glob}: nothing to judge")
    skew, anomalies = compare(serving_stats, training_stats, schema)
    result = MonitorResult(
        monitor_id, version, training, files, requests, malformed, shown, skew, anomalies,
        time.perf_counter() - started,
        serving_stats=details_lib.features_of(serving_stats), training_stats=details_lib.features_of(training_stats),
    )
    from pipeline.ops import monitor_page

    result.page = monitor_page.write(output_dir, result)
    monitor_records.record(run_config.metadata, monitor_records.MonitorRecord(
        monitor_id=monitor_id, version=version, requests=requests, malformed=malformed, findings=result.findings,
        page=result.page, requests_glob=monitor.requests_glob, training_run=training.run_id,
    ))
    return result


def _statistics(monitor: MonitorConfig, files: Dict[str, str], training: TrainingData, version: int, root: str,
                output_dir: str):
    """The curated schema, the traffic's statistics, the training data's (computed once per
    training examples and schema, then read from the cache) and the malformed records
    found, by group."""
    import tensorflow_data_validation as tfdv
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    cache_dir = os.path.join(root, TRAINING_CACHE)
    os.makedirs(cache_dir, exist_ok=True)
    with open(config.schema_file(), encoding="utf-8") as handle:
        schema_text = handle.read()
    schema = text_format.Parse(schema_text, schema_pb2.Schema())
    # Keyed by the examples and by the schema the records are decoded by.
    schema_key = hashlib.sha256(schema_text.encode()).hexdigest()[:12]
    cached = os.path.join(cache_dir, f"examples-{training.examples_id}-schema-{schema_key}-{STATS}")
    groups = {"serving": sorted(files.items())}
    if not os.path.exists(cached):
        from components.support import request_logs

        groups["training"] = [(path, request_logs.EXAMPLES) for path in training.files]
    logging.info("monitor %s: %d request files against version %s (run %s, %s)", os.path.basename(output_dir),
                 len(files), version, training.run_id,
                 "training statistics cached" if len(groups) == 1 else "training data read")
    found = compute_statistics(groups, schema, output_dir, monitor.beam_args)
    if "training" in groups:
        os.replace(os.path.join(output_dir, f"training-{STATS}"), cached)
    serving_stats = tfdv.load_stats_binary(os.path.join(output_dir, f"serving-{STATS}"))
    return schema, serving_stats, tfdv.load_stats_binary(cached), found


def summary(result: MonitorResult) -> str:
    """What the console shows: a line per finding, then the verdict and where the page is."""
    lines = list(result.findings)
    if result.malformed:
        lines.append(f"{result.malformed} malformed records were left out (within --max-malformed), e.g.:")
        lines += [f"  {text}" for text in result.malformed_shown[:5]]
    verdict = (f"skew or anomalies in {len(result.findings)} finding(s)" if result.findings
               else "no skew past the thresholds, no anomalies")
    lines.append(f"Monitored {result.requests} requests against version {result.version} (trained in run "
                 f"{result.training.run_id}): {verdict} ({result.seconds:.1f} s)")
    lines.append(f"Page: {result.page}")
    return "\n".join(lines)


def alert_payload(result: MonitorResult) -> dict:
    """The webhook body of a monitor run: Slack's `text`, then fields for programs (a run
    that failed: `alerts.monitor_failed_payload`)."""
    head = (f"taxi-pipeline monitor: {len(result.findings)} finding(s) in {result.requests} requests to version "
            f"{result.version}" if result.findings else
            f"taxi-pipeline monitor: {result.requests} requests to version {result.version} look like its "
            "training data")
    return {"text": "\n".join([head] + result.findings[:10]), "command": "monitor",
            "exit_code": int(result.exit_code), "version": result.version, "requests": result.requests,
            "malformed": result.malformed, "findings": result.findings, "page": result.page}
