"""The soak, short: five weekly retrains on one output root (benchmarks/soak.py, as
`make bench-soak` runs it for a year), with a bad span, a kill and retention after
every run; then `gc` by hand. Every decision right, disk bounded, nothing deleted read."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys

import pytest

from tests.helpers import REPO_ROOT
from tests.pages import rendered

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

WEEKS = 5
KILLS = 1
KEEP_RUNS = 2


@pytest.fixture(scope="module")
def soak(tmp_path_factory):
    work = tmp_path_factory.mktemp("soak")
    figures = work / "weeks.json"
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "soak.py"), "--weeks", str(WEEKS), "--rows", "1500",
         "--window", "2", "--kills", str(KILLS), "--bad-weeks", "4", "--keep-runs", str(KEEP_RUNS),
         "--keep-versions", "1", "--seed", "3",
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
    assert len(killed) == KILLS
    for week in weeks:
        if week["kind"] != "bad":
            # Killed or not, the week's data is decided once: one push when blessed.
            assert week["exit"] in (0, 3) and week["pushes"] == (week["exit"] == 0), week
    assert all(not w["broken"] for w in weeks)


def test_retention_bounds_the_runs_kept_and_leaves_no_folder_of_a_removed_run(soak):
    work, weeks, _ = soak
    with sqlite3.connect(work / "out" / "metadata.sqlite") as db:
        models = db.execute(
            "SELECT a.uri FROM Artifact a JOIN Type t ON a.type_id = t.id WHERE t.name = 'Model' AND a.state = 2"
        ).fetchall()
        runs = db.execute("SELECT COUNT(*) FROM Context c JOIN Type t ON c.type_id = t.id "
                          "WHERE t.name = 'pipeline_run'").fetchone()[0]
        removed = db.execute("SELECT COUNT(*) FROM ContextProperty WHERE name = 'gc_removed'").fetchone()[0]
    served = len(weeks[-1]["versions"])
    by_node = {node: {uri for (uri,) in models if f"/pipeline_root/{node}/" in uri}
               for node in ("Trainer", "ServingBaseline")}
    assert by_node["Trainer"] | by_node["ServingBaseline"] == {uri for (uri,) in models}
    # Kept: the newest runs and those behind the served versions; the rest removed, at
    # least one. (A push keeps the two versions models.config loaded before it, so a week
    # that blesses nothing can leave three served versions and no run beyond the bound.)
    assert len(by_node["Trainer"]) <= KEEP_RUNS + served
    assert removed >= runs - (KEEP_RUNS + served)
    assert removed > 0, (runs, served)
    # The output folders of the Trainer and of the serving baseline (the copy of the version
    # that served) are those of the models kept, nothing of removed or killed executions.
    for node, kept in by_node.items():
        assert {str(path) for path in (work / "out" / "pipeline_root" / node / "model").iterdir()} == kept, node


# What no execution may do: read an artifact after `gc` marked it (to delete it).
LATE_READS = (
    "SELECT e.id, a.uri FROM Event v JOIN Execution e ON v.execution_id = e.id JOIN Artifact a ON v.artifact_id = a.id "
    "JOIN ArtifactProperty p ON p.artifact_id = a.id AND p.name = 'gc_marked_at' "
    "WHERE v.type = 3 AND e.create_time_since_epoch > p.double_value * 1000"
)
# A `gc` killed (SIGKILL) right after it deleted its first path: the artifacts are marked,
# most files are still there.
KILLED_GC = """
import os, signal, sys
from pipeline import config
from pipeline.run import retention
deleted = retention._delete
def delete_then_die(path):
    if deleted(path):
        os.kill(os.getpid(), signal.SIGKILL)
    return False
retention._delete = delete_then_die
out, serving = sys.argv[1:3]
retention.collect(config.RunConfig(output_root=out, serving_dir=serving).resolved(), keep_runs=1)
"""


def _states(work):
    with sqlite3.connect(work / "out" / "metadata.sqlite") as db:
        return db.execute("SELECT id, uri, state FROM Artifact").fetchall()


def test_the_quality_page_shows_every_evaluated_week_those_gc_removed_too(soak, taxi_pipeline):
    work, weeks, _ = soak
    done = taxi_pipeline("history", "--page", "--limit", "1", "--output-root", str(work / "out"))
    assert done.returncode == 0, done.stderr
    page = done.stdout.splitlines()[-1].removeprefix("Page: ")
    assert page == str(work / "out" / "history.html")
    shown = rendered(page)
    table = shown.text_by_id["overall"]
    # Every week that evaluated a candidate (not the bad one), each on its new span.
    for week in weeks:
        if week["exit"] in (0, 3):
            assert f"span {week['span']}" in table, (week, table)
    assert f"span {next(w['span'] for w in weeks if w['kind'] == 'bad')}" not in table
    assert "(files removed by gc)" in table  # figures gc kept in MLMD, not read from deleted files
    served = [float(x) for x in re.findall(r"\b(0\.\d{4})\b", table)]
    assert len(served) >= 2 * (sum(w["exit"] in (0, 3) for w in weeks) - 1)  # served and candidate AUCs
    assert all(0.5 < auc <= 1.0 for auc in served)
    assert len(shown.images) >= 2 and all(src.startswith("data:image/png;base64,") for src in shown.images)


def test_no_execution_read_an_artifact_after_it_was_deleted(soak):
    work, _, _ = soak
    with sqlite3.connect(work / "out" / "metadata.sqlite") as db:
        late_reads = db.execute(LATE_READS).fetchall()
    deleted = [uri for _, uri, state in _states(work) if state == 4]
    assert deleted, f"retention deleted nothing in {WEEKS} weeks"
    assert late_reads == []
    assert not [uri for uri in deleted if os.path.exists(uri)]


@pytest.mark.after_module
def test_a_killed_gc_leaves_nothing_a_run_can_read_and_the_next_gc_finishes(soak, taxi_pipeline):
    """Killed midway, `gc` leaves old runs' artifacts marked; a run of the previous week's
    window (its cache would match that week's executions) reads none of them; `gc` then
    finishes, and `gc` by hand lists, removes and says what it kept."""
    work, weeks, _ = soak
    out, serving = work / "out", work / "serving"
    # An operator reclaims the serving folder's disk: only the newest version stays. The
    # runs behind the others are no longer kept.
    versions = sorted(int(v) for v in os.listdir(serving / "big_tip") if v.isdigit())
    for version in versions[:-1]:
        shutil.rmtree(serving / "big_tip" / str(version))
    killed = subprocess.run([sys.executable, "-c", KILLED_GC, str(out), str(serving)], capture_output=True,
                            text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr[-2000:]
    marked = [(id_, uri) for id_, uri, state in _states(work) if state == 3]
    assert marked and [uri for _, uri in marked if os.path.exists(uri)], marked
    # The window of the week before: the newest span out of the data root, for one call.
    newest = work / "data" / f"span-{weeks[-1]['span']}"
    aside = work / "newest-span"
    newest.rename(aside)
    try:
        again = taxi_pipeline("retrain", "--force", "--keep-everything", "--window", "2", "--data-root",
                              str(work / "data"), "--output-root", str(out), "--serving-dir", str(serving))
    finally:
        aside.rename(newest)
    assert again.returncode in (0, 3), again.stdout[-2000:] + again.stderr[-2000:]
    with sqlite3.connect(out / "metadata.sqlite") as db:
        assert db.execute(LATE_READS).fetchall() == []
    where = ["--output-root", str(out), "--serving-dir", str(serving)]
    dry = taxi_pipeline("gc", "--keep-runs", "1", "--dry-run", *where)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[0] == "Would delete:"
    listed = [line.strip() for line in dry.stdout.splitlines()[1:] if line.startswith("  /")]
    assert listed and all(os.path.exists(path) for path in listed)
    real = taxi_pipeline("gc", "--keep-runs", "1", *where)
    assert real.returncode == 0, real.stderr
    assert real.stdout.startswith("Removed ")
    assert not [path for path in listed if os.path.exists(path)]
    states = {id_: (uri, state) for id_, uri, state in _states(work)}
    assert all(states[id_][1] == 4 and not os.path.exists(uri) for id_, uri in marked)
    history = taxi_pipeline("history", "--limit", str(WEEKS + 4), "--output-root", str(out))
    assert history.returncode == 0, history.stderr
    assert "files removed by gc" in history.stdout
    assert "files removed" not in history.stdout.splitlines()[0]  # the newest run is kept
    # A removed run that pushed still shows its AUC: the figure gc kept in MLMD.
    removed_pushes = [line for line in history.stdout.splitlines() if "files removed" in line and " pushed " in line]
    assert removed_pushes and all(" auc 0." in line for line in removed_pushes), history.stdout
    versions = sorted(int(v) for v in os.listdir(serving / "big_tip") if v.isdigit())
    for version in versions:
        traced = taxi_pipeline("lineage", str(version), *where)
        assert traced.returncode == 0 and "Evaluation: blessed" in traced.stdout, traced.stdout + traced.stderr
