"""TFX's Evaluator, with the serving baseline (`components.custom.baseline`) left out when
it holds no model: before any version serves, the candidate is judged by the absolute
thresholds alone, as TFX's Evaluator does when given no baseline. Its headline metrics
are recorded on its evaluation (`recorded.METRICS_PROPERTY`), where the run report,
`history` and `lineage` read them without loading TFMA, as Vertex's console shows them."""

import json
from typing import Any, Dict, List

from tfx import types
from tfx.components.evaluator import executor as tfx_evaluator
from tfx.dsl.components.base import executor_spec
from tfx.types import standard_component_specs

from components.custom import baseline, recorded
from components.support import evaluation

BASELINE_KEY = standard_component_specs.BASELINE_MODEL_KEY


class Executor(tfx_evaluator.Executor):
    def Do(self, input_dict: Dict[str, List[types.Artifact]], output_dict: Dict[str, List[types.Artifact]],
           exec_properties: Dict[str, Any]) -> None:
        if not all(baseline.holds_a_model(model) for model in input_dict.get(BASELINE_KEY, [])):
            input_dict = {key: value for key, value in input_dict.items() if key != BASELINE_KEY}
        super().Do(input_dict, output_dict, exec_properties)
        for output in output_dict.get(recorded.EVALUATION_KEY, []):
            output.set_string_custom_property(recorded.METRICS_PROPERTY,
                                              json.dumps(evaluation.overall(output.uri), sort_keys=True))


def executor() -> executor_spec.BeamExecutorSpec:
    """The Evaluator node's executor spec (its Beam options are set on the node after)."""
    return executor_spec.BeamExecutorSpec(Executor)
