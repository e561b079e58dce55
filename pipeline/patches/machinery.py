"""How a library patch is made, applied and undone, and the one setting that turns every
patch off.

A patch is `(owner, attribute, new value from the old one)`: the owner is a module or a
class, the function is given the attribute's value as the library defines it and returns
what stands in its place. `patched` sets a list of them within a block and restores the
library's own on leaving, whatever happened inside; `apply` sets them for good (a Beam
worker process, which ends with them); `PatchedOnImport` applies a library's patches right
after the process first imports it, and `AfterImport` does any other work then. `defer`
binds modules a library imports and a run never calls as `DeferredModule`s, whose code
runs when first used (bound in their package before the package's own code runs:
`BeforeItsCode`); `defer_guarded` does the same for a package's optional imports
(those it guards with `except ImportError`), whose names the package then answers when
first asked for.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import importlib.util
import logging
import os
import sys
import threading
from types import ModuleType
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple

# Off with `TAXI_PIPELINE_SPEEDUPS=0` in the environment (or `taxi-pipeline run --no-speedups`).
ENV = "TAXI_PIPELINE_SPEEDUPS"

Patch = Tuple[object, str, Callable[[object], object]]

_INHERITED = object()
# The modules `defer` was given, once each per process.
_deferring: Set[str] = set()
# The actions `after_import` was given, by module.
_after_import: Set[Tuple[str, Callable[[ModuleType], None]]] = set()
# The finders `defer_guarded` installed, by package.
_guarded: Dict[str, "GuardedImportsDeferred"] = {}
# Each `DeferredModule`'s lock, by module name, and those whose code is running.
_LOCKS: Dict[str, threading.RLock] = {}
_RUNNING: Set[str] = set()


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
        return _run_through(_found_by_others(self, fullname, path, target), functools.partial(self._around, action))

    @staticmethod
    def _around(action: Callable[[ModuleType], None], exec_module: Callable[[ModuleType], None],
                module: ModuleType) -> None:
        exec_module(module)
        action(module)


class BeforeItsCode(AfterImport):
    """`AfterImport` whose action is called with the module as soon as it exists (in
    `sys.modules`, with its `__path__`), before its code runs."""

    @staticmethod
    def _around(action: Callable[[ModuleType], None], exec_module: Callable[[ModuleType], None],
                module: ModuleType) -> None:
        action(module)
        exec_module(module)


def _found_by_others(finder: importlib.abc.MetaPathFinder, fullname: str, path, target):
    """The spec the other finders of `sys.meta_path` find for `fullname`, or None."""
    for other in sys.meta_path:
        if other is not finder and hasattr(other, "find_spec"):
            spec = other.find_spec(fullname, path, target)
            if spec is not None:
                return spec
    return None


def _run_through(spec, around: Callable[[Callable[[ModuleType], None], ModuleType], None]):
    """`spec` whose module runs through `around(its loader's exec_module, module)`; as it
    is when its loader cannot run a module that way."""
    if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
        return spec
    exec_module = spec.loader.exec_module
    spec.loader.exec_module = lambda module: around(exec_module, module)
    return spec


def after_import(name: str, action: Callable[[ModuleType], None]) -> None:
    """`action(module)` once module `name` has run: at once if it has, else right after the
    process first imports it. For the process's life; the same action given again for the
    same module changes nothing."""
    if (name, action) in _after_import:
        return
    _after_import.add((name, action))
    if name in sys.modules and type(sys.modules[name]) is not DeferredModule:
        action(sys.modules[name])
    else:
        sys.meta_path.insert(0, AfterImport({name: action}))


class PatchedOnImport(AfterImport):
    """Applies a library's patches right after the process first imports the library (for
    good: a worker process ends with them)."""

    def __init__(self, patches: Dict[str, Callable[[], List[Patch]]]):
        super().__init__({name: (lambda module, make=make: apply(make())) for name, make in patches.items()})


class DeferredModule(ModuleType):
    """A module bound in `sys.modules` and in its package before its code ran: its code
    runs when one of its names is first asked for (`__all__` too, which `import *` reads),
    but for a package's submodules, which are imported without it.
    Its other double-underscore attributes are the spec's (`__file__`, `__spec__`, ...)
    and a missing one is missing, without running it: code that walks `sys.modules`
    asking each module for those (TensorFlow's autograph does, for every function it
    converts) leaves it unloaded, where a module of `importlib.util.LazyLoader`, which
    runs on any attribute, would be loaded by the first such walk."""

    def __getattr__(self, name: str):
        # `__all__` is the module's own, not its spec's: `from module import *` reads it.
        if name.startswith("__") and name.endswith("__") and name != "__all__":
            raise AttributeError(name)
        # A package's submodule is imported as Python imports one, without the package's
        # code: `from package import submodule` asks the package for the name first.
        if type(self) is DeferredModule and "__path__" in vars(self):
            submodule = f"{self.__spec__.name}.{name}"
            try:  # imported, not only looked up: a finder's action on it must see the import
                return importlib.import_module(submodule)
            except ModuleNotFoundError as missing:
                if missing.name != submodule:
                    raise
        # One thread runs the code, once, under the module's own lock; a name asked for
        # while it runs, by the code it runs (a circular import), is missing, as in any
        # module being imported.
        module = self.__spec__.name
        with _LOCKS.setdefault(module, threading.RLock()):
            if type(self) is DeferredModule and module not in _RUNNING:
                _RUNNING.add(module)
                try:
                    self.__spec__.loader.exec_module(self)
                    self.__class__ = ModuleType
                finally:
                    _RUNNING.discard(module)
        return ModuleType.__getattribute__(self, name)

    def __reduce__(self):
        # Pickled as the module it stands for (cloudpickle picks its module reducer by
        # exact type, so a function pickled by value that refers to one lands here).
        return importlib.import_module, (self.__spec__.name,)


def defer(names: Sequence[str]) -> None:
    """Each module of `names` (dotted) becomes a `DeferredModule`: a top-level one at once,
    another as soon as its package's module exists, before the package's code runs (at once
    if the package is imported already), so that the package's own `from package import
    module`, and a library's, take it as it is. For the process's life; a name given again
    changes nothing."""
    pending: Dict[str, List[str]] = {}
    for name in names:
        if name not in _deferring:
            _deferring.add(name)
            pending.setdefault(name.rpartition(".")[0], []).append(name)
    for package in [package for package in pending if not package or package in sys.modules]:
        _bind_deferred(pending.pop(package), sys.modules.get(package))
    if pending:
        sys.meta_path.insert(0, BeforeItsCode({package: functools.partial(_bind_deferred, modules)
                                               for package, modules in pending.items()}))


def _bind_deferred(names: List[str], package: Optional[ModuleType]) -> None:
    """Binds each of `names` in `sys.modules` and in `package` (None for top-level names)
    as a `DeferredModule`; one that is imported already, or that is not installed (or no
    longer there), is left as the library imports it (a patch's test fails for the
    latter)."""
    for name in names:
        if name in sys.modules:
            continue
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            logging.warning("%s is no longer there: imported as its library imports it", name)
            continue
        module = importlib.util.module_from_spec(spec)
        module.__class__ = DeferredModule
        sys.modules[name] = module
        if package is not None:
            setattr(package, name.rpartition(".")[2], module)


def load(module: ModuleType) -> ModuleType:
    """`module` with its code run: a `DeferredModule` runs it now (any name asked for does)."""
    getattr(module, "__all__", None)
    return module


class GuardedImportsDeferred(importlib.abc.MetaPathFinder):
    """For a package whose code imports optional modules in a `try` block that passes over
    an `ImportError` (a library's integrations with services a run may not use): while
    the package's own code runs, on the thread that runs it, the block's first import
    fails as if the module were not installed, so the package's code goes on without the
    block; once the package has run, a name it lacks runs the block (`load`, given the
    package) and is answered from what it bound (the package's `__getattr__`, PEP 562),
    `__all__` too, which `from package import *` reads. The same names and objects, a
    little later: what lists the package's namespace without asking for a name (`vars`,
    `dir`) does not see them before the first such name, nor the block's submodules as
    attributes of their packages."""

    def __init__(self, package: str, first: str, load: Callable[[ModuleType], None]):
        self._package, self._first, self._load = package, first, load
        self._running = threading.local()

    def find_spec(self, fullname, path, target=None):
        if fullname == self._first and getattr(self._running, "package", False):
            raise ImportError(f"{fullname} is imported when {self._package} is first asked for a name it binds")
        if fullname != self._package:
            return None

        def exec_then_answer_later(exec_module, module):
            self._running.package = True
            try:
                exec_module(module)
            finally:
                self._running.package = False
            self._answer_later(module)

        return _run_through(_found_by_others(self, fullname, path, target), exec_then_answer_later)

    def _answer_later(self, package: ModuleType) -> None:
        lock, state = threading.RLock(), {"loaded": False, "loading": False}

        def answer(name: str):
            # Other double-underscore names are the module's machinery's (`__path__`,
            # `__spec__`, ...): asked by importers and scanners, they must not load the block.
            if name.startswith("__") and name.endswith("__") and name != "__all__":
                raise AttributeError(name)
            with lock:
                if not state["loaded"] and not state["loading"]:  # a name asked while it loads: missing
                    state["loading"] = True
                    try:
                        self._load(package)
                        state["loaded"] = True
                    finally:
                        state["loading"] = False
            try:
                return package.__dict__[name]
            except KeyError:
                raise AttributeError(f"module {self._package!r} has no attribute {name!r}") from None

        package.__getattr__ = answer


def defer_guarded(package: str, first: str, load: Callable[[ModuleType], None]) -> None:
    """`GuardedImportsDeferred` for `package`, unless it is imported already (its block has
    run) or deferred already. For the process's life."""
    if package in sys.modules or package in _guarded:
        return
    _guarded[package] = GuardedImportsDeferred(package, first, load)
    sys.meta_path.insert(0, _guarded[package])


def star_import(into: ModuleType, names: Sequence[str]) -> None:
    """`from name import *` into `into`, for each of `names` (dotted), in order."""
    for name in names:
        module = importlib.import_module(name)
        public = getattr(module, "__all__", None)
        if public is None:
            public = [key for key in vars(module) if not key.startswith("_")]
        for key in public:
            setattr(into, key, getattr(module, key))
