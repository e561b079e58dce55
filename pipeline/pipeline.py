"""The one pipeline factory. It reads no flags, files or environment: every path and
setting is an argument, so LocalDagRunner and KubeflowV2DagRunner build the same DAG."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Optional, Tuple

from tensorflow_model_analysis import constants as tfma_constants
from tensorflow_model_analysis.proto import config_pb2 as tfma_config
from tfx.components.evaluator.component import Evaluator
from tfx.components.example_validator.component import ExampleValidator
from tfx.components.schema_gen.component import SchemaGen
from tfx.components.statistics_gen.component import StatisticsGen
from tfx.components.trainer.component import Trainer
from tfx.components.transform.component import Transform
from tfx.dsl.experimental.conditionals.conditional import Cond
from tfx.orchestration import pipeline as tfx_pipeline
from tfx.proto import example_gen_pb2, trainer_pb2, transform_pb2

from components.custom import baseline, gate, ingest, recorded, serving_check, shadow_check, statistics, window
from components.custom import evaluator as evaluator_lib
from components.custom import pusher as staged_pusher
from components.custom.recorded import NodeId
from components.model import SCHEMA_FILE, features
from components.model.trainer import export
from components.support import spans
from pipeline.config import MONITOR_MAX_MALFORMED, EvaluationConfig, Settings

PREPROCESSING_FN = "components.model.preprocessing.preprocessing_fn"
RUN_FN = "components.model.trainer.run.run_fn"
# The parameter (or custom_config key) of every cached node that runs this package's code:
# the package's fingerprint, so an edit to that code re-runs the node and what follows
# (TFX's cache key names an executor's class, not its code).
CODE_VERSION = "code_version"

TRAIN_SPLIT, EVAL_SPLIT = "train", "eval"


AUC_THRESHOLDS = 1000
# The Evaluator's `custom_extractors` (TFX's hook), by module path.
EVAL_EXTRACTORS_MODULE = "components.custom.eval_extractors"


def _eval_config(evaluation: EvaluationConfig) -> tfma_config.EvalConfig:
    """The Evaluator's config, built from TFMA's protos: TFMA 0.52 (TFX 1.21) no longer
    exports every config class at its top level; the protos are the same on both stacks."""
    auc_threshold = tfma_config.MetricThreshold(
        value_threshold=tfma_config.GenericValueThreshold(lower_bound={"value": evaluation.min_auc}),
        change_threshold=tfma_config.GenericChangeThreshold(
            direction=tfma_config.MetricDirection.HIGHER_IS_BETTER,
            absolute={"value": -evaluation.max_auc_drop},
        ),
    )
    return tfma_config.EvalConfig(
        model_specs=[
            tfma_config.ModelSpec(
                # Said, not detected: detection loads the model once more, as Keras.
                model_type=tfma_constants.TF_GENERIC,
                signature_name=export.SERVING_SIGNATURE,
                prediction_key=export.PROBABILITY_KEY,
                label_key=features.LABEL_KEY,
            )
        ],
        slicing_specs=[tfma_config.SlicingSpec()]
        + [tfma_config.SlicingSpec(feature_keys=[name]) for name in features.SLICE_FEATURES],
        metrics_specs=[
            tfma_config.MetricsSpec(
                metrics=[
                    tfma_config.MetricConfig(class_name="ExampleCount"),
                    tfma_config.MetricConfig(class_name="BinaryAccuracy"),
                    tfma_config.MetricConfig(class_name="Calibration"),
                    # The gate applies to the overall slice; small slices are reported only.
                    tfma_config.MetricConfig(
                        class_name="AUC",
                        # TFMA's default of 10,000 thresholds costs ~1 s per run in histogram
                        # work; 1,000 keeps the AUC within ~1e-4, far inside the gate's margin.
                        config=json.dumps({"num_thresholds": AUC_THRESHOLDS}),
                        per_slice_thresholds=[
                            tfma_config.PerSliceMetricThreshold(
                                slicing_specs=[tfma_config.SlicingSpec()], threshold=auc_threshold
                            )
                        ],
                    ),
                ],
            )
        ],
    )


@dataclasses.dataclass(frozen=True)
class Splits:
    """Which ExampleGen splits are trained on and which one is evaluated on."""

    train: Tuple[str, ...]
    eval: str


def window_splits(window_size: Optional[int]) -> Splits:
    if window_size is None:
        return Splits(train=(TRAIN_SPLIT,), eval=EVAL_SPLIT)
    return Splits(train=tuple(spans.window_train_splits(window_size)), eval=spans.WINDOW_EVAL_SPLIT)


def _example_gen(
    data_root: str, span_window: Any, window_size: Optional[int],
    evaluation: EvaluationConfig, code_version: str,
) -> Any:
    """ImportExampleGen: the window's spans, one split each, or every span hash-split."""
    if window_size is None:
        return ingest.ImportExampleGen(
            code_version=code_version,
            input_base=data_root,
            input_config=example_gen_pb2.Input(
                splits=[example_gen_pb2.Input.Split(name=window.ALL_SPANS_SPLIT, pattern=spans.ALL_SPANS_PATTERN)]
            ),
            output_config=example_gen_pb2.Output(
                split_config=example_gen_pb2.SplitConfig(
                    splits=[
                        example_gen_pb2.SplitConfig.Split(name=TRAIN_SPLIT, hash_buckets=evaluation.train_buckets),
                        example_gen_pb2.SplitConfig.Split(name=EVAL_SPLIT, hash_buckets=evaluation.eval_buckets),
                    ]
                )
            ),
        )
    # One input split per span, chosen when the pipeline runs; ExampleGen keeps input
    # splits as they are.
    return ingest.ImportExampleGen(
        code_version=code_version,
        input_base=data_root,
        input_config=span_window.outputs[window.INPUT_CONFIG_KEY].future()[0].value,
        # Empty: keep the input splits (ExampleGen cannot inspect a runtime input_config).
        output_config=example_gen_pb2.Output(),
    )


@dataclasses.dataclass(frozen=True)
class DataChecks:
    """The nodes that ingest the spans and decide whether their data may be trained on."""

    span_window: Any
    example_gen: Any
    statistics_gen: Any
    inferred_schema: Any
    schema: Any
    example_validator: Any
    data_gate: Any

    def nodes(self) -> list:
        return [self.span_window, self.example_gen, self.statistics_gen, self.inferred_schema, self.schema,
                self.example_validator, self.data_gate]

    def is_valid(self) -> Any:
        """The data gate's verdict, as the condition of every node after it."""
        verdict = self.data_gate.outputs[gate.VERDICT_KEY].future()[0]
        return verdict.custom_property(gate.BLESSED_PROPERTY) == 1


def _data_checks(
    data_root: str, schema_path: str, schema_digest: str, window_size: Optional[int], span_listing: str,
    evaluation: EvaluationConfig, serving_model_dir: str, code_version: str, inputs: str, static_inputs: str,
) -> DataChecks:
    """SpanWindow → ImportExampleGen → StatisticsGen → the schemas → ExampleValidator → DataGate."""
    span_window = window.SpanWindow(
        data_root=data_root, window_size=window_size or 0, listing=span_listing,
        # No listing: a compiled pipeline, where nothing decides before the DAG runs whether
        # a job has anything new to train on; the window asks the model's record.
        model_dir=serving_model_dir if not span_listing else "",
        inputs=inputs, static_inputs=static_inputs,
        # A compiled job checks its image's code against this; a local run is its own code.
        code_version=code_version if not span_listing else "",
    ).with_id(NodeId.WINDOW)
    example_gen = _example_gen(data_root, span_window, window_size, evaluation, code_version)
    statistics_gen = StatisticsGen(examples=example_gen.outputs[recorded.EXAMPLES_KEY])
    statistics_gen.executor_spec = statistics.executor()
    inferred_schema = SchemaGen(
        statistics=statistics_gen.outputs[recorded.STATISTICS_KEY], infer_feature_shape=True
    ).with_id("InferredSchemaGen")
    # The node keeps TFX's id: a store's history of schema imports stays one node's.
    schema = ingest.ImportSchema(
        schema_file=f"{schema_path.rstrip('/')}/{SCHEMA_FILE}", digest=schema_digest,
        code_version=code_version,
    ).with_id("ImportSchemaGen")
    example_validator = ExampleValidator(
        statistics=statistics_gen.outputs[recorded.STATISTICS_KEY], schema=schema.outputs[recorded.SCHEMA_KEY]
    ).with_id(NodeId.EXAMPLE_VALIDATOR)
    data_gate = gate.DataGate(
        statistics=statistics_gen.outputs[recorded.STATISTICS_KEY],
        schema=schema.outputs[recorded.SCHEMA_KEY],
        anomalies=example_validator.outputs[recorded.ANOMALIES_KEY],
        # By value, not as an artifact: SpanWindow runs in every job (its cache is off),
        # so its artifacts are new each time, and on Vertex a new input artifact misses
        # the cache for the gate and everything after it, even when the window did not move.
        spans_used=span_window.outputs[window.SPANS_KEY].future()[0].value,
        fresh=span_window.outputs[window.FRESH_KEY].future()[0].value,
        data_root=data_root,
        code_version=code_version,
    ).with_id(NodeId.DATA_GATE)
    return DataChecks(span_window, example_gen, statistics_gen, inferred_schema, schema, example_validator, data_gate)


@dataclasses.dataclass(frozen=True)
class Training:
    """The nodes that transform, train and evaluate against the serving model."""

    transform: Any
    baseline: Any
    trainer: Any
    evaluator: Any

    def nodes(self) -> list:
        return [self.transform, self.baseline, self.trainer, self.evaluator]


def _training(data: DataChecks, settings: Settings, code_version: str, serving_model_dir: str,
              serving: str) -> Training:
    """Transform → Trainer (warm-started from the serving model) → Evaluator against it."""
    examples, schema = data.example_gen.outputs[recorded.EXAMPLES_KEY], data.schema.outputs[recorded.SCHEMA_KEY]
    splits = window_splits(settings.window_size)
    transform = Transform(
        examples=examples,
        schema=schema,
        preprocessing_fn=PREPROCESSING_FN,
        # Graph-mode tracing: several times faster to analyze than tracing the
        # preprocessing_fn as a TF2 function, and the output loads the same way.
        force_tf_compat_v1=True,
        # StatisticsGen already computes the raw statistics the data gate uses.
        disable_statistics=True,
        # The Trainer applies the Transform graph to raw examples itself (once,
        # then cached): writing a transformed copy of the data would cost more.
        materialize=False,
        # Transform's analyzer cache is reused only for input artifacts it analyzed
        # before; every run's ExampleGen output is a new artifact, so it was written
        # (0.4 s of Beam stages on data/) and never read.
        disable_analyzer_cache=True,
        splits_config=transform_pb2.SplitsConfig(
            analyze=list(splits.train), transform=list(splits.train) + [splits.eval]
        ),
        custom_config={CODE_VERSION: code_version},
    ).with_id(NodeId.TRANSFORM)
    # The version that serves, pinned or following: what the local run planned with, or
    # in a compiled pipeline what SpanWindow read on this job (see components.custom.baseline).
    serving_baseline = baseline.ServingBaseline(
        model_dir=serving_model_dir,
        serving=serving or data.span_window.outputs[window.SERVING_KEY].future()[0].value,
    ).with_id(NodeId.BASELINE)
    trainer = Trainer(
        run_fn=RUN_FN,
        examples=examples,
        transform_graph=transform.outputs[recorded.TRANSFORM_GRAPH_KEY],
        schema=schema,
        base_model=serving_baseline.outputs[baseline.MODEL_KEY] if settings.warm_start else None,
        train_args=trainer_pb2.TrainArgs(splits=list(splits.train)),
        eval_args=trainer_pb2.EvalArgs(splits=[splits.eval]),
        custom_config={
            "train": dataclasses.asdict(settings.train),
            "export": dataclasses.asdict(settings.export),
            CODE_VERSION: code_version,
        },
    ).with_id(NodeId.TRAINER)
    evaluator = Evaluator(
        examples=examples,
        model=trainer.outputs[recorded.MODEL_KEY],
        baseline_model=serving_baseline.outputs[baseline.MODEL_KEY],
        example_splits=[splits.eval],
        eval_config=_eval_config(settings.evaluation),
        # TFMA's extractors, reading only the example columns the eval config names.
        module_path=EVAL_EXTRACTORS_MODULE,
    ).with_id(NodeId.EVALUATOR)
    # TFX's, leaving out a baseline that holds no model (nothing served yet).
    evaluator.executor_spec = evaluator_lib.executor()
    return Training(transform, serving_baseline, trainer, evaluator)


def _pushing(data: DataChecks, training: Training, serving_model_dir: str, settings: Settings,
             code_version: str) -> list:
    """ServingCheck (the blessed model, served as TF Serving serves it) → ShadowCheck (it
    and the serving model on logged traffic) → Pusher, which writes each version's model
    card from the data checks' and the evaluation's outputs."""
    model = training.trainer.outputs[recorded.MODEL_KEY]
    checked = serving_check.ServingCheck(
        model=model,
        model_blessing=training.evaluator.outputs[recorded.BLESSING_KEY],
        latency_budget_ms=settings.latency_budget_ms,
        code_version=code_version,
    ).with_id(NodeId.SERVING_CHECK)
    shadow = settings.shadow
    shadowed = shadow_check.ShadowCheck(
        model=model,
        model_blessing=checked.outputs[serving_check.BLESSING_KEY],
        baseline=training.baseline.outputs[baseline.MODEL_KEY],
        requests=shadow.shadow_requests,
        sample_size=shadow.shadow_sample_size,
        max_flip_rate=shadow.max_flip_rate,
        max_score_shift=shadow.max_score_shift,
        max_malformed=MONITOR_MAX_MALFORMED,
        code_version=code_version,
    ).with_id(NodeId.SHADOW_CHECK)
    pusher = staged_pusher.StagedPusher(
        model=model,
        model_blessing=shadowed.outputs[shadow_check.BLESSING_KEY],
        serving_model_dir=serving_model_dir,
        keep_versions=settings.keep_versions,
        examples=data.example_gen.outputs[recorded.EXAMPLES_KEY],
        statistics=data.statistics_gen.outputs[recorded.STATISTICS_KEY],
        evaluation=training.evaluator.outputs[recorded.EVALUATION_KEY],
        schema=data.schema.outputs[recorded.SCHEMA_KEY],
        data_verdict=data.data_gate.outputs[gate.VERDICT_KEY],
        baseline=training.baseline.outputs[baseline.MODEL_KEY],
        code_version=code_version,
        # By value, as the gate takes them (see `_data_checks`).
        inputs=data.span_window.outputs[window.INPUTS_KEY].future()[0].value,
        spans_used=data.span_window.outputs[window.SPANS_KEY].future()[0].value,
        promotion_mode=settings.promotion,
    ).with_id(NodeId.PUSHER)
    return [checked, shadowed, pusher]


def create_pipeline(
    *,
    settings: Settings,
    pipeline_root: str,
    data_root: str,
    schema_path: str,
    schema_digest: str,
    serving_model_dir: str,
    code_version: str,
    static_inputs: str = "",
    span_listing: str = "",
    inputs: str = "",
    serving: str = "",
    metadata_connection_config: Optional[Any] = None,
    enable_cache: bool = True,
) -> tfx_pipeline.Pipeline:
    """The full DAG, from ImportExampleGen to Pusher.

    Args:
      settings: What the pipeline does (`pipeline.config.Settings`), each setting
        declared once with its default and its help.
      pipeline_root: Where component outputs are written (local path or gs://).
      data_root: Folder of `span-<N>/` folders of GZIP TFRecords of tf.Example.
      schema_path: Folder holding the curated `schema.pbtxt` imported as the contract.
      schema_digest: SHA-256 of that file's bytes: the import's cache key, so an edited
        schema is imported (and the data checked against it) on the next run.
      serving_model_dir: Pusher's destination, `<serving>/<model name>`; versions go below.
      code_version: Fingerprint of this package's code, given to every cached node that
        runs it (`CODE_VERSION`): an edit re-runs that node and what follows.
      static_inputs: The code's and the model-changing settings' part of each candidate's
        inputs (`pipeline.config.static_inputs`), completed by SpanWindow when `inputs`
        is not given (a compiled pipeline).
      span_listing: The span folders found when the run was planned ("span-12,span-13"), the
        SpanWindow node's cache key; "" when unknown (a compiled pipeline, whose
        runner then turns that node's cache off).
      inputs: The candidate's inputs as a local run planned them
        (`components.support.registry.inputs_digest`); "" in a compiled pipeline.
      serving: The version serving when a local run was planned, the baseline's
        (`components.custom.baseline`); "" in a compiled pipeline (SpanWindow reads it).
      metadata_connection_config: MLMD connection; None lets the orchestrator choose.
      enable_cache: Reuse outputs of executions whose inputs did not change.
    """
    data = _data_checks(data_root, schema_path, schema_digest, settings.window_size, span_listing,
                        settings.evaluation, serving_model_dir, code_version, inputs, static_inputs)
    with Cond(data.is_valid()):
        training = _training(data, settings, code_version, serving_model_dir, serving)
        pushing = _pushing(data, training, serving_model_dir, settings, code_version)
    if settings.parallel_beam_args:
        training.evaluator.with_beam_pipeline_args(list(settings.parallel_beam_args))
    if settings.ingest_beam_args:
        data.example_gen.with_beam_pipeline_args(list(settings.ingest_beam_args))

    return tfx_pipeline.Pipeline(
        pipeline_name=settings.pipeline_name,
        pipeline_root=pipeline_root,
        components=[*data.nodes(), *training.nodes(), *pushing],
        enable_cache=enable_cache,
        metadata_connection_config=metadata_connection_config,
        beam_pipeline_args=list(settings.beam_args),
    )
