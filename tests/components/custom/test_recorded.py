"""The names the nodes record in the metadata store, declared once without TFX, are TFX's
own and those the components write under."""

from tfx.components.evaluator import constants as evaluator_constants
from tfx.types import standard_component_specs

from components.custom import baseline, gate, recorded, serving_check, shadow_check, window

TFX_KEYS = ("EXAMPLES_KEY", "STATISTICS_KEY", "SCHEMA_KEY", "ANOMALIES_KEY", "TRANSFORM_GRAPH_KEY", "BASE_MODEL_KEY",
            "MODEL_KEY", "MODEL_RUN_KEY", "EVALUATION_KEY", "BLESSING_KEY", "MODEL_BLESSING_KEY", "PUSHED_MODEL_KEY")


def test_tfx_s_keys_and_blessed_property_are_tfx_s():
    for name in TFX_KEYS:
        assert getattr(recorded, name) == getattr(standard_component_specs, name), name
    assert recorded.BLESSED_PROPERTY == evaluator_constants.ARTIFACT_PROPERTY_BLESSED_KEY


def test_each_custom_node_writes_its_outputs_under_the_recorded_keys():
    outputs = {
        window.SpanWindow: recorded.SPANS_USED_KEY,
        gate.DataGate: recorded.VERDICT_KEY,
        baseline.ServingBaseline: recorded.MODEL_KEY,
        serving_check.ServingCheck: recorded.BLESSING_KEY,
        shadow_check.ShadowCheck: recorded.BLESSING_KEY,
    }
    for node, key in outputs.items():
        assert key in node.SPEC_CLASS.OUTPUTS, (node.__name__, sorted(node.SPEC_CLASS.OUTPUTS))
