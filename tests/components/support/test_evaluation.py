"""The Evaluator's output read back: why a candidate was not blessed, in words."""

import tensorflow_model_analysis as tfma
from google.protobuf import text_format
from tensorflow_model_analysis.proto import validation_result_pb2

from components.support import evaluation


def _failure(text: str) -> validation_result_pb2.ValidationFailure:
    return text_format.Parse(text, validation_result_pb2.ValidationFailure())


def test_a_missed_floor_and_a_missed_change_from_the_baseline_are_said_with_their_values():
    floor = _failure("""metric_key { name: "auc" }
        metric_threshold { value_threshold { lower_bound { value: 0.99 } } }
        metric_value { double_value { value: 0.953346 } }""")
    assert evaluation._missed(floor, "Overall") == "auc 0.9533 on Overall, where it must be at least 0.99"
    change = _failure(f"""metric_key {{ name: "auc" is_diff: true }}
        metric_threshold {{ change_threshold {{ absolute {{ value: -0.01 }}
                                               direction: {tfma.MetricDirection.HIGHER_IS_BETTER} }} }}
        metric_value {{ double_value {{ value: -0.0312 }} }}
        message: "worse than the baseline" """)
    assert evaluation._missed(change, "trip_start_hour=3") == (
        "auc change from the baseline -0.0312 on trip_start_hour=3, where it must be at least -0.01 "
        "(worse than the baseline)")
