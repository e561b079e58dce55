"""The command of every task of the compiled pipeline (`compiled_fixes.tasks_end_at_once_in_job`):
`python -m pipeline.cloud.task MODULE ARG...` runs TFX's container entry point MODULE
(the executor's, or ImportExampleGen's driver) as `python -m MODULE ARG...` would, with
what the command line does for its own process (`pipeline.run.process`):

- MODULE's imports (TensorFlow, TFX, Beam, TFMA, TFDV) with the cyclic GC paused, then
  frozen, and the collector's thresholds raised while the task works; TFX's modules that
  no task runs, and Beam's Google Cloud IO block, imported only when used
  (`pipeline.patches.defer_imports`, unless the speed-ups are off);
- once the entry point has returned, the process ends with `os._exit`, every output
  written and closed: tearing down an interpreter with those libraries loaded costs each
  task seconds and does nothing a task needs (docs/vertex.md has the times). With the
  speed-ups off (`TAXI_PIPELINE_SPEEDUPS=0` in the task's environment) it ends as Python
  ends it.

A task that fails ends as Python ends it, traceback and status unchanged.
"""

from __future__ import annotations

import runpy
import sys
from typing import List, Optional

from pipeline import patches
from pipeline.patches import machinery
from pipeline.run import process


def exit_status(code: object) -> int:
    """The status Python gives `SystemExit(code)`: 0 for None, the number, else 1 after
    printing `code` to stderr."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def main(argv: Optional[List[str]] = None) -> None:
    module, *args = sys.argv[1:] if argv is None else argv
    on = machinery.enabled()
    patches.defer_imports()
    process.import_frozen(module, on)
    # runpy runs the module's code again as `__main__`, its imports done: the module itself
    # must not be in sys.modules (runpy warns of "unpredictable behaviour" if it is).
    sys.modules.pop(module, None)
    sys.argv = [module, *args]
    try:
        with process.collecting_less_often():
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as ended:
        code = exit_status(ended.code)
    process.exit_process(code, on)


if __name__ == "__main__":
    main()
