"""How a library patch is made, applied and undone, and the one setting that turns every
patch off.

A patch is `(owner, attribute, new value from the old one)`: the owner is a module or a
class, the function is given the attribute's value as the library defines it and returns
what stands in its place. `patched` sets a list of them within a block and restores the
library's own on leaving, whatever happened inside; `apply` sets them for good (a Beam
worker process, which ends with them); `PatchedOnImport` applies a library's patches right
after the process first imports it, and `AfterImport` does any other work then.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import os
import sys
from types import ModuleType
from typing import Callable, Dict, Iterator, List, Tuple

# Off with `TAXI_PIPELINE_SPEEDUPS=0` in the environment (or `taxi-pipeline run --no-speedups`).
ENV = "TAXI_PIPELINE_SPEEDUPS"

Patch = Tuple[object, str, Callable[[object], object]]

_INHERITED = object()


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0"


@contextlib.contextmanager
def patched(patches: List[Patch]) -> Iterator[None]:
    """`patches` set within the block, the library's own attributes back on leaving."""
    # An attribute the owner inherits is set on the owner and deleted again after.
    originals = [(owner, name, owner.__dict__.get(name, _INHERITED)) for owner, name, _ in patches]
    try:
        apply(patches)
        yield
    finally:
        for owner, name, original in originals:
            if original is not _INHERITED:
                setattr(owner, name, original)
            elif name in vars(owner):
                delattr(owner, name)


def apply(patches: List[Patch]) -> None:
    for owner, name, make in patches:
        setattr(owner, name, make(getattr(owner, name)))


class AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a module of `actions`, it has the other finders find it,
    and once the module has run, calls its action with it (once: the process keeps what
    the action did)."""

    def __init__(self, actions: Dict[str, Callable[[ModuleType], None]]):
        self._pending = dict(actions)

    def find_spec(self, fullname, path, target=None):
        action = self._pending.pop(fullname, None)
        if action is None:
            return None
        spec = None
        for finder in sys.meta_path:
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_act(module):
            exec_module(module)
            action(module)

        spec.loader.exec_module = exec_then_act
        return spec


class PatchedOnImport(AfterImport):
    """Applies a library's patches right after the process first imports the library (for
    good: a worker process ends with them)."""

    def __init__(self, patches: Dict[str, Callable[[], List[Patch]]]):
        super().__init__({name: (lambda module, make=make: apply(make())) for name, make in patches.items()})
