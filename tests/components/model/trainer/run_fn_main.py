"""Runs the Trainer's `run_fn` in a process of its own, as a TFX Trainer (or a worker of a
multi-worker training job, given `TF_CONFIG`) does: `python run_fn_main.py FN_ARGS_JSON`."""

import json
import logging
import sys

from tfx import v1 as tfx

from components.model.trainer import run

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, force=True)
    run.run_fn(tfx.components.FnArgs(**json.loads(sys.argv[1])))
