"""A year (and more) of scheduled retraining, simulated on data/.

    python benchmarks/retrain_simulation.py [--initial-spans 4] [--window 4]

Starts from a temp data root holding the first spans, then adds the remaining spans one
at a time, calling `taxi-pipeline retrain` after each (as cron would), plus one call
with no new span. Prints a Markdown table: spans used, warm start, eval AUC, blessing,
pushed version, wall time.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from components.support.spans import span_numbers
from pipeline.outcome import ExitCode


def _field(pattern: str, text: str, default: str = "") -> str:
    match = re.search(pattern, text, re.MULTILINE)
    return match.group(1).strip() if match else default


def _retrain(data_root: str, work: str, window: int) -> dict:
    command = [os.path.join(os.path.dirname(sys.executable), "taxi-pipeline"), "retrain", "--window", str(window),
               "--data-root", data_root, "--output-root", os.path.join(work, "out"),
               "--serving-dir", os.path.join(work, "serving")]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    out = done.stdout
    outcome = {ExitCode.OK: "pushed", ExitCode.NOT_BLESSED: "not blessed", ExitCode.DATA_REJECTED: "data rejected",
               ExitCode.LOCKED: "locked"}.get(done.returncode, "error")
    if "nothing to do" in out:
        outcome = "nothing to do"
    return {
        "exit": done.returncode,
        "spans": _field(r"^Spans: (.*)$", out, "-"),
        "warm start": _field(r"^Warm start: (yes|no)", out, "-"),
        "why": _field(r"^Warm start: (?:yes|no): (.*)$", out),
        "auc": _field(r"auc=([0-9.]+)", out, "-"),
        "outcome": outcome,
        "version": os.path.basename(_field(r"^(?:Pushed a new model version:|Up to date; serving) (\S+)", out, "-")),
        "seconds": seconds,
        "stderr": done.stderr[-500:],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--initial-spans", type=int, default=4)
    parser.add_argument("--window", type=int, default=4)
    args = parser.parse_args()
    spans = span_numbers(args.data_root)
    print("| run | new span | spans (train; eval) | warm start | eval AUC | outcome | serving version | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as work:
        data_root = os.path.join(work, "data")
        os.makedirs(data_root)
        for span in spans[: args.initial_spans]:
            shutil.copytree(os.path.join(args.data_root, f"span-{span}"), os.path.join(data_root, f"span-{span}"))
        schedule = [spans[args.initial_spans - 1]] + spans[args.initial_spans:] + [None]
        for run, span in enumerate(schedule, start=1):
            if span is not None and not os.path.exists(os.path.join(data_root, f"span-{span}")):
                shutil.copytree(os.path.join(args.data_root, f"span-{span}"), os.path.join(data_root, f"span-{span}"))
            result = _retrain(data_root, work, args.window)
            print(f"| {run} | {span if span is not None else '(none)'} | {result['spans']} | {result['warm start']} "
                  f"| {result['auc']} | {result['outcome']} | {result['version']} | {result['seconds']:.1f} |",
                  flush=True)
            if result["outcome"] == "error":
                print(result["stderr"], file=sys.stderr)


if __name__ == "__main__":
    main()
