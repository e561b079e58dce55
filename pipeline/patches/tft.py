"""Patches to TensorFlow Transform: the questions TFX's Transform executor asks of the
preprocessing function before its analysis answered from one trace of it, and the
Transform graph pruned once per set of inputs when it is applied. What they change and
why: `patches`.

When TFT changes under them, tests/pipeline/patches/test_tft.py fails:
`test_tfx_s_questions_share_one_trace_and_get_tft_s_answers` for a tracing function
whose parameters changed or that the inspecting module no longer calls through
`impl_helper`, and for answers that are not TFT's own;
`test_the_transform_graph_is_pruned_once_per_set_of_inputs_with_tft_s_results` for a
loader that no longer prunes its graph for each application, and for results that are
not TFT's own. What they save: docs/performance.md#patches-to-tft.
"""

from __future__ import annotations

import functools
import threading
import weakref
from types import ModuleType
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from pipeline.patches.machinery import Patch


def patches() -> List[Patch]:
    """`(owner, attribute, new value from the old one)` of each change to TFT.

    - `inspect_preprocessing_fn.impl_helper`: TFX's executor asks which columns the
      analyzers read (twice: once to choose between in-place and analyzed Transform, once
      more for the analysis) and which columns the transform reads; each answer traces
      the preprocessing function into a new graph and only reads it. Asked with the same
      function and input specs as the call before, the module's `impl_helper` hands back
      that call's graph (`SharedTrace`).
    - `analysis_graph_builder.impl_helper`: the same, for the executor's cache planning
      (`get_analysis_cache_entry_keys`, asked even when no cache is read or written),
      which reads the graph too, but for the analyzers' sinks: it takes them out of the
      graph's collection as it reads them. Each hand-out of the shared graph puts the
      sinks the trace made back first. The analysis itself traces on its own, untouched.
    - `SavedModelLoader._apply_v1_transform_model_in_v2`: applying a Transform graph
      written in TF1 mode (this pipeline's, `force_tf_compat_v1`) prunes the whole graph
      to the fed inputs each time, and the Trainer applies it five times (its training
      and eval data, its three signatures) with two sets of inputs. The loader's method
      runs as it is, handed a pruned function made once per loader and set of fed
      tensors (`SharedPrunes`), the arguments put in the order it was made with.
    """
    from tensorflow_transform import inspect_preprocessing_fn
    from tensorflow_transform.beam import analysis_graph_builder
    from tensorflow_transform.saved import saved_transform_io_v2

    last = _LastTrace()
    return [(inspect_preprocessing_fn, "impl_helper", functools.partial(SharedTrace, last=last)),
            (analysis_graph_builder, "impl_helper", functools.partial(SharedTrace, last=last)),
            (saved_transform_io_v2.SavedModelLoader, "_apply_v1_transform_model_in_v2", SharedPrunes.applying)]


class _LastTrace:
    """The trace the modules' `SharedTrace`s share: its key, its answer, and the analyzers'
    sinks in its graph's collection as traced."""

    def __init__(self):
        self.entry: Optional[Tuple[Tuple[Any, ...], Any, List[Any]]] = None


class SharedTrace:
    """`impl_helper` as an inspecting module of TFT's reads it: every name is the module's,
    but `trace_preprocessing_function`, which answers a call with the same function,
    type specs (equal), mode and folder as the call before (from either module sharing
    `last`) with that call's trace, its graph's analyzer sinks as traced (the entry is
    read once per call: a call on another thread gets its own trace or the same one,
    never another call's)."""

    def __init__(self, module: ModuleType, last: _LastTrace):
        self._module = module
        self._last = last

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def trace_preprocessing_function(self, preprocessing_fn, input_specs: Mapping[str, Any], use_tf_compat_v1: bool,
                                     base_temp_dir: Optional[str] = None):
        import tensorflow as tf  # imported by then: TFT's caller runs on it
        from tensorflow_transform import analyzer_nodes

        trace = functools.partial(self._module.trace_preprocessing_function, preprocessing_fn, input_specs,
                                  use_tf_compat_v1=use_tf_compat_v1, base_temp_dir=base_temp_dir)
        # TFX asks with type specs; feature specs may hold arrays, which `==` cannot compare.
        if not all(isinstance(spec, tf.TypeSpec) for spec in input_specs.values()):
            return trace()
        key = (preprocessing_fn, dict(input_specs), use_tf_compat_v1, base_temp_dir)
        entry = self._last.entry
        if entry is None or not _same(entry[0], key):
            answer = trace()
            entry = (key, answer, list(answer[0].get_collection(analyzer_nodes.TENSOR_REPLACEMENTS)))
            self._last.entry = entry
            return answer
        _, answer, sinks = entry
        graph = answer[0]
        graph.clear_collection(analyzer_nodes.TENSOR_REPLACEMENTS)
        for sink in sinks:
            graph.add_to_collection(analyzer_nodes.TENSOR_REPLACEMENTS, sink)
        return answer


def _same(before: Tuple[Any, ...], now: Tuple[Any, ...]) -> bool:
    (fn, specs, mode, folder), (other_fn, other_specs, other_mode, other_folder) = before, now
    return fn is other_fn and mode == other_mode and folder == other_folder and specs == other_specs


class SharedPrunes:
    """A loader's graph, as TFT's `_apply_v1_transform_model_in_v2` reads it from
    `self._wrapped_function`, whose `prune(feeds, fetches)` is made once per set of fed
    tensors and fetched names. A later call feeding the same tensors in another order
    gets the same function, its arguments reordered. TFT's method runs on a stand-in
    for the loader (`_Loader`): the loader itself is not changed (Keras tracks its
    attributes for saving)."""

    _of_loader: "weakref.WeakKeyDictionary[Any, SharedPrunes]" = weakref.WeakKeyDictionary()
    _lock = threading.Lock()

    def __init__(self, wrapped: Any):
        self._wrapped = wrapped
        self._pruned: Dict[Tuple[Any, ...], Tuple[Tuple[str, ...], Callable]] = {}
        self._pruning = threading.Lock()  # this graph's prunes; `_lock` guards `_of_loader`

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapped, name)

    @classmethod
    def applying(cls, original: Callable) -> Callable:
        """TFT's method, applied on a stand-in whose graph prunes once per set of inputs."""

        @functools.wraps(original)
        def apply(loader, logical_input_map):
            with cls._lock:
                shared = cls._of_loader.get(loader)
                if shared is None or shared._wrapped is not loader._wrapped_function:
                    shared = cls._of_loader[loader] = cls(loader._wrapped_function)
            return original(_Loader(loader, shared), logical_input_map)

        return apply

    def prune(self, feeds: Sequence[Any], fetches: Mapping[str, Any]) -> Callable:
        names = tuple(feed.name for feed in feeds)
        key = (tuple(sorted(names)), tuple(sorted((name, _tensor_names(value)) for name, value in fetches.items())))
        with self._pruning:
            made = self._pruned.get(key)
            if made is None:
                made = self._pruned[key] = (names, self._wrapped.prune(feeds, fetches))
        made_names, pruned = made
        if made_names == names:
            return pruned
        position = {name: index for index, name in enumerate(names)}
        order = [position[name] for name in made_names]
        return lambda *args: pruned(*[args[index] for index in order])


def _tensor_names(value: Any) -> Tuple[str, ...]:
    import tensorflow as tf  # imported by then: TFT's caller runs on it

    return tuple(tensor.name for tensor in tf.nest.flatten(value, expand_composites=True))


class _Loader:
    """A `SavedModelLoader` but for its graph, `shared`."""

    def __init__(self, loader: Any, shared: SharedPrunes):
        self._loader = loader
        self._wrapped_function = shared

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)
