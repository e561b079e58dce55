"""Wall time of `taxi-pipeline run`: cold (fresh output root), then unchanged re-run.

    python benchmarks/pipeline_wall_time.py [--data-root data] [--repeat 1]

Each run is a separate process, timed from start to exit, exactly as a user runs it.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time


def _timed_run(data_root: str, output_root: str, serving_dir: str) -> tuple:
    command = [os.path.join(os.path.dirname(sys.executable), "taxi-pipeline"), "run",
               "--data-root", data_root, "--output-root", output_root, "--serving-dir", serving_dir]
    started = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if completed.returncode != 0:
        sys.exit(f"run failed with exit {completed.returncode}:\n{completed.stdout}\n{completed.stderr}")
    return seconds, completed.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    for attempt in range(args.repeat):
        with tempfile.TemporaryDirectory() as scratch:
            output_root, serving = os.path.join(scratch, "out"), os.path.join(scratch, "serving")
            cold, cold_out = _timed_run(os.path.abspath(args.data_root), output_root, serving)
            warm, warm_out = _timed_run(os.path.abspath(args.data_root), output_root, serving)
            versions = os.listdir(os.path.join(serving, "big_tip"))
            print(f"run {attempt + 1}: cold {cold:.1f} s, unchanged re-run {warm:.1f} s, "
                  f"pushed versions {len(versions)}")
            if attempt == 0:
                print("cold run output:\n" + cold_out + "re-run output:\n" + warm_out)


if __name__ == "__main__":
    main()
