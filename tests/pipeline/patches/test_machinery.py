"""The patch machinery: patches hold inside their block only, a failure inside it or in
building a patch still restores the libraries, and one setting turns them all off."""

import pytest
from apache_beam.transforms import userstate

from pipeline.patches import beam as beam_patches
from pipeline.patches import machinery


def test_a_failure_inside_the_block_still_undoes_the_patches():
    original = userstate.get_dofn_specs
    with pytest.raises(RuntimeError, match="boom"):
        with machinery.patched(beam_patches.patches()):
            raise RuntimeError("boom")
    assert userstate.get_dofn_specs is original


@pytest.mark.parametrize("value, expected", [(None, True), ("1", True), ("0", False)])
def test_one_environment_setting_turns_them_off(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv(machinery.ENV, raising=False)
    else:
        monkeypatch.setenv(machinery.ENV, value)
    assert machinery.enabled() is expected


def test_a_patch_that_fails_to_build_leaves_every_attribute_as_it_was():
    from tfx_bsl.tfxio import tf_example_record

    def broken(original):
        raise RuntimeError("cannot build")

    before = dict(vars(tf_example_record.TFExampleRecord))
    with pytest.raises(RuntimeError, match="cannot build"):
        with machinery.patched([(tf_example_record.TFExampleRecord, "BeamSource", broken)]):
            pass
    assert dict(vars(tf_example_record.TFExampleRecord)) == before



def test_a_deferred_module_answers_what_scanners_of_sys_modules_ask_without_running(tmp_path, monkeypatch):
    import concurrent.futures
    import importlib
    import sys
    import time

    package = tmp_path / "deferring_package"
    package.mkdir()
    (package / "__init__.py").write_text("")
    # Slow to run: a second thread asks for it while the first runs it.
    (package / "heavy.py").write_text("import sys, time\nsys.ran_heavy = getattr(sys, 'ran_heavy', 0) + 1\n"
                                      "time.sleep(0.5)\nVALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delattr(sys, "ran_heavy", raising=False)
    imported = importlib.import_module("deferring_package")
    try:
        machinery._bind_deferred(["deferring_package.heavy"], imported)
        module = sys.modules["deferring_package.heavy"]
        # What autograph and the warnings machinery ask each module: answered, nothing run.
        assert module.__file__ == str(package / "heavy.py") and not hasattr(module, "__warningregistry__")
        from deferring_package import heavy

        assert heavy is module and not hasattr(sys, "ran_heavy")
        # Asked for by two threads at once: its code runs once, and both get what it made.
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            first = pool.submit(lambda: heavy.VALUE)
            time.sleep(0.1)
            second = pool.submit(lambda: heavy.VALUE)
            assert (first.result(timeout=30), second.result(timeout=30)) == (42, 42)
        assert sys.ran_heavy == 1 and type(heavy) is type(sys)
        assert getattr(heavy, "missing", None) is None
        # `import *` of one not yet run gets its names.
        (package / "starred.py").write_text("__all__ = ['NAME']\nNAME = 7\n")
        machinery._bind_deferred(["deferring_package.starred"], imported)
        names: dict = {}
        exec("from deferring_package.starred import *", names)
        assert names["NAME"] == 7
    finally:
        for name in ("deferring_package.heavy", "deferring_package.starred", "deferring_package"):
            sys.modules.pop(name, None)


def test_deferred_modules_are_bound_before_their_package_s_code_and_its_submodules_load_without_it(
        tmp_path, monkeypatch):
    import importlib
    import pickle
    import sys

    package = tmp_path / "early_package"
    (package / "sub").mkdir(parents=True)
    # The package's own code imports the deferred module and a submodule of the deferred one.
    (package / "__init__.py").write_text("from early_package import heavy\nfrom early_package.sub import leaf\n"
                                         "import sys\nsys.ran_early_package = True\n")
    (package / "heavy.py").write_text("import sys\nsys.ran_heavy = True\nVALUE = 42\n")
    (package / "sub" / "__init__.py").write_text("import sys\nsys.ran_sub = True\n")
    (package / "sub" / "leaf.py").write_text("VALUE = 7\n")
    (package / "sub" / "other.py").write_text("VALUE = 8\n")
    (tmp_path / "top_level_module.py").write_text("import sys\nsys.ran_top_level = True\nVALUE = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    for flag in ("ran_early_package", "ran_heavy", "ran_sub", "ran_top_level"):
        monkeypatch.delattr(sys, flag, raising=False)
    seen = []
    try:
        machinery.defer(["early_package.heavy", "early_package.sub", "top_level_module"])
        machinery.after_import("early_package", lambda module: seen.append(sys.ran_early_package))
        top_level = importlib.import_module("top_level_module")
        imported = importlib.import_module("early_package")
        assert sys.ran_early_package and seen == [True]
        assert type(imported.heavy) is machinery.DeferredModule and not hasattr(sys, "ran_heavy")
        assert imported.sub.leaf.VALUE == 7 and not hasattr(sys, "ran_sub")
        assert type(top_level) is machinery.DeferredModule and not hasattr(sys, "ran_top_level")
        # A finder's action on a deferred package's submodule runs as it is imported.
        machinery.after_import("early_package.sub.other", lambda module: seen.append(module.VALUE))
        from early_package.sub import other

        assert other.VALUE == 8 and seen == [True, 8] and not hasattr(sys, "ran_sub")
        # Pickled, a deferred module stands for the module.
        assert pickle.loads(pickle.dumps(imported.sub)) is imported.sub and not hasattr(sys, "ran_sub")
        # First use runs each; the package's code, then a name it binds.
        assert (imported.heavy.VALUE, top_level.VALUE) == (42, 3) and sys.ran_heavy and sys.ran_top_level
        assert getattr(imported.sub, "missing", None) is None and sys.ran_sub
        # Given again, nothing is bound again.
        sys.modules.pop("early_package.heavy")
        machinery.defer(["early_package.heavy"])
        assert "early_package.heavy" not in sys.modules
    finally:
        for name in ("early_package.heavy", "early_package.sub.leaf", "early_package.sub.other", "early_package.sub",
                     "early_package", "top_level_module"):
            sys.modules.pop(name, None)
