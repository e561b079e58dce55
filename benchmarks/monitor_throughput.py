"""`taxi-pipeline monitor`'s throughput: logged requests judged per second, end to end
(the command in a subprocess, as an operator runs it), from 10k to 1M requests.

The requests are data/'s examples without their label, repeated to the size asked, in
GZIP TFRecords of tf.Example (4 files) or in JSON lines of REST bodies (base64
tf.Examples, 10 per line). The output root must hold a run that pushed the version the
serving folder serves; its training statistics are computed by a first, untimed call.

    python benchmarks/monitor_throughput.py --output-root out --serving-dir serving_model \\
        [--sizes 10000,100000,1000000] [--format examples|json]
"""

from __future__ import annotations

import argparse
import base64
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import tensorflow as tf

from pipeline.data import dataset

FILES = 4
LINE_REQUESTS = 10


def write_requests(folder: str, examples: list, size: int, file_format: str) -> None:
    os.makedirs(folder)
    per_file = -(-size // FILES)
    for index in range(FILES):
        chosen = [examples[i % len(examples)] for i in range(index * per_file, min(size, (index + 1) * per_file))]
        if file_format == "json":
            with open(os.path.join(folder, f"requests-{index}.jsonl"), "w") as handle:
                for start in range(0, len(chosen), LINE_REQUESTS):
                    body = {"instances": [{"b64": base64.b64encode(r).decode()}
                                          for r in chosen[start:start + LINE_REQUESTS]]}
                    handle.write(json.dumps(body) + "\n")
        else:
            with tf.io.TFRecordWriter(os.path.join(folder, f"requests-{index}.tfrecord.gz"), "GZIP") as writer:
                for record in chosen:
                    writer.write(record)


def monitor(folder: str, output_root: str, serving_dir: str) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "taxi-pipeline"), "monitor", "--requests",
         os.path.join(folder, "*"), "--output-root", output_root, "--serving-dir", serving_dir],
        capture_output=True, text=True,
    )
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 4):
        raise SystemExit(done.stdout + done.stderr)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-root", required=True)
    parser.add_argument("--serving-dir", required=True)
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--format", choices=("examples", "json"), default="examples")
    args = parser.parse_args()
    examples = dataset.requests(args.data_root)
    work = tempfile.mkdtemp(prefix="monitor-bench-")
    try:
        warm = os.path.join(work, "warm")
        write_requests(warm, examples, 1000, args.format)
        monitor(warm, args.output_root, args.serving_dir)  # the training statistics, once
        print(f"{'requests':>10} {'format':>9} {'MB':>8} {'seconds':>8} {'requests/s':>11}")
        for size in (int(s) for s in args.sizes.split(",")):
            folder = os.path.join(work, str(size))
            write_requests(folder, examples, size, args.format)
            megabytes = sum(os.path.getsize(p) for p in glob.glob(os.path.join(folder, "*"))) / 1e6
            seconds = monitor(folder, args.output_root, args.serving_dir)
            print(f"{size:>10} {args.format:>9} {megabytes:8.1f} {seconds:8.1f} {size / seconds:11.0f}", flush=True)
            shutil.rmtree(folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
