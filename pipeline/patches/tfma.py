"""Patches to TFMA: each example's label, prediction and weight extracted once, its
commonest metric combiners updated directly (`pipeline.patches.metric_updates`), each
slice's metrics combined in one round with its accumulators pickled whole, the serving
signature called by keyword. What each patch changes and why: `patches`. The
modules TFMA imports and a run never calls load when first used (`defer_unused`).

When TFMA changes under them,
tests/pipeline/patches/test_tfma.py::test_tfma_s_internals_the_sharing_relies_on_are_where_it_expects_them
and tests/pipeline/patches/test_tfma.py::test_tfma_calls_the_serving_signature_by_position_through_get_callable
fail for an internal that moved or changed, and
tests/pipeline/patches/test_metric_updates.py::test_the_pipeline_s_metrics_are_tfma_s_to_the_last_bit
for metrics that are no longer TFMA's to the last bit, and
tests/pipeline/patches/test_tfma.py::test_the_modules_tfma_imports_for_nothing_load_when_first_used
for a deferred module TFMA no longer imports, or one that building the pipeline's metrics
and their computations loads, and
tests/pipeline/patches/test_tfma.py::test_each_slice_s_metrics_are_combined_in_one_round_to_tfma_s_bits
for a fanout TFMA no longer reads from where the patch sets it, or metrics not TFMA's to
the bit. What each saves: docs/performance.md#patches-to-tfma.
"""

from __future__ import annotations

import functools
import sys
import threading
from typing import Callable, Dict, List, Optional

from pipeline.patches import machinery
from pipeline.patches.machinery import Patch

# Modules TFMA imports as it is imported and a run never calls (`defer_unused`): the ROUGE
# and BLEU metrics, with NLTK (and through it scikit-learn) and sacreBLEU (and through it
# Redis' client), which register their metric classes in TFMA's registry as they run; the
# `view` package's `__init__`, whose notebook widgets import ipywidgets and Jupyter's
# client (TFMA's code imports its `util` and `view_types` modules, which load without it);
# SciPy's statistics, which only TFMA's confidence intervals call.
DEFERRED_METRIC_MODULES = ("tensorflow_model_analysis.metrics.bleu", "tensorflow_model_analysis.metrics.rouge")
DEFERRED_MODULES = DEFERRED_METRIC_MODULES + ("tensorflow_model_analysis.view", "scipy.stats")
REGISTRY_MODULE = "tensorflow_model_analysis.metrics.metric_types"


def defer_unused() -> None:
    """`DEFERRED_MODULES` load when first used (`machinery.defer`), and TFMA's registry of
    metric classes, asked for a name it lacks, first loads the deferred metrics, which
    register theirs (`_LoadsDeferredMetrics`). For the process's life: a metric config
    naming `Rouge` or `Bleu` finds them as before."""
    machinery.defer(DEFERRED_MODULES)
    machinery.after_import(REGISTRY_MODULE, _registry_loads_deferred_metrics)


def _registry_loads_deferred_metrics(metric_types) -> None:
    if not isinstance(metric_types._METRIC_OBJECTS, _LoadsDeferredMetrics):
        metric_types._METRIC_OBJECTS = _LoadsDeferredMetrics(metric_types._METRIC_OBJECTS)


class _LoadsDeferredMetrics(dict):
    """TFMA's registry of metric classes by name (`metric_types._METRIC_OBJECTS`, and the
    copies `registered_metrics` hands out): a name it lacks, asked with `in`, `[]` or
    `get`, first loads `DEFERRED_METRIC_MODULES`, then is answered from the registry they
    added to. Listed whole (`keys`, iteration), it holds their classes once they loaded."""

    def __contains__(self, name) -> bool:
        return dict.__contains__(self, name) or name in self._with_deferred()

    def __missing__(self, name):
        return self._with_deferred()[name]

    def get(self, name, default=None):
        return self[name] if name in self else default

    def _with_deferred(self) -> Dict[str, type]:
        for module in DEFERRED_METRIC_MODULES:
            if module in sys.modules:
                machinery.load(sys.modules[module])
        registry = sys.modules[REGISTRY_MODULE]._METRIC_OBJECTS
        if registry is not self:
            self.update(registry)
        return dict(self)


def patches() -> List[Patch]:
    """`(owner, attribute, new value from the old one)` of each change to TFMA.

    - `metric_util.to_label_prediction_example_weight`: every metric's combiner asks it
      for each example's (label, prediction, weight) of each slice the example falls in,
      and it looks them up through the eval config's model specs each time, for every
      metric and slice. Its results depend only on the example's inputs and the
      arguments, so each thread keeps those of the example it saw last
      (`_shared_per_example`): one call per set of arguments, the others answered from
      them, each caller given its own copies of the arrays.
      `_BinaryConfusionMatrixCombiner` was handed the function as a default argument at
      import; a combiner built with that default gets the shared one.
    - `_ComputationsCombineFn.add_input`: each of those combiners still looked the
      example up again, reshaped and flattened it, before adding a number to a sum.
      `metric_updates` adds the same numbers from one label and prediction per example,
      where the combiner and the example are the plain case (TFMA's own classes,
      unweighted, a label of 0 or 1, a finite prediction), and leaves the rest to TFMA.
    - `_COMBINE_PER_SLICE_KEY_HOT_KEY_FANOUT`: TFMA combines each slice's metrics in two
      rounds (a hot key fanout of 8: partial accumulators by a random sub-key, then those
      merged), to spread the overall slice over many workers; a local run has one or
      two, and the second round only coded every accumulator again, 10,000 histogram
      buckets each pickled alone. None: one round (Beam's combiner lifting still adds up
      each bundle's examples where they are read), the same metrics to the bit.
    - `_ComputationsCombineFn.get_accumulator_coder`: Beam's default coder of an
      accumulator pickles each bucket of its calibration histograms on its own (a
      `dataclass` in a list, which Beam's fast coder does not know); a `PickleCoder`
      pickles the accumulator in one piece, to the same objects.
    - `model_util.get_callable`: TFMA calls the model's serving signature with each
      batch of serialized examples by position; a SavedModel's signature takes keywords
      only, so every call first failed, TensorFlow's error message printing the whole
      batch, before TensorFlow retried it by position. A signature of one input is
      handed out as `_ByKeyword`, which passes a lone positional argument by that
      input's name.
    """
    from tensorflow_model_analysis.evaluators import metrics_plots_and_validations_evaluator as evaluator
    from tensorflow_model_analysis.metrics import binary_confusion_matrices, metric_util
    from tensorflow_model_analysis.utils import model_util

    from pipeline.patches import metric_updates

    original = metric_util.to_label_prediction_example_weight
    shared = _shared_per_example(original)
    return [
        (metric_util, "to_label_prediction_example_weight", lambda old: shared),
        (
            binary_confusion_matrices._BinaryConfusionMatrixCombiner,
            "__init__",
            lambda old: _given_instead(old, "_extract_label_prediction_and_weight", original, shared),
        ),
        (
            evaluator._ComputationsCombineFn,
            "add_input",
            lambda old: metric_updates.replacing(old, original, (original, shared)),
        ),
        (model_util, "get_callable", _signatures_by_keyword),
        (evaluator, "_COMBINE_PER_SLICE_KEY_HOT_KEY_FANOUT", lambda old: None),
        (evaluator._ComputationsCombineFn, "get_accumulator_coder", lambda old: _accumulators_pickled_whole),
    ]


def _accumulators_pickled_whole(self) -> object:
    from apache_beam import coders

    return coders.PickleCoder()


def _signatures_by_keyword(original: Callable) -> Callable:
    """`original` (TFMA's `get_callable`), a signature of one input wrapped in `_ByKeyword`."""

    @functools.wraps(original)
    def get_callable(*args, **kwargs):
        function = original(*args, **kwargs)
        name = _single_keyword_input(function)
        return function if name is None else _ByKeyword(function, name)

    return get_callable


def _single_keyword_input(function: object) -> Optional[str]:
    """The input's name of a function whose structured signature is one keyword input."""
    structured = getattr(function, "structured_input_signature", None)
    if not isinstance(structured, tuple) or len(structured) != 2:
        return None
    positional, keywords = structured
    if positional or not isinstance(keywords, dict) or len(keywords) != 1:
        return None
    return next(iter(keywords))


class _ByKeyword:
    """A function of one keyword input, also called with that input by position; every
    other attribute is the function's own."""

    def __init__(self, function: Callable, name: str):
        self._function, self._name = function, name

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs:
            return self._function(**{self._name: args[0]})
        return self._function(*args, **kwargs)

    def __getattr__(self, attribute: str):
        if attribute in ("_function", "_name"):  # not set yet (a copy): no recursion
            raise AttributeError(attribute)
        return getattr(self._function, attribute)


def _shared_per_example(original: Callable) -> Callable:
    """`original(inputs, ...)` computed once per set of arguments for the `inputs` object
    this thread saw last. Every caller gets its own copies of the arrays: TFMA's
    `CategoricalCrossEntropy` normalises its predictions in place."""
    last = threading.local()

    @functools.wraps(original)
    def to_label_prediction_example_weight(inputs, *args, **kwargs):
        if getattr(last, "inputs", None) is not inputs:
            last.inputs, last.results, last.held = inputs, {}, []
        key = (tuple(_by_value_or_identity(value, last.held) for value in args),
               tuple((name, _by_value_or_identity(value, last.held)) for name, value in kwargs.items()))
        results = last.results.get(key)
        if results is None:
            results = last.results[key] = tuple(original(inputs, *args, **kwargs))
        return iter([tuple(_copied(value) for value in result) for result in results])

    return to_label_prediction_example_weight


def _by_value_or_identity(value: object, held: list) -> object:
    """`value` as part of a key: itself if hashable, a dict by its items, anything else
    (a proto) by identity, held in `held` so that its id cannot be another object's."""
    try:
        hash(value)
        return value
    except TypeError:
        pass
    if isinstance(value, dict):
        try:
            return ("dict", frozenset(value.items()))
        except TypeError:
            pass
    held.append(value)
    return ("id", id(value))


def _copied(value: object) -> object:
    import numpy as np

    return value.copy() if isinstance(value, np.ndarray) else value


def _given_instead(original_init: Callable, attribute: str, given: object, instead: object) -> Callable:
    """`original_init`, then `attribute` set to `instead` where it was `given`."""

    @functools.wraps(original_init)
    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        if getattr(self, attribute, None) is given:
            setattr(self, attribute, instead)

    return init
