"""A hundred thousand synthetic rows, end to end through the command line: the run must
push, as on `data/`. Its span folders are named as people make them. (The Beam work of the
scale path in worker processes is tested on its own: tests/components/custom/test_ingest.py
and test_span_statistics.py.)"""

import glob

import pytest

from tests.helpers import assert_ignored_in_log, write_leftovers

pytestmark = pytest.mark.slow

ROWS = 100_000


@pytest.mark.timeout(900)
def test_a_hundred_thousand_rows_push(workspace, taxi_pipeline, last_run):
    made = taxi_pipeline("make-data", "--rows", str(ROWS), "--spans", "4", "--out", str(workspace.data))
    assert made.returncode == 0, made.stderr
    # Zero-padded numbers, as some exports name them, and hidden and bookkeeping files,
    # editor leftovers and notes beside them: over every span, the spans are read and the
    # rest is listed as ignored (in a window: tests/test_retraining.py).
    for span in range(1, 5):
        (workspace.data / f"span-{span}").rename(workspace.data / f"span-{span:03d}")
    leftovers = write_leftovers(workspace.data, "span-003", "span-004")
    result = taxi_pipeline("run", *workspace.locations())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Pushed a new model version" in result.stdout
    assert "Warning" not in result.stderr
    assert "Trainer: epoch 1 of 8: train loss" in result.stdout  # progress while the Trainer runs
    record = last_run(workspace.out)
    assert record["outcome"] == "pushed"
    # The eval split is the hash split's one bucket of five: about a fifth of the rows.
    assert 0.17 * ROWS < record["eval_metrics"]["example_count"] < 0.23 * ROWS
    assert record["spans"] == [1, 2, 3, 4]
    assert record["span_checks"] == {str(span): [] for span in range(1, 5)}
    assert_ignored_in_log(result, leftovers)
    # ImportExampleGen wrote one file per input file and split, each record once (and no leftover).
    written = glob.glob(str(workspace.out / "pipeline_root" / "ImportExampleGen" / "examples" / "*" / "Split-*" / "*"))
    assert len(written) == 2 * 4
    (log_line,) = [line for line in result.stdout.splitlines() if line.startswith("Full log: ")]
    log = open(log_line[len("Full log: "):]).read()
    assert f"{ROWS} rows: Beam runs FnApiRunner in_memory with 1 worker(s) in this process for every component" in log
    assert len(workspace.versions()) == 1
