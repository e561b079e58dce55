"""A cold run of this pipeline on data/ against TFX's own taxi example on the same rows,
in alternating pairs, with where every second of this pipeline's run goes.

    python benchmarks/against_tfx_example.py [--pairs 3] [--data-root data] [--work DIR]
                                             [--baseline-source DIR]

Each pair: `taxi-pipeline run` in a fresh output root and serving folder, at a terminal
(a pseudo-terminal: the run's page is drawn after the prompt comes back, and the pair
goes on only once it is), then TFX's
`taxi_pipeline_native_keras.py` from the installed tfx wheel with its own settings, fed
the CSV that ships beside it (the rows data/ was made from), in a fresh HOME. Each is a
process of its own, timed from start to exit, as a user runs it. After the pairs, one
unchanged re-run of the last output root.

With `--baseline-source` (a checkout of another commit, e.g. `git worktree add /tmp/base
REV`), each round also runs that commit's pipeline the same way (its source through
`PYTHONPATH`, the same installed libraries), and the budget shows both.

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
from typing import Dict, List, Optional, Tuple

from scale import EXAMPLE_DIR, Measured, _timed

from components import compat
from pipeline.config import MODEL_NAME

PROGRESS = re.compile(r"^\[\s*([\d.]+) s\] (\S+)\s+(cached|[\d.]+ s)$")


def _bin(name: str) -> str:
    return os.path.join(os.path.dirname(sys.executable), name)


def at_terminal(label: str, command: List[str], env: Optional[Dict[str, str]] = None) -> Measured:
    """`command` with a terminal as its output, as a person runs it, timed until it exits
    (the prompt comes back); its peak memory is not measured."""
    print(f"{label}: {' '.join(command)}", flush=True)
    controller, terminal = pty.openpty()
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=terminal, stderr=terminal, stdin=subprocess.DEVNULL, env=env)
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


def run_pipeline(data_root: str, root: str, source: Optional[str] = None) -> Tuple[Measured, float]:
    """A cold run at a terminal, and the seconds until its page was drawn (a placeholder
    stands in for it at first); the next command starts only then."""
    from pipeline.inspect import report_page

    shutil.rmtree(root, ignore_errors=True)
    started = time.perf_counter()
    measured = at_terminal(f"taxi-pipeline{' (baseline)' if source else ''}", [
        _bin("taxi-pipeline"), "run", "--data-root", data_root, "--output-root", os.path.join(root, "out"),
        "--serving-dir", os.path.join(root, "serving"),
    ], env=dict(os.environ, PYTHONPATH=source) if source else None)
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


def _budget_table(runs: Dict[str, List[Measured]], pages: Dict[str, List[float]]) -> List[str]:
    """Medians of each step over the rounds, a column per source."""
    budgets = {name: [budget(m) for m in measured] for name, measured in runs.items()}
    steps: List[str] = []
    for per_source in budgets.values():
        for step in per_source[0]:
            if step not in steps:
                steps.append(step)
    names = list(runs)
    lines = ["| step | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for step in steps:
        cells = []
        for name in names:
            values = [b[step] for b in budgets[name] if step in b]
            cells.append(f"{statistics.median(values):.1f}" if values else "")
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    lines.append("| whole run, until the prompt | " + " | ".join(
        f"{statistics.median(m.seconds for m in runs[name]):.1f}" for name in names) + " |")
    lines.append("| until the page is drawn | " + " | ".join(
        f"{statistics.median(pages[name]):.1f}" for name in names) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    parser.add_argument("--baseline-source", default=None, help="a checkout of another commit to run in each round")
    args = parser.parse_args()
    print(f"Stack {compat.describe()}; {os.cpu_count()} cores", flush=True)
    work = args.work or tempfile.mkdtemp(prefix="against-tfx-")
    data_root = os.path.abspath(args.data_root)
    sources = {"this": None}
    if args.baseline_source:
        sources["baseline"] = os.path.abspath(args.baseline_source)
    runs: Dict[str, List[Measured]] = {name: [] for name in sources}
    pages: Dict[str, List[float]] = {name: [] for name in sources}
    ratios: List[float] = []
    for pair in range(args.pairs):
        for name, source in sources.items():
            measured, page_seconds = run_pipeline(data_root, os.path.join(work, f"pipeline-{name}"), source)
            if measured.exit_code:
                sys.exit(f"round {pair + 1}, {name}: exit {measured.exit_code}:\n{measured.tail}")
            runs[name].append(measured)
            pages[name].append(page_seconds)
        theirs = run_tfx_example(os.path.join(work, "tfx-example"))
        if theirs.exit_code:
            sys.exit(f"round {pair + 1}, TFX's example: exit {theirs.exit_code}:\n{theirs.tail}")
        mine = runs["this"][-1]
        ratios.append(mine.seconds / theirs.seconds)
        others = "".join(f", {name} {runs[name][-1].seconds:.1f} s" for name in sources if name != "this")
        print(f"pair {pair + 1}: this pipeline {mine.seconds:.1f} s (its page drawn at {pages['this'][-1]:.1f} s)"
              f"{others}, TFX's example {theirs.seconds:.1f} s, ratio {ratios[-1]:.3f}", flush=True)
    out, serving = os.path.join(work, "pipeline-this", "out"), os.path.join(work, "pipeline-this", "serving")
    before = sorted(os.listdir(os.path.join(serving, MODEL_NAME)))
    started = time.perf_counter()
    rerun = subprocess.run([_bin("taxi-pipeline"), "run", "--data-root", data_root, "--output-root", out,
                            "--serving-dir", serving], capture_output=True, text=True)
    rerun_seconds = time.perf_counter() - started
    after = sorted(os.listdir(os.path.join(serving, MODEL_NAME)))
    print(f"unchanged re-run: exit {rerun.returncode}, {rerun_seconds:.2f} s, "
          f"versions pushed by it: {len(set(after) - set(before))}")
    print(f"median ratio over {len(ratios)} pairs: {statistics.median(ratios):.3f}")
    print("\nCold runs, medians over the rounds (seconds):\n")
    print("\n".join(_budget_table(runs, pages)))
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
