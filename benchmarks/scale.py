"""Time and peak memory of `taxi-pipeline run` as the rows grow, against TFX's own taxi
example at one size; writes docs/scale.md and docs/scale.png (`make bench-scale`).

    python benchmarks/scale.py [--rows 100000 1000000 5000000 10000000] [--tfx-example-rows 1000000]
                               [--pairs 3] [--work DIR] [--doc docs/scale.md]

For each size: `taxi-pipeline make-data --rows N --spans 8 --seed 0` into DIR, then one
cold run (a fresh output root) in a process of its own, as a user runs it. The memory
figure is the peak of the summed resident memory of the run's whole process tree (Beam's
worker processes included), sampled every 0.2 s; per-component seconds are the run's
progress lines. TFX's example (`taxi_pipeline_native_keras.py` from the installed tfx
wheel, its own settings) is fed a CSV of the same rows (`synthetic.write_csv`).

At the example's size, the two run in `--pairs` alternating pairs (this pipeline, the
example, this pipeline, ...), so that both see the machine as it is in those minutes;
the ratio that counts is the median of the pairs' ratios. This pipeline's row for that
size in the table is the run with the median time.

Also measured on the largest size of at most 1M rows: the data gate's sampling error
(drift distances from the sample against all rows) and the Trainer's input paths
(`benchmarks/trainer_input.py`).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence

import psutil

from components import compat

PROGRESS = re.compile(r"^\[\s*([\d.]+) s\] (\S+)\s+(cached|[\d.]+ s)$")
# TFX's own log lines (the example's console), timed as they arrive.
TFX_PROGRESS = re.compile(r"Component (\S+) is (running|finished)\.")
EXAMPLE_DIR = os.path.join("examples", "chicago_taxi_pipeline")
COMPONENTS = ("ImportExampleGen", "StatisticsGen", "DataGate", "Transform", "Trainer", "Evaluator")
# Seconds a cold run may take, by rows; peak memory at most MEMORY_GOAL_GB at every size.
TIME_GOALS = {5_000_000: 600, 10_000_000: 600}
MEMORY_GOAL_GB = 4
# This pipeline's time over the example's, as the median of the pairs.
RATIO_GOAL = 0.25


@dataclasses.dataclass
class Measured:
    label: str
    rows: int
    seconds: float
    peak_mb: float
    exit_code: int
    # Seconds per component, in the order they ran; "before" = until the first began.
    components: Dict[str, float]
    tail: str
    # Every line it printed.
    lines: List[str] = dataclasses.field(default_factory=list)


class PeakMemory:
    """Samples the summed RSS of a process and all its descendants until it exits."""

    def __init__(self, pid: int, every: float = 0.2):
        self._root, self._every, self.peak = psutil.Process(pid), every, 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                tree = [self._root] + self._root.children(recursive=True)
                total = 0
                for process in tree:
                    try:
                        total += process.memory_info().rss
                    except psutil.Error:
                        pass
            except psutil.Error:
                return
            self.peak = max(self.peak, total)
            time.sleep(self._every)

    def join(self) -> float:
        self._thread.join(timeout=5)
        return self.peak / 2**20


def _timed(label: str, rows: int, command: Sequence[str], env: Optional[Dict[str, str]] = None,
           cwd: Optional[str] = None) -> Measured:
    print(f"{label}: {' '.join(command)}", flush=True)
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=env, cwd=cwd)
    memory = PeakMemory(process.pid)
    components: Dict[str, float] = {}
    lines: List[str] = []
    running: Dict[str, float] = {}
    for line in process.stdout:
        lines.append(line.rstrip())
        logged = TFX_PROGRESS.search(line)
        if logged and logged.group(2) == "running":
            running[logged.group(1)] = time.perf_counter()
            components.setdefault("before", running[logged.group(1)] - started)
        elif logged and logged.group(1) in running:
            components[logged.group(1)] = time.perf_counter() - running.pop(logged.group(1))
        match = PROGRESS.match(line.strip())
        if match and match.group(3) != "cached":
            took = float(match.group(3)[:-2])
            if not components:
                components["before"] = float(match.group(1)) - took
            components[match.group(2)] = took
            print(f"  {line.strip()}", flush=True)
    process.wait()
    seconds = time.perf_counter() - started
    measured = Measured(label, rows, seconds, memory.join(), process.returncode, components, "\n".join(lines[-6:]),
                        lines)
    print(f"  -> exit {measured.exit_code}, {seconds:.1f} s, peak {measured.peak_mb:.0f} MB", flush=True)
    return measured


def _bin(name: str) -> str:
    return os.path.join(os.path.dirname(sys.executable), name)


def make_data(rows: int, work: str) -> str:
    out = os.path.join(work, f"data-{rows}")
    if not os.path.exists(os.path.join(out, "SYNTHETIC.md")):
        subprocess.run([_bin("taxi-pipeline"), "make-data", "--rows", str(rows), "--out", out], check=True)
    return out


def run_pipeline(rows: int, work: str) -> Measured:
    data = make_data(rows, work)
    root = os.path.join(work, f"run-{rows}")
    shutil.rmtree(root, ignore_errors=True)
    return _timed(f"taxi-pipeline, {rows} rows", rows, [
        _bin("taxi-pipeline"), "run", "--data-root", data, "--output-root", os.path.join(root, "out"),
        "--serving-dir", os.path.join(root, "serving"),
    ])


def _example_csv(rows: int, work: str) -> str:
    """The same rows as `make_data`'s, as the CSV TFX's example reads; written once."""
    from pipeline.data import synthetic

    path = os.path.join(work, f"csv-{rows}", "data.csv")
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        synthetic.write_csv(synthetic.SyntheticConfig(rows=rows, out_dir=os.path.dirname(path)), path + ".tmp")
        os.replace(path + ".tmp", path)
    return path


def run_tfx_example(rows: int, work: str) -> Measured:
    """TFX's `taxi_pipeline_native_keras.py` as shipped, in a fresh HOME, its data the same
    rows as CSV."""
    import tfx

    home = os.path.join(work, f"tfx-example-{rows}")
    shutil.rmtree(home, ignore_errors=True)
    taxi = os.path.join(home, "taxi")
    os.makedirs(os.path.join(taxi, "data", "simple"))
    example = os.path.join(os.path.dirname(tfx.__file__), EXAMPLE_DIR)
    shutil.copy(os.path.join(example, "taxi_utils_native_keras.py"), taxi)
    shutil.copy(_example_csv(rows, work), os.path.join(taxi, "data", "simple", "data.csv"))
    env = dict(os.environ, HOME=home)
    if compat.LEGACY_KERAS:
        env["TF_USE_LEGACY_KERAS"] = "1"
    return _timed(f"TFX's example, {rows} rows", rows,
                  [sys.executable, os.path.join(example, "taxi_pipeline_native_keras.py")], env=env, cwd=home)


def sampling_error(data_root: str, rows: int, work: str) -> List[str]:
    """The data gate's drift distances between the newest two spans from its sample (at
    the rate the gate uses for `rows` rows), against the same from every row; markdown."""
    import apache_beam as beam
    import tensorflow_data_validation as tfdv
    from apache_beam.options.pipeline_options import PipelineOptions
    from tensorflow_metadata.proto.v0 import anomalies_pb2

    from components.custom import span_statistics
    from components.support import spans
    from pipeline import config
    from pipeline.beam import options as beam_options

    schema = tfdv.load_schema_text(config.schema_file())
    every = spans.span_numbers(data_root)
    numbers = every[-2:]
    rates = {"all rows": 1.0, "sample": span_statistics.sample_rate(rows, len(every))}
    distances = {}
    for name, rate in rates.items():
        out = os.path.join(work, f"sampling-{rate}")
        os.makedirs(out, exist_ok=True)
        options = PipelineOptions(list(beam_options.local_beam_args()))
        stats = span_statistics.compute_span_statistics(
            beam.Pipeline(options=options), data_root, numbers, out, schema, rate)
        found = tfdv.validate_statistics(stats[numbers[1]], schema, previous_statistics=stats[numbers[0]])
        distances[name] = {
            (d.path.step[0], anomalies_pb2.DriftSkewInfo.Measurement.Type.Name(m.type)): m.value
            for d in found.drift_skew_info for m in d.drift_measurements
        }
    lines = [f"Spans {numbers[0]} -> {numbers[1]}, sample rate {rates['sample']:.3f}:", "",
             "| feature | measure | all rows | sample | difference |", "|---|---|---|---|---|"]
    for (feature, kind), value in sorted(distances["all rows"].items()):
        sampled = distances["sample"].get((feature, kind), float("nan"))
        lines.append(f"| {feature} | {kind} | {value:.4f} | {sampled:.4f} | {abs(sampled - value):.4f} |")
    return lines


def plot(measured: Sequence[Measured], pairs: Sequence[Pair], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ours = sorted(measured, key=lambda m: m.rows)
    figure, axis = plt.subplots(figsize=(8, 5), dpi=100)
    for component in ("before",) + COMPONENTS:
        points = [(m.rows, m.components[component]) for m in ours if component in m.components]
        if points:
            label = "start-up + record check" if component == "before" else component
            axis.plot(*zip(*points), marker="o", label=label)
    axis.plot([m.rows for m in ours], [m.seconds for m in ours], marker="s", color="black",
              label="whole run")
    if pairs:
        axis.scatter([pairs[0].example.rows], [statistics.median(p.example.seconds for p in pairs)], marker="*",
                     s=150, color="red", zorder=5, label="TFX's taxi example, whole run (median)")
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("rows")
    axis.set_ylabel("seconds (cold run)")
    axis.set_title(f"Seconds per component against rows ({compat.STACK}, 2 cores)")
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path)


def _table(measured: Sequence[Measured]) -> List[str]:
    names = ["before"] + [c for c in COMPONENTS if any(c in m.components for m in measured)]
    header = ["rows", "result", "wall", "peak RSS (all processes)"] + [
        "start-up + record check" if n == "before" else n for n in names]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for m in measured:
        result = "pushed" if m.exit_code == 0 and "Pushed" in m.tail else f"exit {m.exit_code}"
        cells = [f"{m.rows:,}", result, f"{m.seconds:.0f} s", f"{m.peak_mb / 1024:.2f} GB"] + [
            f"{m.components.get(n, float('nan')):.1f}" for n in names]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def processor() -> str:
    """The machine's processor, as `lscpu` names it ("" where there is no lscpu)."""
    try:
        listing = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return ""
    return next((line.split(":", 1)[1].strip() for line in listing.splitlines() if line.startswith("Model name:")), "")


@dataclasses.dataclass
class Pair:
    ours: Measured
    example: Measured

    @property
    def ratio(self) -> float:
        return self.ours.seconds / self.example.seconds


def run_pairs(rows: int, work: str, pairs: int) -> List[Pair]:
    """This pipeline and TFX's example on the same rows, alternating, `pairs` times."""
    done: List[Pair] = []
    for index in range(pairs):
        pair = Pair(run_pipeline(rows, work), run_tfx_example(rows, work))
        done.append(pair)
        print(f"pair {index + 1}: this pipeline {pair.ours.seconds:.1f} s (peak {pair.ours.peak_mb / 1024:.2f} GB), "
              f"TFX's example {pair.example.seconds:.1f} s (peak {pair.example.peak_mb / 1024:.2f} GB), "
              f"ratio {pair.ratio:.3f}", flush=True)
    print(f"median ratio over {len(done)} pairs: {statistics.median(p.ratio for p in done):.3f}", flush=True)
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000, 5_000_000, 10_000_000])
    parser.add_argument("--tfx-example-rows", type=int, default=1_000_000, help="0: skip TFX's example")
    parser.add_argument("--pairs", type=int, default=3, help="alternating pairs at --tfx-example-rows")
    parser.add_argument("--work", default=os.path.join(os.path.expanduser("~"), ".cache", "taxi-tfx-pipeline",
                                                       "bench-scale"))
    parser.add_argument("--doc", default=os.path.join("docs", "scale.md"))
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    print(f"Stack {compat.describe()}; {processor()}", flush=True)
    pairs: List[Pair] = []
    measured: List[Measured] = []
    for rows in args.rows:
        if rows == args.tfx_example_rows and args.pairs:
            pairs = run_pairs(rows, args.work, args.pairs)
            measured.append(sorted((p.ours for p in pairs), key=lambda m: m.seconds)[len(pairs) // 2])
        else:
            measured.append(run_pipeline(rows, args.work))
    if args.tfx_example_rows and not pairs:
        pairs = run_pairs(args.tfx_example_rows, args.work, max(args.pairs, 1))
    checked = max((r for r in args.rows if r <= 1_000_000), default=min(args.rows))
    error_lines = sampling_error(make_data(checked, args.work), checked, args.work)
    input_lines = subprocess.run(
        [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "trainer_input.py"),
         os.path.join(args.work, f"run-{checked}", "out")], check=True, capture_output=True, text=True,
    ).stdout.splitlines()
    image = os.path.splitext(args.doc)[0] + ".png"
    plot(measured, pairs, image)
    write_doc(args.doc, os.path.basename(image), measured, pairs, error_lines, input_lines, checked)
    print(f"Wrote {args.doc} and {image}")


def _pairs_lines(pairs: Sequence[Pair]) -> List[str]:
    rows = pairs[0].ours.rows
    lines = [f"## Against TFX's example ({rows:,} rows), in alternating pairs", "",
             "Each pair: a cold run of this pipeline, then TFX's `taxi_pipeline_native_keras.py` on the same "
             "rows as CSV (its own settings, a fresh `HOME`), one right after the other.", "",
             "| pair | this pipeline | peak | TFX's example | peak | this / TFX's |", "|---|---|---|---|---|---|"]
    for index, pair in enumerate(pairs, 1):
        lines.append(f"| {index} | {pair.ours.seconds:.1f} s | {pair.ours.peak_mb / 1024:.2f} GB | "
                     f"{pair.example.seconds:.1f} s | {pair.example.peak_mb / 1024:.2f} GB | {pair.ratio:.3f} |")
    median = statistics.median(p.ratio for p in pairs)
    lines += [f"| median | {statistics.median(p.ours.seconds for p in pairs):.1f} s | | "
              f"{statistics.median(p.example.seconds for p in pairs):.1f} s | | **{median:.3f}** |", "",
              f"Goal: at most {RATIO_GOAL}x, peak at most {MEMORY_GOAL_GB} GB: "
              + ("met." if median <= RATIO_GOAL and all(p.ours.peak_mb <= MEMORY_GOAL_GB * 1024 for p in pairs)
                 else "not met.")]
    timed = [p.example.components for p in pairs if p.example.components]
    if timed:
        lines.append("TFX's example per component (first pair): "
                     + ", ".join(f"{k} {v:.0f} s" for k, v in timed[0].items()))
    return lines


def write_doc(path: str, image: str, measured: Sequence[Measured], pairs: Sequence[Pair], error_lines: List[str],
              input_lines: List[str], checked: int) -> None:
    by_rows = {m.rows: m for m in measured}
    lines = ["# Scale: rows against time and memory", "",
             "Generated by `make bench-scale` (`benchmarks/scale.py`); do not edit by hand.",
             f"Stack {compat.describe()}; {processor() or 'processor unknown'}, {os.cpu_count()} cores, "
             f"{psutil.virtual_memory().total / 2**30:.0f} GB. Synthetic rows (`taxi-pipeline make-data --rows N`, "
             "8 spans, seed 0): for time and memory, not model quality.", "",
             "Each run is cold (a fresh output root), in a process of its own; peak RSS is the summed resident "
             "memory of the run and every process it started (Beam workers), sampled every 0.2 s. Component "
             "times are the run's progress lines.", "",
             *_table(measured), "", f"![seconds per component against rows]({image})", ""]
    if 100_000 in by_rows and 1_000_000 in by_rows:
        lines.append(f"- t(1M) / t(100k) = {by_rows[1_000_000].seconds / by_rows[100_000].seconds:.2f}")
    if 1_000_000 in by_rows and 5_000_000 in by_rows:
        lines.append(f"- peak RSS(5M) / peak RSS(1M) = "
                     f"{by_rows[5_000_000].peak_mb / by_rows[1_000_000].peak_mb:.2f}")
    for rows, limit in TIME_GOALS.items():
        if rows in by_rows:
            m = by_rows[rows]
            lines.append(f"- {rows:,} rows: {m.seconds:.0f} s (goal at most {limit} s), peak "
                         f"{m.peak_mb / 1024:.2f} GB (goal at most {MEMORY_GOAL_GB} GB), exit {m.exit_code}")
    if pairs:
        lines += ["", *_pairs_lines(pairs)]
    lines += ["", f"## The data gate's sample ({checked:,} rows)", "",
              "Drift distances between the newest two spans, from every row and from the gate's sample:", "",
              *error_lines, "", f"## The Trainer's input paths ({checked:,} rows)", "", *input_lines, "",
              "## Reproduce", "", "    make bench-scale", ""]
    with open(path, "w") as handle:
        handle.write("\n".join(lines))

if __name__ == "__main__":
    main()
