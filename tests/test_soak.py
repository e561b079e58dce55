"""The soak, short: eight weekly retrains on one output root (benchmarks/soak.py, as
`make bench-soak` runs it for a year), with a bad span, two kills and retention after
every run; then `gc` by hand. Every decision right, disk bounded, nothing deleted read."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from tests.helpers import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

WEEKS = 8
KEEP_RUNS = 2


@pytest.fixture(scope="module")
def soak(tmp_path_factory):
    work = tmp_path_factory.mktemp("soak")
    figures = work / "weeks.json"
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "soak.py"), "--weeks", str(WEEKS), "--rows", "1500",
         "--window", "2", "--kills", "2", "--bad-weeks", "4", "--keep-runs", str(KEEP_RUNS), "--seed", "3",
         "--work", str(work), "--json", str(figures)],
        capture_output=True, text=True, timeout=1400,
    )
    assert figures.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    return work, json.loads(figures.read_text()), done


def test_every_week_decides_what_its_data_calls_for(soak):
    _, weeks, done = soak
    assert done.returncode == 0, done.stdout[-3000:]
    assert [w["week"] for w in weeks] == list(range(1, WEEKS + 1))
    (bad,) = [w for w in weeks if w["kind"] == "bad"]
    assert bad["exit"] == 4 and bad["pushes"] == 0
    killed = [w for w in weeks if w["kind"] == "killed"]
    assert len(killed) == 2
    for week in weeks:
        if week["kind"] != "bad":
            # Killed or not, the week's data is decided once: one push when blessed.
            assert week["exit"] in (0, 3) and week["pushes"] == (week["exit"] == 0), week
    assert all(not w["broken"] for w in weeks)


def test_retention_bounds_the_runs_kept_and_keeps_what_serves(soak):
    work, weeks, _ = soak
    pipeline_root = work / "out" / "pipeline_root"
    with sqlite3.connect(work / "out" / "metadata.sqlite") as db:
        live_models = db.execute(
            "SELECT COUNT(*) FROM Artifact a JOIN Type t ON a.type_id = t.id WHERE t.name = 'Model' AND a.state = 2"
        ).fetchone()[0]
        removed = db.execute("SELECT COUNT(*) FROM ContextProperty WHERE name = 'gc_removed'").fetchone()[0]
    served = len(weeks[-1]["versions"])
    # Kept: the newest runs, those behind the served versions, and the warm start's.
    assert live_models <= KEEP_RUNS + served + 1
    assert removed >= WEEKS - (KEEP_RUNS + served + 1)
    trainer_outputs = sorted(os.listdir(pipeline_root / "Trainer" / "model"))
    assert len(trainer_outputs) == live_models, trainer_outputs


def test_no_execution_read_an_artifact_after_it_was_deleted(soak):
    work, _, _ = soak
    with sqlite3.connect(work / "out" / "metadata.sqlite") as db:
        late_reads = db.execute(
            "SELECT e.id, a.uri FROM Event v JOIN Execution e ON v.execution_id = e.id "
            "JOIN Artifact a ON v.artifact_id = a.id "
            "WHERE v.type = 3 AND a.state IN (3, 4) AND e.create_time_since_epoch > a.last_update_time_since_epoch"
        ).fetchall()
        deleted = db.execute("SELECT uri FROM Artifact WHERE state = 4").fetchall()
    assert deleted, "retention deleted nothing in eight weeks"
    assert late_reads == []
    assert not [uri for (uri,) in deleted if os.path.exists(uri)]


def test_gc_by_hand_lists_then_removes_and_history_says_so(soak, taxi_pipeline):
    work, weeks, _ = soak
    where = ["--output-root", str(work / "out"), "--serving-dir", str(work / "serving")]
    dry = taxi_pipeline("gc", "--keep-runs", "1", "--dry-run", *where)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[0] == "Would delete:"
    listed = [line.strip() for line in dry.stdout.splitlines()[1:] if line.startswith("  /")]
    assert listed and all(os.path.exists(path) for path in listed)
    real = taxi_pipeline("gc", "--keep-runs", "1", *where)
    assert real.returncode == 0, real.stderr
    assert real.stdout.startswith("Removed ")
    assert not [path for path in listed if os.path.exists(path)]
    history = taxi_pipeline("history", "--limit", str(WEEKS + 4), *where)
    assert history.returncode == 0, history.stderr
    assert "files removed by gc" in history.stdout
    assert history.stdout.splitlines()[0].count("files removed") == 0  # the newest run is kept
    for version in weeks[-1]["versions"]:
        traced = taxi_pipeline("lineage", str(version), *where)
        assert traced.returncode == 0 and "Evaluation: blessed" in traced.stdout, traced.stdout + traced.stderr
