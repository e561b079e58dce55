"""Wall time of `taxi-pipeline run`: cold (fresh output root), then unchanged re-run.

    python benchmarks/pipeline_wall_time.py [--data-root data] [--repeat 3] [--baseline-source DIR]

Each run is a separate process, timed from start to exit, exactly as a user runs it. With
`--baseline-source` (a checkout of another commit, e.g. `git worktree add /tmp/base REV`)
the two sources run in alternating order, each cold run of one followed by one of the
other, so that both see the same load on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

from components import compat
from pipeline.config import MODEL_NAME


def _timed_run(data_root: str, output_root: str, serving_dir: str, source: Optional[str]) -> Tuple[float, str]:
    command = [os.path.join(os.path.dirname(sys.executable), "taxi-pipeline"), "run",
               "--data-root", data_root, "--output-root", output_root, "--serving-dir", serving_dir]
    env = dict(os.environ, PYTHONPATH=source) if source else None
    started = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - started
    if completed.returncode != 0:
        sys.exit(f"run failed with exit {completed.returncode}:\n{completed.stdout}\n{completed.stderr}")
    return seconds, completed.stdout


def _cold_and_rerun(data_root: str, source: Optional[str]) -> Tuple[float, float, int, str]:
    with tempfile.TemporaryDirectory() as scratch:
        output_root, serving = os.path.join(scratch, "out"), os.path.join(scratch, "serving")
        cold, cold_out = _timed_run(data_root, output_root, serving, source)
        warm, _ = _timed_run(data_root, output_root, serving, source)
        versions = len([name for name in os.listdir(os.path.join(serving, MODEL_NAME)) if name.isdigit()])
    return cold, warm, versions, cold_out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--baseline-source", default=None, help="a checkout of another commit to alternate with")
    args = parser.parse_args()
    print(f"Stack {compat.describe()}")
    data_root = os.path.abspath(args.data_root)
    sources = {"this": None}
    if args.baseline_source:
        sources["baseline"] = os.path.abspath(args.baseline_source)
    colds: Dict[str, List[float]] = {name: [] for name in sources}
    for attempt in range(args.repeat):
        for name, source in sources.items():
            cold, warm, versions, cold_out = _cold_and_rerun(data_root, source)
            colds[name].append(cold)
            print(f"run {attempt + 1} {name}: cold {cold:.1f} s, unchanged re-run {warm:.1f} s, "
                  f"pushed versions {versions}", flush=True)
            if attempt == 0 and name == "this":
                print("cold run output:\n" + cold_out, flush=True)
    for name, values in colds.items():
        print(f"{name}: median cold {statistics.median(values):.1f} s over {len(values)} runs")
    if "baseline" in colds:
        ratio = statistics.median(colds["this"]) / statistics.median(colds["baseline"])
        print(f"this / baseline (median cold): {ratio:.3f}")


if __name__ == "__main__":
    main()
