"""`taxi-pipeline retrain`: the scheduled entry point (cron, systemd timer, CronJob).

It trains on a rolling window of the newest spans when a span has landed that was not
trained on yet, and does nothing otherwise. The command line holds the output root's
lock (`pipeline.lock`) around it, as around `run`.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Callable

from components import spans
from pipeline import config, run_state
from pipeline.run_state import RunReport


def retrain(
    run_config: config.RunConfig,
    window_size: int,
    run: Callable[[config.RunConfig, run_state.RunPlan], RunReport],
    force: bool = False,
) -> RunReport:
    """Runs the pipeline on the newest `window_size` spans, unless the newest was trained on.

    `run(config, plan)` runs the pipeline (see `pipeline.local_runner.run`); it is only
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
    newest = available[-1]
    done = None if force else run_state.window_done(run_config.output_root, newest)
    if done is not None:
        return done
    windowed = dataclasses.replace(run_config, settings=dataclasses.replace(run_config.settings, window_size=size))
    plan = run_state.plan(windowed)
    return plan.previous if plan.previous is not None and not force else run(windowed, plan)
