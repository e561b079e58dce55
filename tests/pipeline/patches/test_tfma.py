"""The patches to TFMA: each example's inputs extracted once give TFMA's own, and the serving
signature called by keyword gives what it gives by position; TFMA's internals are where
they expect them."""

import contextlib
import copy
import inspect
import re
import types

import pytest

from pipeline.patches import machinery
from pipeline.patches import tfma as tfma_patches


def _metric_inputs(label: float, prediction: float):
    import numpy as np
    from tensorflow_model_analysis.metrics import metric_types

    return metric_types.StandardMetricInputs(
        labels=np.array([label]), predictions=np.array([prediction]), example_weights=None)


def test_tfma_s_internals_the_sharing_relies_on_are_where_it_expects_them():
    from tensorflow_model_analysis.metrics import binary_confusion_matrices, metric_util

    assert list(inspect.signature(metric_util.to_label_prediction_example_weight).parameters)[0] == "inputs"
    combiner = binary_confusion_matrices._BinaryConfusionMatrixCombiner
    assert "extract_label_prediction_and_weight" in inspect.signature(combiner.__init__).parameters
    assert "self._extract_label_prediction_and_weight" in inspect.getsource(combiner)


def test_an_example_s_labels_predictions_and_weights_are_computed_once_per_arguments_as_tfma_computes_them():
    import numpy as np
    from tensorflow_model_analysis.metrics import metric_util

    original = metric_util.to_label_prediction_example_weight
    calls = []

    def counting(inputs, **kwargs):
        calls.append(sorted(kwargs))
        return original(inputs, **kwargs)

    shared = tfma_patches._shared_per_example(counting)
    first, second = _metric_inputs(1.0, 0.75), _metric_inputs(0.0, 0.25)
    for inputs in (first, first, first, second, second):
        for kwargs in ({"flatten": True, "fractional_labels": True}, {"allow_none": True, "class_weights": {}}):
            got, expected = list(shared(inputs, **kwargs)), list(original(inputs, **kwargs))
            assert len(got) == len(expected) and got
            for got_row, expected_row in zip(got, expected):
                for got_array, expected_array in zip(got_row, expected_row):
                    assert got_array.tolist() == expected_array.tolist()
                    assert got_array.dtype == expected_array.dtype
    # Two argument sets, two examples (the same example again: no new call).
    assert len(calls) == 4
    # Each caller gets its own arrays (TFMA's CategoricalCrossEntropy writes into its
    # predictions): what one caller does to them, the next caller and the inputs never see.
    label, prediction, _ = next(shared(second, allow_none=True, class_weights={}))
    assert not np.shares_memory(prediction, second.prediction)
    label[...], prediction[...] = 7.0, 7.0
    assert [row[:2] for row in shared(second, allow_none=True, class_weights={})] == [([0.0], [0.25])]
    assert (second.label.tolist(), second.prediction.tolist()) == ([0.0], [0.25])


def test_arguments_that_cannot_be_hashed_tell_the_results_apart():
    import numpy as np
    from tensorflow_model_analysis.metrics import metric_types, metric_util
    from tensorflow_model_analysis.proto import config_pb2

    shared = tfma_patches._shared_per_example(metric_util.to_label_prediction_example_weight)
    inputs = metric_types.StandardMetricInputs(
        labels={"a": np.array([1.0]), "b": np.array([0.0])}, predictions=np.array([0.5]), example_weights=None)
    by_a, by_b = (config_pb2.EvalConfig(model_specs=[config_pb2.ModelSpec(label_key=key)]) for key in "ab")
    for _ in range(2):
        assert [row[0].tolist() for row in shared(inputs, eval_config=by_a)] == [[1.0]]
        assert [row[0].tolist() for row in shared(inputs, eval_config=by_b)] == [[0.0]]


def test_each_thread_keeps_its_own_last_example():
    import threading

    seen = []
    shared = tfma_patches._shared_per_example(lambda inputs: (seen.append(inputs) or [(inputs,)]))
    first, second = object(), object()
    assert list(shared(first)) == [(first,)]
    other = threading.Thread(target=lambda: list(shared(second)))
    other.start()
    other.join()
    assert list(shared(first)) == [(first,)]
    assert seen == [first, second]


def test_a_confusion_matrix_combiner_built_with_tfma_s_default_gets_the_shared_function():
    from tensorflow_model_analysis.metrics import binary_confusion_matrices, metric_util

    original = metric_util.to_label_prediction_example_weight

    def combiner(**kwargs):
        return binary_confusion_matrices._BinaryConfusionMatrixCombiner(
            key=None, eval_config=None, thresholds=[0.5], example_id_key=None, example_ids_count=0,
            aggregation_type=None, class_weights=None, example_weighted=False, enable_fractional_labels=True,
            **kwargs)

    own = lambda *args, **kwargs: iter(())  # noqa: E731
    with machinery.patched(tfma_patches.patches()):
        shared = metric_util.to_label_prediction_example_weight
        assert shared is not original and shared.__wrapped__ is original
        assert combiner(extract_label_prediction_and_weight=original)._extract_label_prediction_and_weight is shared
        assert combiner(extract_label_prediction_and_weight=own)._extract_label_prediction_and_weight is own
    assert metric_util.to_label_prediction_example_weight is original
    assert combiner(extract_label_prediction_and_weight=original)._extract_label_prediction_and_weight is original


def test_tfma_calls_the_serving_signature_by_position_through_get_callable():
    from tensorflow_model_analysis.utils import model_util

    source = inspect.getsource(model_util)
    assert "get_callable(model, signature_name, required)" in source
    assert "signature(tf.constant(inputs, dtype=tf.string))" in source


class _Recording:
    """A function of one keyword input that records how it was called."""

    structured_input_signature = ((), {"examples": "spec"})
    structured_outputs = {"probability": "spec"}

    def __init__(self):
        self.calls = []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return "scores"


def test_a_signature_of_one_input_is_called_by_its_name_when_given_it_by_position():
    from tensorflow_model_analysis.utils import model_util

    function = _Recording()
    two_inputs = types.SimpleNamespace(structured_input_signature=((), {"a": 1, "b": 2}))
    by_position = types.SimpleNamespace(structured_input_signature=(("a",), {}))
    original = model_util.get_callable
    with machinery.patched(tfma_patches.patches()):
        wrapped = model_util.get_callable(types.SimpleNamespace(signatures={"serving_default": function}),
                                          "serving_default")
        for other in (two_inputs, by_position):
            assert model_util.get_callable(types.SimpleNamespace(signatures={"s": other}), "s") is other
    assert model_util.get_callable is original
    assert wrapped is not function
    assert wrapped("batch") == "scores"
    wrapped(examples="keyword")
    wrapped("a", "b")
    assert function.calls == [((), {"examples": "batch"}), ((), {"examples": "keyword"}), (("a", "b"), {})]
    assert wrapped.structured_outputs == function.structured_outputs
    assert hasattr(wrapped, "structured_input_signature")
    assert copy.copy(wrapped)("copied") == "scores" and function.calls[-1] == ((), {"examples": "copied"})


@pytest.mark.timeout(120)
def test_a_saved_model_s_signature_called_by_position_gives_what_it_gives_by_keyword(tmp_path):
    import numpy as np
    import tensorflow as tf
    from tensorflow_model_analysis.utils import model_util

    module = tf.Module()
    module.serve = tf.function(lambda examples: {"length": tf.strings.length(examples)},
                               input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    tf.saved_model.save(module, str(tmp_path), signatures={"serving_default": module.serve})
    loaded = tf.saved_model.load(str(tmp_path))
    batch = tf.constant([b"a", b"bcd", b""])
    with machinery.patched(tfma_patches.patches()):
        signature = model_util.get_callable(loaded, "serving_default")
    assert isinstance(signature, tfma_patches._ByKeyword)
    np.testing.assert_array_equal(signature(batch)["length"], [1, 3, 0])
    np.testing.assert_array_equal(signature(batch)["length"], signature(examples=batch)["length"])



DEFERRED = """
import sys
from pipeline import patches
patches.defer_imports()
import tensorflow_data_validation
import tensorflow_model_analysis as tfma
from tensorflow_model_analysis.metrics import metric_specs, metric_types
from pipeline import config, pipeline

from components import compat
# Keras 3 imports IPython (its saving module) and scikit-learn SciPy's statistics anyway.
HEAVY = ("nltk", "sacrebleu", "ipywidgets") + (
    ("scipy.stats", "IPython.terminal", "prompt_toolkit") if compat.LEGACY_KERAS else ())
# The run's imports, a Beam pipeline run without the speed-ups' patches (as `monitor`
# runs one: Beam's IPython check), then the metrics of the pipeline's own Evaluator and
# their computations, built as TFMA builds them.
import apache_beam as beam
with beam.Pipeline() as counted:
    _ = counted | beam.Create([1, 2]) | beam.Map(lambda value: value + 1)
eval_config = pipeline._eval_config(config.EvaluationConfig())
specs = eval_config.metrics_specs
built = [type(metric_specs.metric_instance(metric)).__name__ for spec in specs for metric in spec.metrics]
computations = metric_specs.to_computations(specs, eval_config=eval_config)
# Deferred (bound, not run) or not imported at all.
print([name for name in HEAVY if type(sys.modules.get(name)) is type(sys)], sorted(built), len(computations) > 0)
# What a notebook or another metric config asks for: each loads when first used.
answers = [sys.modules["IPython"].get_ipython() is None, "IPython.terminal" in sys.modules]
answers += ["Rouge" in metric_types.registered_metrics(), metric_types.registered_metrics()["Bleu"].__name__,
            metric_types.is_registered_metric("Rouge"), "nltk" in sys.modules, "sacrebleu" in sys.modules,
            "Nothing" in metric_types.registered_metrics()]
answers += [callable(tfma.view.render_slicing_metrics), "ipywidgets" in sys.modules]
answers += [float(sys.modules["scipy"].stats.norm.cdf(0.0))]
print(*answers)
"""


def test_the_modules_tfma_imports_for_nothing_load_when_first_used(tmp_path):
    import os
    import subprocess
    import sys

    script = tmp_path / "deferred.py"
    script.write_text(DEFERRED)
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240,
                         env={**os.environ, machinery.ENV: "1"}, cwd=os.getcwd())
    assert ran.returncode == 0, ran.stderr[-3000:]
    run_imports, first_use = ran.stdout.splitlines()[-2:]
    assert run_imports == "[] ['AUC', 'BinaryAccuracy', 'Calibration', 'ExampleCount'] True"
    assert first_use.split() == ["True", "True", "True", "Bleu", "True", "True", "True", "False", "True", "True",
                                 "0.5"]


# What `_metrics_per_slice`'s pipeline output (its in-process worker runs `_collected` by reference).
_COLLECTED: list = []


def _collected(element) -> None:
    _COLLECTED.append(element)


def _metrics_per_slice(patched: bool) -> tuple:
    """The pipeline's metrics of 600 examples in 3 slices, combined per slice as TFMA's
    evaluator combines them (`CombinePerKey` with its hot key fanout, read where TFMA reads
    it), in a Beam pipeline; and how many histogram buckets Beam pickled one by one."""
    import pickle

    import apache_beam as beam
    import numpy as np
    from tensorflow_model_analysis.evaluators import metrics_plots_and_validations_evaluator as evaluator
    from tensorflow_model_analysis.metrics import metric_specs, metric_types

    from pipeline.config import EvaluationConfig
    from pipeline.pipeline import _eval_config

    config = _eval_config(EvaluationConfig())
    computations = [c for c in metric_specs.to_computations(config.metrics_specs, eval_config=config)
                    if isinstance(c, metric_types.MetricComputation)]
    rng = np.random.default_rng(0)
    elements = [(f"slice {index % 3}", {
        evaluator._COMBINER_INPUTS_KEY: [None] * len(computations),
        evaluator._DEFAULT_COMBINER_INPUT_KEY: [metric_types.StandardMetricInputs(
            labels=np.array([float(rng.integers(0, 2))], dtype=np.float32),
            predictions={"probability": np.array([rng.random()], dtype=np.float32)}, example_weights=None)],
    }) for index in range(600)]
    buckets = []
    _COLLECTED.clear()
    dumps = pickle.dumps

    def counting(value, *args, **kwargs):
        buckets.append(type(value).__name__ == "Bucket")
        return dumps(value, *args, **kwargs)

    with contextlib.ExitStack() as stack:
        if patched:
            stack.enter_context(machinery.patched(tfma_patches.patches()))
        monkeypatch = stack.enter_context(pytest.MonkeyPatch.context())
        monkeypatch.setattr(pickle, "dumps", counting)
        with beam.Pipeline(runner="apache_beam.runners.portability.fn_api_runner.FnApiRunner") as pipeline:
            _ = (pipeline | beam.Create(elements)
                 | beam.CombinePerKey(evaluator._ComputationsCombineFn(computations)).with_hot_key_fanout(
                     evaluator._COMBINE_PER_SLICE_KEY_HOT_KEY_FANOUT)
                 | beam.Map(_collected))
    return {key: pickle.dumps(sorted(metrics.items(), key=str)) for key, metrics in _COLLECTED}, sum(buckets)


def test_each_slice_s_metrics_are_combined_in_one_round_to_tfma_s_bits():
    from tensorflow_model_analysis.evaluators import metrics_plots_and_validations_evaluator as evaluator

    source = inspect.getsource(evaluator)
    assert len(re.findall(r"\.with_hot_key_fanout\(\s*_COMBINE_PER_SLICE_KEY_HOT_KEY_FANOUT\s*\)", source)) == 1
    assert "hot_key_fanout=_COMBINE_PER_SLICE_KEY_HOT_KEY_FANOUT" in source
    assert "get_accumulator_coder" not in vars(evaluator._ComputationsCombineFn)
    tfma_s, tfma_s_buckets = _metrics_per_slice(patched=False)
    ours, our_buckets = _metrics_per_slice(patched=True)
    # Pickles compare every metric's numbers bit for bit, a histogram's buckets included.
    assert sorted(ours) == ["slice 0", "slice 1", "slice 2"] and ours == tfma_s
    # Beam pickles the buckets one by one where the metrics themselves cross between stages only.
    assert tfma_s_buckets > 10 * our_buckets > 0
    assert evaluator._COMBINE_PER_SLICE_KEY_HOT_KEY_FANOUT == 8
