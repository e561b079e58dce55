"""`taxi-pipeline predict`: batch scoring of tf.Example TFRecords with a pushed model.

One Beam pipeline: read the records (GZIP by a `.gz` name, else uncompressed; any size:
they stream), score them with tfx_bsl's
`RunInference` on the model's `serving_default` signature (batched by Beam), write
TF Serving's `PredictionLog`s, and a CSV when asked. The same command runs on Dataflow
with Dataflow's Beam options after `--` (the model and files then on gs://).

Every input file is read through before scoring (`check_inputs`): a truncated GZIP
file, which Beam's reader would score in part without a word, stops the command naming
it. A local output folder is written whole or not at all: Beam writes into a staging folder
beside it, which is renamed into place once every shard is written. On gs:// Beam's own
temporary files make each shard whole, and the folder fills as they finish.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from typing import Dict, Sequence

from components.model.trainer.settings import CLASS_KEY, EXAMPLES_INPUT, PROBABILITY_KEY, SERVING_SIGNATURE
from components.support import serving_config

LOGS_PREFIX = "predictions"
CSV_PREFIX = "scores"


@dataclasses.dataclass(frozen=True)
class PredictConfig:
    model: str  # "serving" (what TF Serving serves) or a version number
    input_glob: str
    output_dir: str
    serving_dir: str
    model_name: str
    csv: bool = False
    # A feature copied into the CSV beside each score, to join on (e.g. a trip id).
    key_feature: str = ""
    beam_args: Sequence[str] = ()


def model_path(serving_dir: str, model_name: str, model: str) -> str:
    """The version folder `model` names: `serving` is the one TF Serving serves (a pin
    included), else a version number."""
    model_dir = os.path.join(serving_dir, model_name)
    current = serving_config.state(serving_dir, model_name)
    if not current.on_disk:
        raise ValueError(f"no model versions in {model_dir}: run the pipeline first")
    if model == "serving":
        return os.path.join(model_dir, str(current.require_serving(model_dir)))
    if not model.isdigit() or int(model) not in current.on_disk:
        raise ValueError(f"--model must be 'serving' or a version in {model_dir} "
                         f"({', '.join(map(str, current.on_disk))}), got {model!r}")
    return os.path.join(model_dir, model)


class BadInputError(ValueError):
    """An input file that is not whole: named, with what to do."""


def check_inputs(paths: Sequence[str]) -> None:
    """Reads every input file through, in parallel (one thread per core), as Beam reads
    it: GZIP by a `.gz` name, else uncompressed. Raises BadInputError naming the first
    file that is not whole: a truncated GZIP file would otherwise be scored in part,
    silently."""
    from concurrent.futures import ThreadPoolExecutor

    from pipeline.run import preflight

    def problem(path: str) -> str:
        compressed = path.endswith(".gz")
        count, reason = preflight.read_through(path, "GZIP" if compressed else "")
        if reason:
            return f"input file {path} is not a readable TFRecord file (damaged after {count} records: {reason})"
        cut = preflight.gzip_problem(path) if compressed else ""
        return f"input file {path} {cut} (after {count} whole records)" if cut else ""

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        found = [text for text in pool.map(problem, paths) if text]
    if found:
        more = f" ({len(found) - 1} more in the log)" if len(found) > 1 else ""
        for text in found:
            logging.error("%s", text)
        raise BadInputError(f"{found[0]}{more}: copy it again or leave it out of --input, then score again "
                            "(nothing was written to --output)")


def score_of(log) -> float:
    """The probability in one `PredictionLog` (one example per log)."""
    return float(log.predict_log.response.outputs[PROBABILITY_KEY].float_val[0])


def _csv_row(log, key_feature: str) -> str:
    import tensorflow as tf

    outputs = log.predict_log.response.outputs
    row = [f"{score_of(log):.6f}", str(int(outputs[CLASS_KEY].int64_val[0]))]
    if key_feature:
        example = tf.train.Example.FromString(log.predict_log.request.inputs[EXAMPLES_INPUT].string_val[0])
        feature = example.features.feature.get(key_feature)
        kind = feature.WhichOneof("kind") if feature is not None else None
        values = list(getattr(feature, kind).value) if kind else []
        value = values[0] if values else ""
        row.insert(0, value.decode() if isinstance(value, bytes) else str(value))
    return ",".join(row)


def run(config: PredictConfig) -> str:
    """Scores `config.input_glob` into `config.output_dir`; returns the model path used."""
    import apache_beam as beam
    import tensorflow as tf
    from apache_beam.options.pipeline_options import PipelineOptions
    from tensorflow_serving.apis import prediction_log_pb2
    from tfx_bsl.public.beam.run_inference import RunInference
    from tfx_bsl.public.proto import model_spec_pb2

    if config.key_feature and not config.csv:
        raise ValueError("--key names the CSV's join column: it needs --csv")
    path = model_path(config.serving_dir, config.model_name, config.model)
    inputs = sorted(tf.io.gfile.glob(config.input_glob))
    if not inputs:
        raise ValueError(f"no files match --input {config.input_glob}")
    if tf.io.gfile.exists(config.output_dir) and tf.io.gfile.listdir(config.output_dir):
        raise ValueError(f"--output {config.output_dir} is not empty: name a new folder (nothing was overwritten)")
    # Locally, Beam writes beside the output folder, renamed into place when complete
    # (on gs:// Beam's own temporary files and rename per shard do that work).
    check_inputs(inputs)
    remote = "://" in config.output_dir
    staging = config.output_dir if remote else f"{config.output_dir.rstrip('/')}.staging-{os.getpid()}"
    spec = model_spec_pb2.InferenceSpecType(
        saved_model_spec=model_spec_pb2.SavedModelSpec(model_path=path, signature_name=[SERVING_SIGNATURE])
    )
    try:
        with beam.Pipeline(options=PipelineOptions(list(config.beam_args))) as pipeline:
            logs = (
                pipeline
                | "Read" >> beam.io.ReadFromTFRecord(config.input_glob)
                | "Score" >> RunInference(spec)
            )
            _ = logs | "WriteLogs" >> beam.io.WriteToTFRecord(
                os.path.join(staging, LOGS_PREFIX), file_name_suffix=".gz",
                coder=beam.coders.ProtoCoder(prediction_log_pb2.PredictionLog),
            )
            if config.csv:
                header = ",".join(([config.key_feature] if config.key_feature else []) + [PROBABILITY_KEY, CLASS_KEY])
                _ = (
                    logs
                    | "ToCsv" >> beam.Map(_csv_row, config.key_feature)
                    | "WriteCsv" >> beam.io.WriteToText(os.path.join(staging, CSV_PREFIX), file_name_suffix=".csv",
                                                        header=header)
                )
    except BaseException:
        if not remote:
            shutil.rmtree(staging, ignore_errors=True)  # nothing half-written is left
        raise
    if not remote:
        if os.path.isdir(config.output_dir):
            os.rmdir(config.output_dir)  # empty, checked above
        shutil.move(staging, config.output_dir)
    return path


def read_scores(output_dir: str) -> Dict[bytes, float]:
    """Input example bytes -> probability, from the PredictionLogs under `output_dir`."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    files = tf.io.gfile.glob(os.path.join(output_dir, f"{LOGS_PREFIX}-*"))
    scores = {}
    for record in tf.data.TFRecordDataset(files, compression_type="GZIP"):
        log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
        scores[log.predict_log.request.inputs[EXAMPLES_INPUT].string_val[0]] = score_of(log)
    return scores
