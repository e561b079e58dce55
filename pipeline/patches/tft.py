"""Patches to TensorFlow Transform: the questions TFX's Transform executor asks of the
preprocessing function before its analysis answered from one trace of it. What it
changes and why: `patches`.

When TFT changes under it,
tests/pipeline/patches/test_tft.py::test_tfx_s_questions_share_one_trace_and_get_tft_s_answers
fails for a tracing function whose parameters changed or that the inspecting module no
longer calls through `impl_helper`, and for answers that are not TFT's own. What it
saves: docs/performance.md#patches-to-tft.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any, List, Mapping, Optional, Tuple

from pipeline.patches.machinery import Patch


def patches() -> List[Patch]:
    """`(owner, attribute, new value from the old one)` of each change to TFT.

    - `inspect_preprocessing_fn.impl_helper`: TFX's executor asks which columns the
      analyzers read (twice: once to choose between in-place and analyzed Transform, once
      more for the analysis) and which columns the transform reads; each answer traces
      the preprocessing function into a new graph and only reads it. Asked with the same
      function and input specs as the call before, the module's `impl_helper` hands back
      that call's graph (`SharedTrace`). The traces that build on their graph (the
      analysis itself, its cache's planning) are TFT's, untouched.
    """
    from tensorflow_transform import inspect_preprocessing_fn

    return [(inspect_preprocessing_fn, "impl_helper", SharedTrace)]


class SharedTrace:
    """`impl_helper` as `inspect_preprocessing_fn` reads it: every name is the module's,
    but `trace_preprocessing_function`, which answers a call with the same function,
    type specs (equal), mode and folder as the call before with that call's trace (the
    entry is read once per call: a call on another thread gets its own trace or the
    same one, never another call's)."""

    def __init__(self, module: ModuleType):
        self._module = module
        self._last: Optional[Tuple[Tuple[Any, ...], Any]] = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def trace_preprocessing_function(self, preprocessing_fn, input_specs: Mapping[str, Any], use_tf_compat_v1: bool,
                                     base_temp_dir: Optional[str] = None):
        import tensorflow as tf  # imported by then: TFT's caller runs on it

        trace = functools.partial(self._module.trace_preprocessing_function, preprocessing_fn, input_specs,
                                  use_tf_compat_v1=use_tf_compat_v1, base_temp_dir=base_temp_dir)
        # TFX asks with type specs; feature specs may hold arrays, which `==` cannot compare.
        if not all(isinstance(spec, tf.TypeSpec) for spec in input_specs.values()):
            return trace()
        key = (preprocessing_fn, dict(input_specs), use_tf_compat_v1, base_temp_dir)
        last = self._last
        if last is None or not _same(last[0], key):
            last = (key, trace())
            self._last = last
        return last[1]


def _same(before: Tuple[Any, ...], now: Tuple[Any, ...]) -> bool:
    (fn, specs, mode, folder), (other_fn, other_specs, other_mode, other_folder) = before, now
    return fn is other_fn and mode == other_mode and folder == other_folder and specs == other_specs
