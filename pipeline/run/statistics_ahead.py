"""The data gate's per-span statistics computed ahead, in a process started with a local
run, on the core the run's start-up leaves idle.

A run's start-up (importing TensorFlow, TFX, Beam and TFMA, about 2 s) and its first nodes
hold one core; the data gate then computes the statistics of every span from the spans'
files (`components.custom.span_statistics`), which depend on nothing the run computes
before it: the files under the data root and the pipeline's schema. `start` starts

    python -m pipeline.run.statistics_ahead DATA_ROOT SCHEMA_FILE OUTPUT [BEAM_ARG ...]

before the run's own imports; it computes them exactly as the gate would in its process
(`span_statistics.statistics_of_spans`, with the patches of the run's process that act
on them, `pipeline.patches.for_statistics_in_memory`) and writes them with the key of
what they were computed from (`span_statistics.write_ahead`), taken before the files
were read and checked again after. The gate takes them only when its own key (the same
files, their inode, size and times, the same schema, the whole of each span read) is
theirs (`span_statistics.computed_ahead`), and computes them otherwise: the process is a
shortcut, never a source of its own. The gate waits for it at most `WAIT_SECONDS`.

It computes nothing where the gate would not compute the spans' statistics in its
process: window mode (the gate reads StatisticsGen's statistics of each span), Beam sent
elsewhere, more rows than the gate reads whole (`span_statistics.SPAN_SAMPLE_ROWS` a span
on average) or than it computes in its process (`span_statistics.IN_PROCESS_ROWS`): it
stops reading at that many rows, which bounds the records it holds.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
from typing import Dict, Iterator, List, Optional

from pipeline import config

# The longest the gate waits for the statistics computed ahead before computing them
# itself: its own computation takes 1-4 s in its process (span_statistics.IN_PROCESS_ROWS).
WAIT_SECONDS = 30
# The process's output, in its scratch folder.
OUTPUT_FILE = "span-FeatureStats.pb"
# Its standard error, for the log when it ended without statistics.
ERRORS_FILE = "stderr.txt"
# What it exits with when it computed nothing because the gate would not use it.
DECLINED = 3


class Ahead:
    """The process started with the run, and its scratch folder."""

    def __init__(self, process: subprocess.Popen, folder: str):
        self.process, self.folder = process, folder

    def wait(self) -> Optional[str]:
        """Its statistics' file once it has ended, None when it wrote none."""
        try:
            code = self.process.wait(timeout=WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            logging.info("span statistics ahead: not done after %d s, stopped", WAIT_SECONDS)
            return None
        if code == DECLINED:
            return None
        if code != 0:
            with open(os.path.join(self.folder, ERRORS_FILE), errors="replace") as handle:
                tail = " ".join(handle.read().strip().splitlines()[-3:])
            logging.info("span statistics ahead: the process ended with status %d: %s", code, tail)
            return None
        return os.path.join(self.folder, OUTPUT_FILE)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(os.path.dirname(self.folder), ignore_errors=True)


def start(run_config: config.RunConfig) -> Optional[Ahead]:
    """Starts the process for `run_config`'s spans, unless the gate reads StatisticsGen's
    statistics of each span (window mode) or the data root is not on this machine.

    Its scratch folder is under the output root (`config.STATISTICS_AHEAD_DIR`), which the
    run holds locked: what a run killed outright left there is deleted by the next."""
    from components.support import files

    if run_config.settings.window_size is not None or files.is_remote(run_config.data_root):
        return None
    scratch = os.path.join(run_config.output_root, config.STATISTICS_AHEAD_DIR)
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    folder = tempfile.mkdtemp(dir=scratch)
    try:
        with open(os.path.join(folder, ERRORS_FILE), "w") as errors:
            process = subprocess.Popen(
                [sys.executable, "-m", __name__, run_config.data_root, config.schema_file(),
                 os.path.join(folder, OUTPUT_FILE), *run_config.settings.beam_args],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors,
                # TensorFlow's C++ start-up lines would bury a failure's last lines, which the log gets.
                env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
            )
    except OSError as err:  # a shortcut only: the gate computes them
        shutil.rmtree(folder, ignore_errors=True)
        logging.info("span statistics: no process to compute them ahead (%s)", err)
        return None
    logging.info("span statistics: computed ahead in a process started with the run (pid %d)", process.pid)
    return Ahead(process, folder)


@contextlib.contextmanager
def started(run_config: config.RunConfig) -> Iterator[Optional[Ahead]]:
    """`start` for the block; the process ended and its folder deleted on leaving."""
    ahead = None
    try:
        ahead = start(run_config)
        yield ahead
    finally:
        if ahead is not None:
            ahead.stop()


def compute(data_root: str, schema_file: str, output: str, beam_args: List[str]) -> int:
    """The process's work (see the module doc): 0 when it wrote the statistics, `DECLINED`
    when the gate would not compute them in its process or a file changed while read."""
    import tensorflow_data_validation as tfdv
    from apache_beam.options.pipeline_options import PipelineOptions

    from components.custom import span_statistics
    from components.support import spans
    from pipeline import patches
    from pipeline.patches import machinery

    if not span_statistics.beam_runs_here(PipelineOptions(beam_args)):
        return DECLINED
    schema = tfdv.load_schema_text(schema_file)
    found = spans.list_spans(data_root)
    key = span_statistics.ahead_key(found, schema, 1.0)
    limit = min(span_statistics.IN_PROCESS_ROWS, span_statistics.SPAN_SAMPLE_ROWS * len(found))
    records: Dict[int, List[bytes]] = {}
    read = 0
    for span in found:
        records[span.number] = []
        for batch in span_statistics.span_batches(span, 1.0):
            records[span.number] += batch
            read += len(batch)
            if read > limit:
                return DECLINED
    if span_statistics.ahead_key(found, schema, 1.0) != key:  # a file changed while it was read
        return DECLINED
    with machinery.patched(patches.for_statistics_in_memory() if machinery.enabled() else []):
        result = span_statistics.statistics_of_spans(found, lambda span: records.pop(span.number), schema)
    span_statistics.write_ahead(output, key, result)
    return 0


def main(argv: List[str]) -> None:
    """Computes, then ends with `os._exit`: the gate waits for the exit, and an
    interpreter's teardown with TensorFlow loaded takes longer than the work (0.7 s)."""
    from pipeline import patches
    from pipeline.patches import machinery
    from pipeline.run import process

    try:
        patches.defer_imports()  # as the run's process: modules no work here calls load when used
        with process.frozen_imports(machinery.enabled()):
            from components.custom import span_statistics  # noqa: F401  (TensorFlow, TFDV, Beam)
        code = compute(argv[0], argv[1], argv[2], argv[3:])
    except Exception:  # noqa: BLE001  (any failure: the gate computes the statistics itself)
        traceback.print_exc()
        code = 1
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
