"""A cold run of this pipeline on data/ against TFX's own taxi example on the same rows,
in alternating pairs, with where every second of this pipeline's run goes.

    python benchmarks/against_tfx_example.py [--pairs 3] [--data-root data] [--work DIR]

Each pair: `taxi-pipeline run` in a fresh output root and serving folder, at a terminal
(a pseudo-terminal: the run's page is drawn after the prompt comes back, and the pair
goes on only once it is), then TFX's
`taxi_pipeline_native_keras.py` from the installed tfx wheel with its own settings, fed
the CSV that ships beside it (the rows data/ was made from), in a fresh HOME. Each is a
process of its own, timed from start to exit, as a user runs it. After the pairs, one
unchanged re-run of the last output root.

Printed: each pair's two times and their ratio, the median ratio, and this pipeline's
budget: start-up (until the first node began), each node's seconds (its progress lines),
and what follows the last node (the run's record, its page, the exit), as medians.
"""

from __future__ import annotations

import argparse
import os
import pty
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Tuple

from scale import EXAMPLE_DIR, Measured, _timed

from components import compat

PROGRESS = re.compile(r"^\[\s*([\d.]+) s\] (\S+)\s+(cached|[\d.]+ s)$")


def _bin(name: str) -> str:
    return os.path.join(os.path.dirname(sys.executable), name)


def at_terminal(label: str, command: List[str]) -> Measured:
    """`command` with a terminal as its output, as a person runs it, timed until it exits
    (the prompt comes back); its peak memory is not measured."""
    print(f"{label}: {' '.join(command)}", flush=True)
    controller, terminal = pty.openpty()
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=terminal, stderr=terminal, stdin=subprocess.DEVNULL)
    os.close(terminal)
    output = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # every holder of the terminal has let it go
            break
        if not chunk:
            break
        output += chunk
    code = process.wait()
    seconds = time.perf_counter() - started
    os.close(controller)
    lines = output.decode(errors="replace").replace("\r\n", "\n").splitlines()
    print(f"  -> exit {code}, {seconds:.1f} s", flush=True)
    return Measured(label, 0, seconds, float("nan"), code, {}, "\n".join(lines[-6:]), lines)


def run_pipeline(data_root: str, root: str) -> Tuple[Measured, float]:
    """A cold run at a terminal, and the seconds until its page was drawn (a placeholder
    stands in for it at first); the next command starts only then."""
    from pipeline.inspect import report_page

    shutil.rmtree(root, ignore_errors=True)
    started = time.perf_counter()
    measured = at_terminal("taxi-pipeline", [
        _bin("taxi-pipeline"), "run", "--data-root", data_root, "--output-root", os.path.join(root, "out"),
        "--serving-dir", os.path.join(root, "serving"),
    ])
    page = next((line[len("Report: "):] for line in measured.lines if line.startswith("Report: ")), None)
    while page and report_page.PLACEHOLDER_ID in open(page, encoding="utf-8").read(4096):
        time.sleep(0.05)
    return measured, time.perf_counter() - started


def run_tfx_example(home: str) -> Measured:
    """TFX's example as shipped, on its own CSV, in a fresh HOME."""
    import tfx

    shutil.rmtree(home, ignore_errors=True)
    taxi = os.path.join(home, "taxi")
    os.makedirs(os.path.join(taxi, "data", "simple"))
    example = os.path.join(os.path.dirname(tfx.__file__), EXAMPLE_DIR)
    shutil.copy(os.path.join(example, "data", "simple", "data.csv"), os.path.join(taxi, "data", "simple"))
    shutil.copy(os.path.join(example, "taxi_utils_native_keras.py"), taxi)
    env = dict(os.environ, HOME=home)
    if compat.LEGACY_KERAS:
        env["TF_USE_LEGACY_KERAS"] = "1"
    return _timed("TFX's example", 0, [sys.executable, os.path.join(example, "taxi_pipeline_native_keras.py")],
                  env=env, cwd=home)


def budget(measured: Measured) -> Dict[str, float]:
    """Start-up, each node that ran, and the time after the last one, from a run's
    progress lines (`[ELAPSED s] NODE  SECONDS s`, ELAPSED when the node ended)."""
    parts: Dict[str, float] = {}
    last_end = 0.0
    for line in measured.lines:
        match = PROGRESS.match(line.strip())
        if not match or match.group(3) == "cached":
            continue
        ended, took = float(match.group(1)), float(match.group(3)[:-2])
        parts.setdefault("start-up (until the first node)", ended - took)
        parts[match.group(2)] = took
        last_end = ended
    parts["after the last node"] = measured.seconds - last_end
    return parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    args = parser.parse_args()
    print(f"Stack {compat.describe()}; {os.cpu_count()} cores", flush=True)
    work = args.work or tempfile.mkdtemp(prefix="against-tfx-")
    data_root = os.path.abspath(args.data_root)
    ours: List[Measured] = []
    ratios: List[float] = []
    pages: List[float] = []
    for pair in range(args.pairs):
        mine, page_seconds = run_pipeline(data_root, os.path.join(work, "pipeline"))
        pages.append(page_seconds)
        theirs = run_tfx_example(os.path.join(work, "tfx-example"))
        if mine.exit_code or theirs.exit_code:
            sys.exit(f"pair {pair + 1}: exit {mine.exit_code} / {theirs.exit_code}:\n{mine.tail}\n{theirs.tail}")
        ours.append(mine)
        ratios.append(mine.seconds / theirs.seconds)
        print(f"pair {pair + 1}: this pipeline {mine.seconds:.1f} s (its page drawn at {page_seconds:.1f} s), "
              f"TFX's example {theirs.seconds:.1f} s, ratio {ratios[-1]:.3f}", flush=True)
    started = time.perf_counter()
    rerun = subprocess.run([_bin("taxi-pipeline"), "run", "--data-root", data_root,
                            "--output-root", os.path.join(work, "pipeline", "out"),
                            "--serving-dir", os.path.join(work, "pipeline", "serving")],
                           capture_output=True, text=True)
    rerun_seconds = time.perf_counter() - started
    versions = sorted(os.listdir(os.path.join(work, "pipeline", "serving", "big_tip")))
    print(f"unchanged re-run: exit {rerun.returncode}, {rerun_seconds:.2f} s, serving versions {versions}")
    print(f"median ratio over {len(ratios)} pairs: {statistics.median(ratios):.3f}")
    budgets = [budget(m) for m in ours]
    print("\nThis pipeline's cold run, medians over the pairs:\n\n| step | seconds |\n|---|---|")
    for step in budgets[0]:
        values = [b[step] for b in budgets if step in b]
        print(f"| {step} | {statistics.median(values):.1f} |")
    print(f"| whole run, until the prompt | {statistics.median(m.seconds for m in ours):.1f} |")
    print(f"| until the page is drawn | {statistics.median(pages):.1f} |")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
