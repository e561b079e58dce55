"""A year of weekly retrains on one output root and serving folder, measured.

    python benchmarks/soak.py [--weeks 52] [--rows 20000] [--window 2] [--kills 5]
                              [--bad-weeks 20,40] [--keep-runs 10] [--keep-versions 3]
                              [--markdown docs/soak.md] [--json docs/soak.json]

Writes `--weeks` + the window's spans of synthetic data (`make-data --rows`, with a slow
drift in trip_miles), then, week after week, adds the next span to a live data root and
calls `taxi-pipeline retrain` as a scheduler would, retention on (`--keep-runs`). In the
bad weeks the new span is damaged (an unknown payment type in one row in twenty, or the
`fare` feature missing from every row): the call must refuse it (exit 4); the span is then
re-delivered repaired, as an upstream fix would, and the next weeks train on it. In `--kills`
weeks drawn at random, the call is killed (SIGKILL to its process group) at a random
point within the shortest of the last three clean weeks' times (a call that finishes
first is a clean week, and the kill moves to the next week), and the next call, as the
schedule's next, must recover: one push for that data.

Per week it records the outcome, exit status, wall time, output-root bytes, MLMD file
bytes and row counts and serving versions; in some weeks, and the last, the time of the
MLMD queries behind `history`, `lineage` and the run page, in one process. It prints a
Markdown table, writes it with a summary of the goals to `--markdown` and a plot beside
it, and the raw figures to `--json`. Exits 1 when a week's decision is not the one its
data calls for or a served version's lineage is broken.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

BIN = os.path.dirname(sys.executable)
CLI = os.path.join(BIN, "taxi-pipeline")
MODEL = "big_tip"
EXIT_OUTCOMES = {0: "pushed", 3: "not blessed", 4: "data rejected", 5: "locked", 6: "serving check failed"}
TABLES = ("Artifact", "Execution", "Event", "Context")

# Run in a fresh process: the MLMD reads of `history`, `lineage VERSION` and the page.
QUERIES = """
import json, sys, time
from pipeline import config
from pipeline.inspect import lineage, run_details
from pipeline.inspect.run_report import connect
out, serving = sys.argv[1:3]
run_config = config.RunConfig(output_root=out, serving_dir=serving).resolved()
name = run_config.settings.pipeline_name
times = {}
started = time.perf_counter(); lineage.history(run_config.metadata, name, 20)
times["history"] = time.perf_counter() - started
versions = sorted(int(v) for v in __import__("os").listdir(run_config.model_serving_dir) if v.isdigit())
broken = []
for version in versions:
    started = time.perf_counter()
    text = lineage.lineage(run_config.metadata, run_config.model_serving_dir, version)
    times["lineage"] = max(times.get("lineage", 0.0), time.perf_counter() - started)
    if "trained by the Trainer" not in text or "Evaluation: blessed" not in text:
        broken.append(version)
newest = lineage.run_ids(connect(run_config.metadata))[0]
started = time.perf_counter(); run_details.read(run_config.metadata, name, newest)
times["page"] = time.perf_counter() - started
print(json.dumps({"times": times, "broken": broken, "versions": versions}))
"""


@dataclasses.dataclass
class Week:
    week: int
    span: int
    kind: str  # clean, bad, killed
    outcome: str
    exit: int
    seconds: float
    killed_after: Optional[float] = None
    output_bytes: int = 0
    mlmd_bytes: int = 0
    rows: Dict[str, int] = dataclasses.field(default_factory=dict)
    versions: List[int] = dataclasses.field(default_factory=list)
    pushes: int = 0
    queries: Dict[str, float] = dataclasses.field(default_factory=dict)
    broken: List[int] = dataclasses.field(default_factory=list)
    expected: str = ""
    # The call's last line: what it decided, and why.
    said: str = ""


def _du(path: str) -> int:
    return sum(os.path.getsize(os.path.join(folder, name))
               for folder, _, names in os.walk(path) for name in names
               if not os.path.islink(os.path.join(folder, name)))


def _rows(database: str) -> Dict[str, int]:
    if not os.path.exists(database):
        return {}
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as connection:
        return {table: connection.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] for table in TABLES}


def _versions(serving: str) -> List[int]:
    folder = os.path.join(serving, MODEL)
    return sorted(int(v) for v in os.listdir(folder) if v.isdigit()) if os.path.isdir(folder) else []


def _damage(span_dir: str, kind: str) -> None:
    """An unknown payment type in one row in twenty, or no `fare` in any row."""
    import tensorflow as tf

    for name in sorted(os.listdir(span_dir)):
        path = os.path.join(span_dir, name)
        records = []
        for index, record in enumerate(tf.data.TFRecordDataset(path, compression_type="GZIP").as_numpy_iterator()):
            example = tf.train.Example.FromString(record)
            if kind == "payment" and index % 20 == 0:
                example.features.feature["payment_type"].bytes_list.value[:] = [b"Bitcoin"]
            elif kind == "missing":
                del example.features.feature["fare"]
            records.append(example.SerializeToString())
        with tf.io.TFRecordWriter(path, tf.io.TFRecordOptions(compression_type="GZIP")) as writer:
            for record in records:
                writer.write(record)


def _call(command: List[str], log_path: str, kill_after: Optional[float]) -> tuple:
    """Runs `command`, killed after `kill_after` seconds if given: (exit status, or -9 if
    killed; seconds; what it printed)."""
    started = time.perf_counter()
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = process.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            code = -9
    with open(log_path, errors="replace") as log:
        return code, time.perf_counter() - started, log.read()


def _decided(code: int, printed: str) -> int:
    """The exit status of the week's decision: a call that found it already made (a kill
    after the run recorded it) says which, e.g. `(run …: not blessed, exit 3 then)`."""
    if code == 0 and "Nothing new:" in printed:
        match = re.search(r"exit (\d+) then", printed)
        return int(match.group(1)) if match else 0
    return code


def soak(args: argparse.Namespace, work: str) -> List[Week]:
    spans_total = args.weeks + args.window - 1
    source = os.path.join(work, "spans")
    subprocess.run([CLI, "make-data", "--rows", str(args.rows * spans_total), "--spans", str(spans_total),
                    "--seed", str(args.seed), "--drift", str(args.drift), "--out", source], check=True,
                   stdout=subprocess.DEVNULL)
    data, out, serving = (os.path.join(work, name) for name in ("data", "out", "serving"))
    os.makedirs(data)
    rng = random.Random(args.seed)
    bad = {week: ("payment", "missing")[index % 2] for index, week in enumerate(args.bad_weeks)}
    killable = [w for w in range(3, args.weeks + 1) if w not in bad]
    kills = set(rng.sample(killable, min(args.kills, len(killable))))
    command = [CLI, "retrain", "--window", str(args.window), "--keep-runs", str(args.keep_runs),
               "--keep-versions", str(args.keep_versions),
               "--data-root", data, "--output-root", out, "--serving-dir", serving]
    weeks: List[Week] = []
    recent: List[float] = []  # the last clean weeks' wall times: a kill lands within the shortest
    logs = os.path.join(work, "calls")
    os.makedirs(logs, exist_ok=True)
    for span in range(1, args.window):
        os.rename(os.path.join(source, f"span-{span}"), os.path.join(data, f"span-{span}"))
    for week in range(1, args.weeks + 1):
        span = week + args.window - 1
        target = os.path.join(data, f"span-{span}")
        os.rename(os.path.join(source, f"span-{span}"), target)
        if week in bad:
            shutil.copytree(target, os.path.join(work, "repaired"), dirs_exist_ok=True)
            _damage(target, bad[week])
        before = _versions(serving)
        kind = "bad" if week in bad else "killed" if week in kills else "clean"
        killed_after = None
        seconds = 0.0
        finished = False
        if kind == "killed":
            # A random point of a run: from the first nodes to the push.
            killed_after = rng.uniform(5, max(10.0, 0.9 * min(recent[-3:] or [60.0])))
            code, seconds, printed = _call(command, os.path.join(logs, f"week-{week}-killed.log"), killed_after)
            if code != -9:
                killed_after = None  # it finished first: the kill moves to the next week
                kind = "clean"
                kills.add(next((w for w in range(week + 1, args.weeks + 1) if w not in bad and w not in kills),
                               week))
                finished = True
        if not finished:
            code, more, printed = _call(command, os.path.join(logs, f"week-{week}.log"), None)
            seconds += more
        code = _decided(code, printed)
        after = _versions(serving)
        if week in bad:
            # Upstream re-delivers the span repaired: the next weeks' windows hold it.
            shutil.rmtree(target)
            os.rename(os.path.join(work, "repaired"), target)
        expected = "data rejected" if kind == "bad" else "pushed or not blessed"
        result = Week(
            week=week, span=span, kind=kind, outcome=EXIT_OUTCOMES.get(code, f"error {code}"), exit=code,
            seconds=seconds, killed_after=killed_after, output_bytes=_du(out),
            mlmd_bytes=os.path.getsize(os.path.join(out, "metadata.sqlite")),
            rows=_rows(os.path.join(out, "metadata.sqlite")), versions=after,
            pushes=len(set(after) - set(before)), expected=expected,
            said=next((line.strip() for line in reversed(printed.splitlines()) if line.strip()), ""),
        )
        if week in (5, 12, 26, 39) or week == args.weeks:
            measured = subprocess.run([sys.executable, "-c", QUERIES, out, serving], capture_output=True, text=True)
            if measured.returncode == 0:
                found = json.loads(measured.stdout.strip().splitlines()[-1])
                result.queries, result.broken = found["times"], found["broken"]
            else:
                result.broken = [-1]
                print(measured.stderr[-2000:], file=sys.stderr)
        weeks.append(result)
        if kind == "clean" and killed_after is None and code in (0, 3):
            recent.append(seconds)
        print(_row(result), flush=True)
    return weeks


def _right(week: Week) -> bool:
    if week.kind == "bad":
        return week.exit == 4 and week.pushes == 0
    return week.exit in (0, 3) and week.pushes == (1 if week.exit == 0 else 0) and not week.broken


def _row(w: Week) -> str:
    queries = " / ".join(f"{w.queries.get(k, 0):.2f}" for k in ("history", "lineage", "page")) if w.queries else ""
    kill = f"killed at {w.killed_after:.0f} s, " if w.killed_after else ""
    return (f"| {w.week} | {w.span} | {w.kind} | {kill}{w.outcome} ({w.exit}) | {'yes' if _right(w) else 'NO'} "
            f"| {w.seconds:.0f} | {w.output_bytes / 2**20:.1f} | {w.mlmd_bytes / 2**20:.2f} "
            f"| {w.rows.get('Artifact', 0)} / {w.rows.get('Execution', 0)} | {len(w.versions)} | {queries} |")


HEADER = ("| week | span | kind | outcome (exit) | right | wall s | output root MB | MLMD MB | artifacts / executions "
          "| serving versions | history / lineage / page s |\n|---|---|---|---|---|---|---|---|---|---|---|")


def goals(weeks: List[Week]) -> List[str]:
    def clean(number: int) -> Optional[Week]:
        return next((w for w in weeks if w.week >= number and w.kind == "clean"), None)

    lines = []
    first, last = clean(5), ([w for w in weeks if w.kind == "clean"] or [None])[-1]
    if first and last:
        ratio = last.seconds / first.seconds
        lines.append(f"- Wall time: week {last.week} ({last.outcome}) {last.seconds:.0f} s against week {first.week} "
                     f"({first.outcome}) {first.seconds:.0f} s: {ratio:.2f}x (goal: within 10%).")
        # Like with like: a push costs the serving check and the push; a refusal, no training.
        pushed = [w for w in weeks if w.kind == "clean" and w.exit == 0]
        early = sorted(w.seconds for w in pushed if 5 <= w.week < 15)
        late = sorted(w.seconds for w in pushed if w.week > len(weeks) - 10)
        if early and late:
            median_early, median_late = early[len(early) // 2], late[len(late) // 2]
            lines.append(f"- Wall time of clean weeks that pushed, median: weeks 5-14 {median_early:.0f} s, the last "
                         f"ten weeks {median_late:.0f} s: {median_late / median_early:.2f}x.")
    twelve, end = clean(12), weeks[-1]
    if twelve:
        lines.append(f"- Output root: week {end.week} {end.output_bytes / 2**20:.1f} MB against week {twelve.week} "
                     f"{twelve.output_bytes / 2**20:.1f} MB: {end.output_bytes / twelve.output_bytes:.2f}x "
                     "(goal: within 20%).")
    if end.queries:
        lines.append(f"- MLMD queries in week {end.week}: history {end.queries.get('history', 0):.2f} s, lineage "
                     f"{end.queries.get('lineage', 0):.2f} s (the slowest version), page "
                     f"{end.queries.get('page', 0):.2f} s (goal: each under 1 s).")
    landed = [w.week for w in weeks if w.killed_after]
    missed = [w.week for w in weeks if w.kind == "killed" and not w.killed_after]
    lines.append(f"- Kills that landed mid-run: {len(landed)} (weeks {', '.join(map(str, landed)) or 'none'}; "
                 "goal: at least 5)" + (f"; the kill drawn for week(s) {', '.join(map(str, missed))} came after "
                                       "the call had finished" if missed else "") + ".")
    wrong = [w.week for w in weeks if not _right(w)]
    lines.append(f"- Decisions: {len(weeks) - len(wrong)} of {len(weeks)} right"
                 + (f"; wrong in weeks {wrong}" if wrong else "") + ".")
    lines.extend(f"  - Week {w.week} said: {w.said}" for w in weeks if not _right(w))
    broken = sorted({v for w in weeks for v in w.broken})
    lines.append(f"- Served versions with broken lineage: {broken or 'none'}.")
    return lines


def plot(weeks: List[Week], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), dpi=100, sharex=True)
    x = [w.week for w in weeks]
    top.plot(x, [w.seconds for w in weeks], marker="o", markersize=3)
    for w in weeks:
        if w.kind != "clean":
            top.annotate(w.kind, (w.week, w.seconds), fontsize=7)
    top.set_ylabel("retrain wall time (s)")
    bottom.plot(x, [w.output_bytes / 2**20 for w in weeks], label="output root")
    bottom.plot(x, [w.mlmd_bytes / 2**20 for w in weeks], label="MLMD file")
    bottom.set_ylabel("MB")
    bottom.set_xlabel("week")
    bottom.legend()
    figure.tight_layout()
    figure.savefig(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weeks", type=int, default=52)
    parser.add_argument("--rows", type=int, default=20_000, help="rows a span")
    parser.add_argument("--window", type=int, default=2)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--bad-weeks", type=lambda t: [int(w) for w in t.split(",") if w], default=[20, 40])
    parser.add_argument("--keep-runs", type=int, default=10)
    parser.add_argument("--keep-versions", type=int, default=3, help="versions kept in the serving folder")
    parser.add_argument("--drift", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", default=None, help="keep the output here (default: a temporary folder)")
    parser.add_argument("--json", default=None, help="write every week's figures here")
    parser.add_argument("--markdown", default=None, help="write the table and the goals here, and a plot beside it")
    parser.add_argument("--render", default=None, metavar="JSON",
                        help="write --markdown and its plot from the figures of an earlier soak; run nothing")
    args = parser.parse_args()
    if args.render:
        with open(args.render) as handle:
            weeks = [Week(**week) for week in json.load(handle)]
    elif args.work:
        print(HEADER, flush=True)
        os.makedirs(args.work, exist_ok=True)
        weeks = soak(args, args.work)
    else:
        print(HEADER, flush=True)
        with tempfile.TemporaryDirectory() as work:
            weeks = soak(args, work)
    summary = goals(weeks)
    print("\n".join(summary))
    if args.json and not args.render:
        with open(args.json, "w") as handle:
            json.dump([dataclasses.asdict(w) for w in weeks], handle, indent=1)
    if args.markdown:
        image = os.path.splitext(args.markdown)[0] + ".png"
        plot(weeks, image)
        with open(args.markdown, "w") as handle:
            handle.write(_page(args, weeks, summary, os.path.basename(image)))
    return 0 if all(_right(w) for w in weeks) else 1


def _page(args: argparse.Namespace, weeks: List[Week], summary: List[str], image: str) -> str:
    command = (f"python benchmarks/soak.py --weeks {args.weeks} --rows {args.rows} --window {args.window} "
               f"--kills {args.kills} --bad-weeks {','.join(map(str, args.bad_weeks))} --keep-runs {args.keep_runs} "
               f"--keep-versions {args.keep_versions} --drift {args.drift} --seed {args.seed}")
    table = "\n".join([HEADER] + [_row(w) for w in weeks])
    return f"""# A year of weekly retrains (`make bench-soak`)

    {command}

{len(weeks)} weekly `taxi-pipeline retrain` calls on one output root and serving folder,
each after one new span of {args.rows} synthetic rows (a drift of {args.drift} in the log of
trip_miles over the year), window {args.window}, retention `--keep-runs {args.keep_runs}`.

## Goals

{chr(10).join(summary)}

![wall time and bytes per week]({image})

## Every week

Kinds: clean; bad (a damaged span that must be refused: exit 4); killed (SIGKILL at the
time shown, then the next call). `right`: the decision the week's data calls for, with
one push at most, and every served version's lineage intact. Query times (one process,
after the week) are measured in some weeks.

{table}
"""


if __name__ == "__main__":
    sys.exit(main())
