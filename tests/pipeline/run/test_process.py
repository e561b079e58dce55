"""The run's process: the heavy imports with the GC paused, the collector's thresholds within
the run only, work left for after the exit, and nothing left behind by the immediate exit."""

import gc
import os
import subprocess
import sys
import tempfile

import pytest

from pipeline import config
from pipeline.patches import machinery
from pipeline.run import process


def test_the_heavy_import_runs_with_the_gc_paused_and_leaves_it_as_it_was(monkeypatch):
    seen = []
    monkeypatch.setattr(process.importlib, "import_module", lambda name: seen.append((name, gc.isenabled())))
    monkeypatch.setattr(process.gc, "freeze", lambda: seen.append("freeze"))
    gc.enable()
    process.import_frozen("some.module")
    assert seen == [("some.module", False), "freeze"] and gc.isenabled()
    gc.disable()
    try:
        process.import_frozen("some.module")
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_imports_with_the_speedups_off_leave_the_collector_as_it_is(monkeypatch):
    frozen = []
    monkeypatch.setattr(process.gc, "freeze", lambda: frozen.append(1))
    with process.frozen_imports(on=False):
        assert gc.isenabled()
    with process.frozen_imports(on=True):
        assert not gc.isenabled()
    assert frozen == [1] and gc.isenabled()


_AFTER_EXIT = """
import os, sys, time
from pipeline.run import process
process.ends_with_exit_process()
def work():
    time.sleep(1.5)
    with open(sys.argv[1], "w") as handle:
        handle.write(f"{os.getpid()} {os.getppid()} {os.isatty(1)}")
process.after_exit(work)
print("detach" if process.can_detach() else "foreground", flush=True)
process.exit_process(3, True)
"""


def _at_terminal(command, env=None, timeout=60):
    """`command` with a terminal as its standard output: its exit status, what it printed,
    and the seconds until it exited."""
    import pty
    import time

    controller, terminal = pty.openpty()
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=terminal, stderr=terminal, stdin=subprocess.DEVNULL, env=env)
    os.close(terminal)
    output = b""
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # the terminal closed: every process holding it ended or let it go
            break
        if not chunk:
            break
        output += chunk
    code = child.wait(timeout=timeout)
    os.close(controller)
    return code, output.decode(), time.perf_counter() - started


def test_work_after_the_exit_is_left_to_a_detached_child_at_a_terminal_and_done_first_otherwise(tmp_path):
    import time

    at_terminal = tmp_path / "terminal"
    code, output, _ = _at_terminal([sys.executable, "-c", _AFTER_EXIT, str(at_terminal)])
    assert code == 3 and output.strip() == "detach" and not at_terminal.exists()
    deadline = time.monotonic() + 30
    while not at_terminal.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    child, parent, tty = at_terminal.read_text().split()
    assert tty == "False"  # the child let the terminal go
    assert int(parent) != os.getpid()  # it was re-parented: the command had ended

    piped = tmp_path / "piped"
    done = subprocess.run([sys.executable, "-c", _AFTER_EXIT, str(piped)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3 and done.stdout.strip() == "foreground"
    assert piped.exists()  # written before the command ended

    off = tmp_path / "off"  # the speed-ups off: done first, at a terminal too
    code, output, _ = _at_terminal([sys.executable, "-c", _AFTER_EXIT, str(off)],
                                   env={**os.environ, machinery.ENV: "0"})
    assert code == 3 and output.strip() == "foreground" and off.exists()


def test_a_placeholder_stands_in_for_a_page_being_drawn_and_reloads(tmp_path):
    from pipeline.inspect import report_page

    path = report_page.write_placeholder(str(tmp_path), "20261125-000000-000000-1-abc")
    text = open(path).read()
    assert path == config.report_path(str(tmp_path), "20261125-000000-000000-1-abc")
    assert 'http-equiv="refresh"' in text and f'id="{report_page.PLACEHOLDER_ID}"' in text
    assert f"taxi-pipeline report 20261125-000000-000000-1-abc --output-root {tmp_path}" in text
    assert os.listdir(tmp_path / config.REPORTS_DIR) == [os.path.basename(path)]  # nothing staged is left


def test_the_collector_runs_less_often_inside_the_run_only(monkeypatch):
    monkeypatch.setattr(process, "import_frozen", lambda name: name)
    monkeypatch.setattr(process.patches, "defer_imports", lambda: None)  # for the process's life
    before = gc.get_threshold()
    with process.local_runner(True) as module:
        assert module == process.LOCAL_RUNNER
        assert gc.get_threshold() == process.GC_THRESHOLDS
        assert process.GC_THRESHOLDS[0] > before[0]
    assert gc.get_threshold() == before
    with pytest.raises(RuntimeError):
        with process.local_runner(True):
            raise RuntimeError("a failed run")
    assert gc.get_threshold() == before
    with process.local_runner(False):
        assert gc.get_threshold() == before


def test_an_immediate_exit_still_removes_autograph_s_generated_sources(tmp_path, monkeypatch):
    import tensorflow as tf

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = set(sys.modules)

    @tf.function(input_signature=[tf.TensorSpec([], tf.int32)])
    def halve_evens(x):
        if x % 2 == 0:
            x = x // 2
        return x

    assert int(halve_evens(tf.constant(8))) == 4
    generated = [tmp_path / os.path.basename(sys.modules[name].__file__)
                 for name in set(sys.modules) - before if name.startswith(process.GENERATED_PREFIX)]
    assert generated and all(path.exists() for path in generated)
    other = tmp_path / "kept.py"
    other.write_text("")
    process.remove_generated_sources()
    assert not any(path.exists() for path in generated)
    assert other.exists()
    # Nor their bytecode, where Python cached it (Python 3.13 does, beside the sources).
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.py"]

