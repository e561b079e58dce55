"""`taxi-pipeline run` with its Beam work in this process (the default) and on Beam's
portable stack (`taxi-pipeline beam-services`: a job service and a worker pool), per node
and in all, with peak memory.

    python benchmarks/beam_portable.py [--data-root data | --rows 100000] [--repeat 1]

Each run is a fresh output root, a separate process, as a user runs it; the two kinds
alternate. Peak memory is the largest sum of resident memory over the launcher's process
tree, and over the services' tree (the job service and its workers), sampled every 0.2 s.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, Iterable, List, Tuple

from components import compat
from pipeline.beam import services as beam_services

NODE_LINE = re.compile(r"^\[\s*[\d.]+ s\] (\w+)\s+([\d.]+) s$")
BEAM_NODES = ("ImportExampleGen", "StatisticsGen", "DataGate", "Transform", "Evaluator")


def _tree_rss_kb(roots: Iterable[int]) -> int:
    """Resident memory of `roots` and all their descendants, in KB."""
    parents: Dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as stat:
                    parents[int(name)] = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    members, frontier = set(roots), list(roots)
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in members]
        members.update(children)
        frontier.extend(children)
    total = 0
    for pid in members:
        try:
            with open(f"/proc/{pid}/status") as status:
                total += next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            continue
    return total


class PeakMemory(threading.Thread):
    """The largest resident memory of each named process tree while it runs."""

    def __init__(self, roots: Dict[str, int]):
        super().__init__(daemon=True)
        self.roots, self.peaks, self.done = roots, {name: 0 for name in roots}, threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.2):
            for name, root in self.roots.items():
                self.peaks[name] = max(self.peaks[name], _tree_rss_kb([root]))


def _run(data_root: str, scratch: str, beam_flags: List[str], services_pid: int) -> Tuple[float, Dict[str, float],
                                                                                         Dict[str, int]]:
    command = [os.path.join(os.path.dirname(sys.executable), "taxi-pipeline"), "run", "--data-root", data_root,
               "--output-root", os.path.join(scratch, "out"), "--serving-dir", os.path.join(scratch, "serving"),
               *beam_flags]
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    roots = {"launcher": process.pid}
    if beam_flags:
        roots["services"] = services_pid
    memory = PeakMemory(roots)
    memory.start()
    stdout, stderr = process.communicate()
    seconds = time.perf_counter() - started
    memory.done.set()
    memory.join()
    if process.returncode != 0:
        sys.exit(f"run failed with exit {process.returncode}:\n{stdout}\n{stderr}")
    nodes = {match[1]: float(match[2]) for match in map(NODE_LINE.match, stdout.splitlines()) if match}
    return seconds, nodes, memory.peaks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--rows", type=int, default=None, help="synthetic data of this many rows instead")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    print(f"Stack {compat.describe()}")
    with tempfile.TemporaryDirectory() as scratch:
        data_root = os.path.abspath(args.data_root)
        if args.rows:
            data_root = os.path.join(scratch, "data")
            subprocess.run([os.path.join(os.path.dirname(sys.executable), "taxi-pipeline"), "make-data",
                            "--rows", str(args.rows), "--out", data_root], check=True, capture_output=True)
        results: Dict[str, List[Tuple[float, Dict[str, float], Dict[str, int]]]] = {"in process": [], "portable": []}
        with beam_services.in_background(os.path.join(scratch, "beam-services.log")) as (endpoints, services):
            for attempt in range(args.repeat):
                for kind in results:
                    flags = endpoints.flags() if kind == "portable" else []
                    run_dir = os.path.join(scratch, f"{kind}-{attempt}".replace(" ", "-"))
                    results[kind].append(_run(data_root, run_dir, flags, services.pid))
    print(f"Data: {args.rows or 'data/'} rows; median of {args.repeat} run(s) each")
    print(f"{'':18}{'in process':>12}{'portable':>12}")
    for node in BEAM_NODES + ("Trainer",):
        medians = [statistics.median(run[1].get(node, 0.0) for run in results[kind]) for kind in results]
        print(f"{node:18}{medians[0]:>10.1f} s{medians[1]:>10.1f} s")
    walls = [statistics.median(run[0] for run in results[kind]) for kind in results]
    print(f"{'whole run':18}{walls[0]:>10.1f} s{walls[1]:>10.1f} s")
    for tree in ("launcher", "services"):
        peaks = [statistics.median(run[2].get(tree, 0) for run in results[kind]) / 1024 for kind in results]
        print(f"{'peak ' + tree:18}{peaks[0]:>9.0f} MB{peaks[1]:>9.0f} MB")


if __name__ == "__main__":
    main()
