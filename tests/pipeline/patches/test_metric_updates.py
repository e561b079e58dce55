"""TFMA's metric combiners updated directly give TFMA's metrics to the last bit, and leave
every combiner and example they do not cover to TFMA."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from apache_beam.internal import pickler
from tensorflow_model_analysis.evaluators import metrics_plots_and_validations_evaluator as evaluator
from tensorflow_model_analysis.metrics import (
    binary_confusion_matrices,
    calibration,
    calibration_histogram,
    example_count,
    metric_specs,
    metric_types,
    metric_util,
)
from tensorflow_model_analysis.proto import config_pb2

from pipeline.config import EvaluationConfig
from pipeline.patches import machinery, metric_updates
from pipeline.patches import tfma as tfma_patches
from pipeline.pipeline import _eval_config

SLICES = 3  # TFMA hands each example's inputs to the combiners of each of its slices


def _combine_fn(eval_config: config_pb2.EvalConfig) -> evaluator._ComputationsCombineFn:
    computations = metric_specs.to_computations(eval_config.metrics_specs, eval_config=eval_config)
    return evaluator._ComputationsCombineFn(
        [c for c in computations if isinstance(c, metric_types.MetricComputation)])


def _inputs(rng: np.random.Generator, n: int, odd: bool):
    """`n` examples as TFMA's evaluator hands them to the combiners: a label of 0 or 1
    (int or float), a float32 probability; with `odd`, some of them TFMA's code must take:
    fractional labels, a label of -0.0, two predictions, weights."""
    elements = []
    for i in range(n):
        label = np.array([int(rng.integers(0, 2))], dtype=np.int64 if i % 2 else np.float32)
        prediction = np.array([rng.random()], dtype=np.float32)
        weight = None
        if odd and i % 7 == 3:
            label = np.array([0.25 + 0.5 * rng.random()], dtype=np.float32)
        elif odd and i % 17 == 8:
            label = np.array([-0.0], dtype=np.float32)  # TFMA's fractional labels make it 0.0
        elif odd and i % 11 == 5:
            prediction = np.array([rng.random(), rng.random()], dtype=np.float32)
            label = np.array([1, 0])
        elif odd and i % 13 == 6:
            weight = np.array([2.0])
        inputs = metric_types.StandardMetricInputs(
            labels=label, predictions={"probability": prediction}, example_weights=weight)
        elements.append({evaluator._COMBINER_INPUTS_KEY: [None] * 4, evaluator._DEFAULT_COMBINER_INPUT_KEY: [inputs]})
    return elements


def _metrics(eval_config, elements, patched: bool):
    fn = _combine_fn(eval_config)
    for element in elements:
        element[evaluator._COMBINER_INPUTS_KEY] = [None] * len(fn._combiners)

    def run():
        accumulators = [fn.create_accumulator() for _ in range(SLICES)]
        for element in elements:
            for s in range(SLICES):
                accumulators[s] = fn.add_input(accumulators[s], element)
        merged = fn.merge_accumulators([fn.compact(a) for a in accumulators[1:]])
        return [fn.extract_output(accumulators[0]), fn.extract_output(merged)]

    if patched:
        with machinery.patched(tfma_patches.patches()):
            return run()
    return run()


def _config(**model_spec) -> config_pb2.EvalConfig:
    config = _eval_config(EvaluationConfig())
    for key, value in model_spec.items():
        setattr(config.model_specs[0], key, value)
    return config


@pytest.mark.parametrize("seed", [0, 1])
def test_the_pipeline_s_metrics_are_tfma_s_to_the_last_bit(seed):
    config = _config()
    rng = np.random.default_rng(seed)
    elements = _inputs(rng, 3000, odd=False)
    got, expected = _metrics(config, elements, True), _metrics(config, elements, False)
    # Pickles compare every accumulator's numbers bit for bit, and their types.
    assert pickle.dumps(got) == pickle.dumps(expected)
    count = next(v for k, v in got[0].items() if k.name == "example_count")
    assert count == 3000 and type(count) is type(next(v for k, v in expected[0].items() if k.name == "example_count"))


def test_examples_the_direct_updates_do_not_cover_get_tfma_s_numbers_too():
    config = _config()
    elements = _inputs(np.random.default_rng(2), 2000, odd=True)
    got, expected = _metrics(config, elements, True), _metrics(config, elements, False)
    assert pickle.dumps(got) == pickle.dumps(expected)


def test_weighted_examples_are_left_to_tfma():
    config = _config(example_weight_key="weight")
    config.metrics_specs[0].example_weights.weighted = True
    fn = _combine_fn(config)
    plan = [metric_updates.update_for(c, (metric_util.to_label_prediction_example_weight,)) for c in fn._combiners]
    assert plan == [None] * len(fn._combiners)


def test_each_of_the_pipeline_s_combiners_is_updated_directly():
    fn = _combine_fn(_config())
    kinds = {type(c): metric_updates.update_for(c, (metric_util.to_label_prediction_example_weight,))
             for c in fn._combiners}
    assert kinds == {
        example_count._ExampleCountCombiner: metric_updates._count,
        binary_confusion_matrices._BinaryConfusionMatrixCombiner: metric_updates._confusion,
        calibration._WeightedLabelsPredictionsExamplesCombiner: metric_updates._calibration,
        calibration_histogram._CalibrationHistogramCombiner: metric_updates._histogram,
    }
    # A confusion matrix combiner with an extraction of its own is left to it.
    confusion = next(c for c in fn._combiners if type(c) is binary_confusion_matrices._BinaryConfusionMatrixCombiner)
    assert metric_updates.update_for(confusion, ()) is None


def test_a_bad_prediction_fails_as_in_tfma():
    config = _config()
    fn = _combine_fn(config)
    bad = metric_types.StandardMetricInputs(
        labels=np.array([1]), predictions={"probability": np.array([np.nan], dtype=np.float32)}, example_weights=None)
    element = {evaluator._COMBINER_INPUTS_KEY: [None] * len(fn._combiners),
               evaluator._DEFAULT_COMBINER_INPUT_KEY: [bad]}
    with pytest.raises(RuntimeError, match="add_input failed") as unpatched:
        fn.add_input(fn.create_accumulator(), element)
    with machinery.patched(tfma_patches.patches()):
        with pytest.raises(RuntimeError, match="add_input failed") as patched:
            fn.add_input(fn.create_accumulator(), element)
    assert type(patched.value.__cause__) is type(unpatched.value.__cause__)


@pytest.mark.parametrize("library", ["dill", "cloudpickle"])
def test_beam_pickles_the_patched_combine_function_s_methods(library):
    """Beam pickles a combiner's bound methods when it builds a bundle's operations; the
    patched method goes by reference, as TFMA's did."""
    fn = _combine_fn(_config())
    pickler.set_library(library)
    try:
        with machinery.patched(tfma_patches.patches()):
            restored = pickler.loads(pickler.dumps(fn.add_input))
            assert restored.__func__ is metric_updates.add_input
            element = _inputs(np.random.default_rng(3), 1, odd=False)[0]
            element[evaluator._COMBINER_INPUTS_KEY] = [None] * len(fn._combiners)
            assert restored(restored.__self__.create_accumulator(), element)[0] == 1.0
    finally:
        pickler.set_library(pickler.DEFAULT_PICKLE_LIB)


def test_a_process_without_the_patch_runs_tfma_s_method(monkeypatch):
    """A portable runner's worker runs TFMA as it is, but gets the patched method pickled
    by reference from the launching process: there it is TFMA's method."""
    assert metric_updates._TFMA_ADD_INPUT is not metric_updates.add_input
    assert metric_updates._TFMA_ADD_INPUT.__module__ == evaluator.__name__
    fn = _combine_fn(_config())
    calls = []
    monkeypatch.setattr(metric_updates, "_replacing", None)
    monkeypatch.setattr(metric_updates, "_TFMA_ADD_INPUT", lambda *args: calls.append(args) or "tfma")
    element = _inputs(np.random.default_rng(4), 1, odd=False)[0]
    assert metric_updates.add_input(fn, "accumulator", element) == "tfma"
    assert calls == [(fn, "accumulator", element)]
