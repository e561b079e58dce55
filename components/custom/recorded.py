"""What the pipeline's nodes record in the metadata store, by name: their ids, the keys of
the artifacts they read and write, and the custom properties this package sets on them.
The components take their names from here, and what reads them back (the run report,
`history`, `lineage`) finds them here, without TFX or TensorFlow: those commands answer
in a fraction of a second instead of the six TensorFlow takes to load. Properties that
only the component itself reads stay in its module.

TFX's own keys are TFX's (`tfx.types.standard_component_specs`, its Evaluator's
`ARTIFACT_PROPERTY_BLESSED_KEY`): tests/components/custom/test_recorded.py fails when TFX
renames one.
"""


class NodeId:
    """Ids of the nodes other code names: the run report (`pipeline.inspect.run_report`)
    reads their outputs."""

    WINDOW = "SpanWindow"
    EXAMPLE_GEN = "ImportExampleGen"
    STATISTICS_GEN = "StatisticsGen"
    EXAMPLE_VALIDATOR = "ExampleValidator"
    DATA_GATE = "DataGate"
    BASELINE = "ServingBaseline"
    TRANSFORM = "Transform"
    TRAINER = "Trainer"
    EVALUATOR = "Evaluator"
    SERVING_CHECK = "ServingCheck"
    SHADOW_CHECK = "ShadowCheck"
    PUSHER = "Pusher"


# TFX's keys of the standard components' inputs and outputs.
EXAMPLES_KEY = "examples"
STATISTICS_KEY = "statistics"
SCHEMA_KEY = "schema"
ANOMALIES_KEY = "anomalies"
TRANSFORM_GRAPH_KEY = "transform_graph"
BASE_MODEL_KEY = "base_model"
MODEL_KEY = "model"
MODEL_RUN_KEY = "model_run"
EVALUATION_KEY = "evaluation"
BLESSING_KEY = "blessing"
MODEL_BLESSING_KEY = "model_blessing"
PUSHED_MODEL_KEY = "pushed_model"

# 1 on a blessing that lets a model through, as TFX's Evaluator sets it; the data gate's
# verdict and the anomalies' per-split map use the same name.
BLESSED_PROPERTY = "blessed"
# A candidate's fate (`components.support.registry.Fate`), on the checks' blessings and
# the Pusher's output.
FATE_PROPERTY = "fate"

# SpanWindow: the numbers of the spans the run used (a `String` artifact).
SPANS_USED_KEY = "spans_used"
# ImportExampleGen: each split's files, relative to the data root (JSON).
SOURCE_FILES_PROPERTY = "source_files"
# The data gate's verdict (an artifact of its own), its report and each span's findings.
VERDICT_KEY = "verdict"
REPORT_PROPERTY = "report"
SPAN_CHECKS_PROPERTY = "span_checks"
# In window mode, the newest training span's split, checked against the spans before it.
PREVIOUS_SPAN_SPLIT = "train_1"
# ServingBaseline's model: the version it copied, or `registry.NOTHING_SERVES`; the
# Pusher's output: the version requests without a version get after the push (a pin keeps it).
SERVING_PROPERTY = "serving_version"
# The Evaluator's headline metrics over all examples (JSON: name -> value), on its evaluation.
METRICS_PROPERTY = "overall_metrics"
# The serving check's and the shadow check's findings, on their blessings.
SERVING_CHECK_PROPERTY = "serving_check"
SHADOW_CHECK_PROPERTY = "shadow_check"
SHADOW_MEASURES_PROPERTY = "shadow_measures"
# The Pusher's output: pushed or not, where to, which version.
PUSHED_PROPERTY = "pushed"
DESTINATION_PROPERTY = "pushed_destination"
VERSION_PROPERTY = "pushed_version"
# The Pusher's output: the version requests without a version got before the push.
REPLACED_PROPERTY = "replaced_version"
# The Pusher's output: why a candidate that would have served awaits approval instead.
HELD_PROPERTY = "held_because"
# The Pusher's output: the version a pin or rollback keeps serving after the push, if any.
PINNED_PROPERTY = "pinned_version"
