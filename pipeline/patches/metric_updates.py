"""TFMA's four commonest metric combiners, updated without the per-metric lookups.

For each example of each slice, TFMA's Evaluator calls every metric's combiner
(`_ComputationsCombineFn.add_input`), and each combiner asks
`metric_util.to_label_prediction_example_weight` for the example's label, prediction and
weight, looking them up through the eval config, reshaping, flattening and weighting
them, before adding one number to a sum. With the pipeline's metrics (example count,
binary accuracy, calibration, AUC) and three slicings, that was most of the Evaluator's
time in its workers (docs/performance.md#patches-to-tfma).

`replacing` adds the same numbers for the combiners below, from the example's label and
prediction extracted once (TFMA's own function, called with the arguments they all
reduce to), as long as the combiner and the example are the plain case each of them
reduces to:

- the combiner: TFMA's own class (not a subclass), unweighted examples, no sub key, no
  aggregation or class weights, no example ids;
- the example: one label of 0 or 1 (not -0.0), one finite prediction, TFMA's weight of 1.

Then each combiner's sum gets the same terms, in the same order, computed the same way
(the same float products; the example count adds NumPy's `np.sum(np.array(1.0))` as
TFMA does, and the confusion matrices are still added by TFMA's own code), so the
metrics are TFMA's to the last bit (tests/pipeline/patches/test_metric_updates.py compares
them on both stacks). Any other combiner, or any other example (a fractional or missing
label, a NaN prediction, several outputs), goes through TFMA's code as before, errors
included.
"""

from __future__ import annotations

import math
import threading
import weakref
from typing import Any, Callable, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
from tensorflow_model_analysis.evaluators import metrics_plots_and_validations_evaluator as evaluator
from tensorflow_model_analysis.metrics import (
    binary_confusion_matrices,
    calibration,
    calibration_histogram,
    example_count,
)


class _Row(NamedTuple):
    """One example's label and prediction, as the combiners below read them."""

    label: float  # float(label), as TFMA 0.47's calibration combiners compute it
    prediction: float
    label_item: Any  # label.item(), as the confusion matrices' combiner passes it on
    prediction_item: Any


# The weight TFMA gives an unweighted example, as its example count adds it.
_ONE = np.sum(np.array(1.0))

Update = Callable[[Any, Any, _Row], Any]


def _count(combiner, accumulator, row: _Row):
    return accumulator + _ONE


def _calibration(combiner, accumulator, row: _Row):
    accumulator.total_weighted_examples += 1.0
    accumulator.total_weighted_labels += row.label * 1.0
    accumulator.total_weighted_predictions += row.prediction * 1.0
    return accumulator


def _histogram(combiner, accumulator, row: _Row):
    weighted_label, weighted_prediction = row.label * 1.0, row.prediction * 1.0
    index = combiner._bucket_index(row.prediction if combiner._prediction_based_bucketing else row.label)
    bucket = accumulator.get(index)
    if bucket is None:
        accumulator[index] = calibration_histogram.Bucket(index, weighted_label, weighted_prediction, 1.0)
    else:
        bucket.weighted_labels += weighted_label
        bucket.weighted_predictions += weighted_prediction
        bucket.weighted_examples += 1.0
    return accumulator


def _confusion(combiner, accumulator, row: _Row):
    return combiner._binary_confusion_matrices.add_input(
        accumulator=accumulator,
        labels=[row.label_item],
        predictions=[row.prediction_item],
        example_weights=[1.0],
        example_id=None,
    )


def _plain(combiner) -> bool:
    """No weights, sub key, aggregation or class weights: the combiner reads an example's
    label and prediction as they are."""
    key = combiner._key
    return (
        key.sub_key is None
        and combiner._aggregation_type is None
        and not combiner._class_weights
        and not combiner._example_weighted
    )


def update_for(combiner, extractors: Sequence[Callable]) -> Optional[Update]:
    """The direct update of `combiner`, or None to leave it to TFMA. `extractors`: the
    functions a confusion-matrix combiner may hold as its extraction and still be plain
    (TFMA's, and the speed-ups' sharing of it)."""
    kind = type(combiner)
    if kind is example_count._ExampleCountCombiner:
        return None if combiner._example_weighted else _count
    if kind is calibration._WeightedLabelsPredictionsExamplesCombiner:
        return _calibration if _plain(combiner) else None
    if kind is calibration_histogram._CalibrationHistogramCombiner:
        return _histogram if _plain(combiner) else None
    if kind is binary_confusion_matrices._BinaryConfusionMatrixCombiner:
        plain = (
            _plain(combiner)
            and not combiner._example_id_key
            and any(combiner._extract_label_prediction_and_weight is f for f in extractors)
        )
        return _confusion if plain else None
    return None


def _row(extract: Callable, inputs, eval_config, model_name: str, output_name: str) -> Optional[_Row]:
    """The example's label and prediction if it is the plain case (one label of 0 or 1,
    one finite prediction, a weight of 1), else None."""
    try:
        rows = list(extract(inputs, eval_config=eval_config, model_name=model_name, output_name=output_name))
    except Exception:  # noqa: BLE001 - TFMA's own path raises it again, with its message
        return None
    if len(rows) != 1:
        return None
    label, prediction, weight = rows[0]
    if not (
        isinstance(label, np.ndarray) and isinstance(prediction, np.ndarray) and isinstance(weight, np.ndarray)
        and label.size == 1 and prediction.size == 1 and weight.size == 1
        and label.dtype.kind in "biuf" and prediction.dtype.kind == "f"
    ):
        return None
    label_item, prediction_item = label.item(), prediction.item()
    label_value, prediction_value = float(label_item), float(prediction_item)
    # -0.0 is left to TFMA too: its fractional labels make it 0.0, which a sum keeps apart.
    if (label_value not in (0.0, 1.0) or math.copysign(1.0, label_value) < 0
            or not math.isfinite(prediction_value) or float(weight.item()) != 1.0):
        return None
    return _Row(label_value, prediction_value, label_item, prediction_item)


class _LastExample(threading.local):
    """The rows of the example this thread saw last: TFMA hands the same inputs to the
    combiners of each slice the example falls in."""

    inputs: Any = None
    rows: dict


class _Replacing(NamedTuple):
    extract: Callable  # TFMA's `to_label_prediction_example_weight`, unpatched
    extractors: Tuple[Callable, ...]


# Module state, not a closure: Beam pickles a combiner's bound methods (by reference,
# which a module-level function allows) when it builds a bundle's operations.
_replacing: Optional[_Replacing] = None
# TFMA's own method as this module finds it on import, before any patch: what `add_input`
# runs in a process where `replacing` was never called (a portable runner's worker, which
# runs TFMA as it is, gets the patched method pickled by reference from the launcher).
_TFMA_ADD_INPUT = evaluator._ComputationsCombineFn.add_input
_plans: "weakref.WeakKeyDictionary[Any, List[Optional[Update]]]" = weakref.WeakKeyDictionary()
_last = _LastExample()


def replacing(original: Callable, extract: Callable, extractors: Sequence[Callable]) -> Callable:
    """`add_input`, to stand for TFMA's `_ComputationsCombineFn.add_input` (`original`, the
    method `_TFMA_ADD_INPUT` holds since this module's import);
    `extract` is TFMA's `to_label_prediction_example_weight` (unpatched), `extractors` the
    functions a confusion-matrix combiner may hold and still be plain."""
    global _replacing
    _replacing = _Replacing(extract, tuple(extractors))
    _plans.clear()
    return add_input


def _rows_of(inputs_list, combiner) -> Optional[List[_Row]]:
    rows = []
    for inputs in inputs_list:
        if _last.inputs is not inputs:
            _last.inputs, _last.rows = inputs, {}
        key = (id(combiner._eval_config), combiner._key.model_name, combiner._key.output_name)
        if key not in _last.rows:
            _last.rows[key] = (
                combiner._eval_config,  # held: its id cannot be another config's
                _row(_replacing.extract, inputs, combiner._eval_config, *key[1:]),
            )
        row = _last.rows[key][1]
        if row is None:
            return None
        rows.append(row)
    return rows


def add_input(self, accumulator, element):
    """TFMA's `_ComputationsCombineFn.add_input`, with the direct updates where they apply."""
    if _replacing is None:
        return _TFMA_ADD_INPUT(self, accumulator, element)
    plan = _plans.get(self)
    if plan is None:
        plan = _plans[self] = [update_for(combiner, _replacing.extractors) for combiner in self._combiners]
    if not any(plan):
        return _TFMA_ADD_INPUT(self, accumulator, element)
    default = element.get(evaluator._DEFAULT_COMBINER_INPUT_KEY)
    own = element[evaluator._COMBINER_INPUTS_KEY]
    direct: List[Optional[Tuple[Update, Sequence]]] = []
    for combiner, update, inputs in zip(self._combiners, plan, own):
        if update is None or inputs is not None:
            direct.append(None)
            continue
        rows = default if update is _count else _rows_of(default, combiner)
        if rows is None:
            return _TFMA_ADD_INPUT(self, accumulator, element)
        direct.append((update, rows))
    results = []
    for combiner, value, inputs, chosen in zip(self._combiners, accumulator, own, direct):
        combiner_input = inputs if inputs is not None else default
        try:
            if chosen is None:
                value = combiner.add_inputs(value, combiner_input)
            else:
                update, rows = chosen
                for row in rows:
                    value = update(combiner, value, row)
        except Exception as e:  # as TFMA wraps a combiner's failure
            raise RuntimeError(f'add_input failed on "{combiner}" with inputs:\n{combiner_input}') from e
        results.append(value)
    return tuple(results)
