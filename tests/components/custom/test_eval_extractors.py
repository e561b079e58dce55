"""The Evaluator's extractors: the columns the eval config reads, and the same metrics as
TFMA's own extractors from fewer columns."""

import importlib

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
import tensorflow_model_analysis as tfma
from tensorflow_model_analysis import constants
from tensorflow_model_analysis.proto import config_pb2

from components.custom import eval_extractors
from components.custom.recorded import NodeId
from components.model import features
from pipeline import config
from pipeline import pipeline as pipeline_lib
from pipeline.run import local_runner

METRICS = ("ExampleCount", "BinaryAccuracy", "AUC", "Calibration")


def _config(**model_spec) -> config_pb2.EvalConfig:
    return config_pb2.EvalConfig(
        model_specs=[config_pb2.ModelSpec(prediction_key="probability", label_key="big_tip", **model_spec)],
        slicing_specs=[config_pb2.SlicingSpec(), config_pb2.SlicingSpec(feature_keys=["trip_start_hour"])],
        metrics_specs=[config_pb2.MetricsSpec(metrics=[config_pb2.MetricConfig(class_name=n) for n in METRICS])],
    )


def _column(values, arrow_type) -> pa.Array:
    return pa.array([[value] for value in values], type=pa.list_(arrow_type))


def _batch(rows: int = 300) -> pa.RecordBatch:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, rows)
    return pa.RecordBatch.from_arrays(
        [
            _column(labels.tolist(), pa.int64()),
            _column(np.clip(labels * 0.6 + rng.random(rows) * 0.4, 0, 1).tolist(), pa.float32()),
            _column(rng.integers(0, 3, rows).tolist(), pa.int64()),
            _column(rng.random(rows).tolist(), pa.float32()),
            _column([b"company-%d" % (i % 5) for i in range(rows)], pa.binary()),
            _column([b"example-%d" % i for i in range(rows)], pa.binary()),
        ],
        ["big_tip", "probability", "trip_start_hour", "fare", "company", constants.ARROW_INPUT_COLUMN],
    )


def test_the_pipelines_config_reads_its_label_and_slice_features_only(tmp_path):
    run_config = config.RunConfig(output_root=str(tmp_path)).resolved()
    evaluator = next(
        component
        for component in local_runner.build_pipeline(run_config, ["span-1"]).components
        if component.id == NodeId.EVALUATOR
    )
    assert evaluator.exec_properties["module_path"] == eval_extractors.__name__
    assert callable(importlib.import_module(evaluator.exec_properties["module_path"]).custom_extractors)

    eval_config = pipeline_lib._eval_config(config.EvaluationConfig())
    names = eval_extractors.columns_read(eval_config)
    read = {feature.name for feature in features.FEATURES if feature.name in names}
    assert read == set(features.SLICE_FEATURES)
    assert features.LABEL_KEY in names


def test_a_feature_named_in_a_metrics_settings_or_slice_values_is_kept():
    eval_config = _config()
    eval_config.metrics_specs[0].metrics.add(class_name="NDCG", config='{"gain_key": "fare"}')
    # TFMA also reads a metric's settings written without their outer braces.
    eval_config.metrics_specs[0].metrics.add(class_name="NDCG", config='"gain_key": "trip_miles"')
    eval_config.slicing_specs.add(feature_values={"company": "company-1"})
    names = eval_extractors.columns_read(eval_config)
    assert {"fare", "trip_miles", "company", "trip_start_hour", "big_tip"} <= names
    assert "trip_seconds" not in names


@pytest.mark.parametrize("reads_any", ["sql", "module", "preprocessing", "signature"])
def test_a_config_that_can_read_unnamed_features_keeps_every_column(reads_any):
    eval_config = _config(preprocessing_function_names=["transform_features"] if reads_any == "preprocessing" else [],
                          signature_name="by_features" if reads_any == "signature" else "serving_default")
    if reads_any == "sql":
        eval_config.slicing_specs.add(slice_keys_sql="SELECT STRUCT(company) FROM example")
    if reads_any == "module":
        eval_config.metrics_specs[0].metrics.add(class_name="MyMetric", module="my_metrics")
    assert eval_extractors.columns_read(eval_config) is None
    stages = [e.stage_name for e in eval_extractors.custom_extractors(None, eval_config, None)]
    assert eval_extractors.STAGE_NAME not in stages


def test_no_eval_config_keeps_every_column():
    stages = [e.stage_name for e in eval_extractors.custom_extractors(None, None, None)]
    assert stages and eval_extractors.STAGE_NAME not in stages


def test_keep_columns_keeps_the_named_columns_and_the_serialized_examples():
    batch = _batch(10)
    extracts = {constants.ARROW_RECORD_BATCH_KEY: batch, "other": 1}
    kept = eval_extractors.keep_columns(extracts, frozenset({"big_tip", "trip_start_hour", "not_a_column"}))
    cut = kept[constants.ARROW_RECORD_BATCH_KEY]
    assert cut.schema.names == ["big_tip", "trip_start_hour", constants.ARROW_INPUT_COLUMN]
    assert cut.column(0).equals(batch.column(0)) and cut.column(2).equals(batch.column(5))
    assert kept["other"] == 1 and extracts[constants.ARROW_RECORD_BATCH_KEY] is batch
    every = frozenset(batch.schema.names)
    assert eval_extractors.keep_columns(extracts, every) is extracts
    assert eval_extractors.keep_columns({"other": 1}, every) == {"other": 1}


def _metrics(extractors, output_path: str) -> dict:
    with beam.Pipeline() as pipeline:
        _ = (
            pipeline
            | beam.Create([_batch()])
            | tfma.ExtractEvaluateAndWriteResults(eval_config=_config(), extractors=extractors, output_path=output_path)
        )
    return {
        str(result.slice_key): sorted((str(entry.key), str(entry.value)) for entry in result.metric_keys_and_values)
        for result in tfma.load_metrics(output_path)
    }


@pytest.mark.timeout(300)
def test_the_same_metrics_as_tfmas_own_extractors(tmp_path):
    extractors = eval_extractors.custom_extractors(None, _config(), None)
    assert extractors[0].stage_name == eval_extractors.STAGE_NAME
    ours = _metrics(extractors, str(tmp_path / "ours"))
    theirs = _metrics(None, str(tmp_path / "theirs"))
    assert len(ours) == 4  # overall and three hours
    assert all(len(values) >= len(METRICS) for values in ours.values())
    assert ours == theirs
