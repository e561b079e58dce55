"""The heavy import runs with the cyclic GC paused and leaves it running, frozen objects aside."""

import gc
import importlib

import pytest

from pipeline import heavy_imports


@pytest.fixture(autouse=True)
def gc_on():
    gc.enable()
    yield
    gc.enable()


def test_returns_the_local_runner_with_gc_on_and_its_objects_frozen():
    module = heavy_imports.local_runner()
    assert module.__name__ == "pipeline.local_runner" and callable(module.run)
    assert gc.isenabled()
    assert gc.get_freeze_count() > 100_000


def test_gc_is_paused_during_the_import(monkeypatch):
    seen = []
    monkeypatch.setattr(importlib, "import_module", lambda name: seen.append((name, gc.isenabled())))
    heavy_imports.local_runner()
    assert seen == [("pipeline.local_runner", False)]
    assert gc.isenabled()


def test_gc_comes_back_when_the_import_fails(monkeypatch):
    def broken(name):
        raise ImportError(f"no module {name}")

    monkeypatch.setattr(importlib, "import_module", broken)
    with pytest.raises(ImportError, match="pipeline.local_runner"):
        heavy_imports.local_runner()
    assert gc.isenabled()


def test_a_disabled_gc_stays_disabled(monkeypatch):
    monkeypatch.setattr(importlib, "import_module", lambda name: None)
    gc.disable()
    heavy_imports.local_runner()
    assert not gc.isenabled()
