"""`taxi-pipeline retrain`: the scheduled entry point (cron, systemd timer, CronJob).

It runs the pipeline on a rolling window of the newest spans, unless the last window run
had the same inputs (the window's data bytes, code, schema, settings, library versions).
So a new span, an edited schema or a code change is trained on at the next call, and a
call with nothing new does nothing, in well under a second.

What a scheduler sees (docs/retraining.md): each decision's exit status
is returned once, by the call that made it: 0 pushed, 3 not blessed, 4 data rejected.
A later call with nothing new exits 0 and says which run decided what, and when; a
monitor alerting on non-zero statuses alerts once per decision, not once per call. The
command line holds the output root's lock (`pipeline.run.lock`) around it, as around `run`.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Callable

from components.support import spans
from pipeline import config
from pipeline.outcome import Outcome, RunReport
from pipeline.run import run_state


def retrain(
    run_config: config.RunConfig,
    window_size: int,
    run: Callable[[config.RunConfig, run_state.RunPlan], RunReport],
    force: bool = False,
) -> RunReport:
    """Runs the pipeline on the newest `window_size` spans, unless nothing changed since
    the last window run.

    `run(config, plan)` runs the pipeline (see `pipeline.run.local_runner.run`); it is only
    called, and TensorFlow only imported, when there is something to do.
    """
    spans.window_train_splits(window_size)  # refuses a window of fewer than 2 spans
    available = spans.span_numbers(run_config.data_root)
    if len(available) < 2:
        raise spans.DataRootError(f"data root {run_config.data_root} needs at least two spans, has {available}")
    # Until enough spans have landed, the window is all of them. The SpanWindow node
    # chooses the same spans again when the pipeline runs.
    size = min(window_size, len(available))
    if size < window_size:
        logging.info("only %d spans so far: a window of %d instead of %d", size, size, window_size)
    windowed = dataclasses.replace(run_config, settings=dataclasses.replace(run_config.settings, window_size=size))
    plan = run_state.plan(windowed)
    if plan.previous is None or force:
        return run(windowed, plan)
    return nothing_new(plan.previous)


def nothing_new(previous: RunReport) -> RunReport:
    """The last window run's report as this call's answer: exit 0, and one line saying
    what was decided when."""
    decided = previous.outcome if previous.outcome is not Outcome.UP_TO_DATE else Outcome.PUSHED
    if decided is Outcome.REJECTED:  # only a candidate awaiting approval is rejected: its run exited 0
        said = f"{Outcome.AWAITING_APPROVAL.value}, exit 0; {decided.value} since"
    else:
        said = f"{decided.value}, " + (f"exit {int(decided.exit_code)} then" if decided.exit_code else "exit 0")
    newest = previous.spans[-1] if previous.spans else "?"
    previous.note = (
        f"Nothing new: span {newest} was already trained on with the same data, code and settings "
        f"(run {previous.run_id}, finished {previous.finished or 'earlier'}: {said}). Nothing to do."
    )
    previous.acknowledged = True
    return previous
