"""Where Beam's work runs: the one answer that the data gate
(`components.custom.span_statistics`), the library patches (`pipeline.patches`), the
Beam options (`pipeline.beam.options`) and the run's log line read.

Beam accepts a runner's class name with or without its module and its `Runner` suffix,
in any case; no runner is the DirectRunner.
"""

from __future__ import annotations

import enum
from typing import Optional, Sequence

# Runners whose workers stay on this machine, by name lowercased without its module and
# its `Runner` suffix. Prism is a process of its own; the others run in this one unless
# the DirectRunner is told to start worker processes.
RUNNERS_HERE = ("direct", "fnapi", "switchingdirect", "bundlebaseddirect", "prism")
OWN_PROCESS = ("prism",)
# The DirectRunner's running mode that starts worker processes.
WORKER_PROCESSES = "multi_processing"


class Place(enum.Enum):
    PROCESS = "in this process"
    MACHINE = "in worker processes on this machine"
    ELSEWHERE = "on the runner's workers, beyond this environment"


def runner_name(runner: Optional[str]) -> str:
    """`--runner`'s value as Beam reads it: without its module and its `Runner` suffix,
    in lower case (None: the DirectRunner, `direct`)."""
    return (runner or "DirectRunner").rsplit(".", 1)[-1].lower().removesuffix("runner")


def place(runner: Optional[str], running_mode: Optional[str] = None) -> Place:
    """Where a pipeline with this `--runner` (None: the DirectRunner) and the
    DirectRunner's `--direct_running_mode` runs its work."""
    name = runner_name(runner)
    if name not in RUNNERS_HERE:
        return Place.ELSEWHERE
    if name in OWN_PROCESS or running_mode == WORKER_PROCESSES:
        return Place.MACHINE
    return Place.PROCESS


def option(args: Sequence[str], name: str) -> Optional[str]:
    """The last value of `--name` among Beam options `args` (`--name=V` or `--name V`)."""
    value = None
    for index, arg in enumerate(args):
        if arg.startswith(f"--{name}="):
            value = arg.split("=", 1)[1]
        elif arg == f"--{name}" and index + 1 < len(args):
            value = args[index + 1]
    return value


def place_of(args: Sequence[str]) -> Place:
    """`place` for Beam options given as command-line arguments."""
    return place(option(args, "runner"), option(args, "direct_running_mode"))
