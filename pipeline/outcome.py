"""What a run ended as: its `Outcome` (and so its exit status), the nodes it ran, and the
`RunReport` every command prints, pages, records and alerts from; how any command ended
(`Ending`), said last on the console; and the exit status of every ending (`ExitCode`,
the one declaration of them: README's "Exit status" table lists the same)."""

from __future__ import annotations

import dataclasses
import enum
import signal
import sys
from typing import Dict, List, Optional

from components.support.registry import NOTHING_SERVES


class ExitCode(enum.IntEnum):
    """Exit status of `taxi-pipeline`, for schedulers and monitors."""

    OK = 0  # pushed, or nothing needed doing
    ERROR = 1  # anything else, with a message naming it
    USAGE = 2  # the command line is wrong: argparse's usage line, then what is missing (argparse exits so)
    NOT_BLESSED = 3  # trained, not blessed: the previous version keeps serving
    DATA_REJECTED = 4  # unreadable files, schema anomalies or drift: nothing trained
    LOCKED = 5  # another run or retrain holds the output root
    SERVING_CHECK_FAILED = 6  # blessed, but failed the serving check: the previous version keeps serving
    REJECTED = 7  # a person rejected the candidate of these inputs (`serving reject`): nothing was trained
    SHADOW_REFUSED = 8  # its scores on logged traffic moved too far from the serving model's, or were not judged
    # Ended by Ctrl-C (SIGINT) or a scheduler's SIGTERM, with one line saying what was done
    # (`pipeline.interrupts`): what a shell reports for a process those signals end.
    INTERRUPTED = 128 + signal.SIGINT
    # Ended by its watch (`pipeline.run.watch`), which kills it: what a shell reports for it.
    KILLED = 128 + signal.SIGKILL
    TERMINATED = 128 + signal.SIGTERM


class Outcome(enum.Enum):
    PUSHED = "pushed"
    UP_TO_DATE = "up to date"
    NOT_BLESSED = "not blessed"
    SERVING_CHECK_FAILED = "failed the serving check"
    DATA_REJECTED = "data rejected"
    AWAITING_APPROVAL = "awaiting approval"
    REJECTED = "rejected by a person"
    SHADOW_REFUSED = "refused by the shadow check"

    @property
    def exit_code(self) -> ExitCode:
        return {
            Outcome.PUSHED: ExitCode.OK,
            Outcome.UP_TO_DATE: ExitCode.OK,
            Outcome.NOT_BLESSED: ExitCode.NOT_BLESSED,
            Outcome.SERVING_CHECK_FAILED: ExitCode.SERVING_CHECK_FAILED,
            Outcome.DATA_REJECTED: ExitCode.DATA_REJECTED,
            Outcome.AWAITING_APPROVAL: ExitCode.OK,
            Outcome.REJECTED: ExitCode.REJECTED,
            Outcome.SHADOW_REFUSED: ExitCode.SHADOW_REFUSED,
        }[self]


@dataclasses.dataclass
class NodeRun:
    node_id: str
    state: str  # "ran", "cached" or "failed"
    seconds: float


@dataclasses.dataclass
class RunReport:
    outcome: Outcome
    pushed_version_dir: Optional[str] = None
    anomalies: List[str] = dataclasses.field(default_factory=list)
    eval_metrics: Dict[str, float] = dataclasses.field(default_factory=dict)
    nodes: List[NodeRun] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    reused_previous_run: bool = False
    # The spans the run ingested, oldest first (in window mode the newest is the eval split).
    spans: List[int] = dataclasses.field(default_factory=list)
    # Window mode: the number of spans in the window; None when every span was used.
    window_size: Optional[int] = None
    # The Trainer's warm-start decision and its reason, when it trained.
    warm_start: str = ""
    # The version the candidate was warm-started from and evaluated against, as the serving
    # baseline copied it (`components.custom.baseline`: a version, or "none"); "" when
    # that node did not run.
    baseline: str = ""
    # Why nothing was run, when nothing was.
    note: str = ""
    # The orchestrator's run id (MLMD's pipeline_run context).
    run_id: str = ""
    # Fingerprint of the run's inputs (see the module doc).
    fingerprint: str = ""
    # When the run finished (local time, ISO 8601).
    finished: str = ""
    # Spans checked on their own against the schema, with what was found in each.
    span_checks: Dict[str, List[str]] = dataclasses.field(default_factory=dict)
    # Entries under the data root that nothing read (see `components.support.spans`).
    ignored: List[str] = dataclasses.field(default_factory=list)
    # A decision already reported by an earlier call (`retrain` with nothing new): exit 0.
    acknowledged: bool = False
    # The stack the run ran on (`components.compat.describe()`: `tfx-1.21: TFX 1.21.0, ...`).
    stack: str = ""
    # The run's HTML page (`pipeline.inspect.report_page`), "" when none was written.
    page: str = ""
    # What the serving check found (`components.custom.serving_check`), when it ran.
    serving_check: str = ""
    # What the shadow check found and measured (`components.custom.shadow_check`).
    shadow_check: str = ""
    shadow_measures: Dict[str, object] = dataclasses.field(default_factory=dict)
    # Why a candidate that would have served awaits approval instead, when the Pusher held
    # it (`components.custom.pusher.hold_if_judged_against_another`).
    held: str = ""
    # The version that serves after the push, when a pin keeps it from being the one pushed.
    pinned_to: str = ""
    # The thresholds a candidate the Evaluator did not bless missed (TFMA's validation).
    missed: List[str] = dataclasses.field(default_factory=list)

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.OK if self.acknowledged else self.outcome.exit_code

    @property
    def kept_serving(self) -> str:
        """What serves when this run's candidate does not: "the previous version keeps
        serving", or, when none served as the run started (a run decided from the record
        names the serving version in `pushed_version_dir`, or none), that none does."""
        decided_without_serving = self.reused_previous_run and not self.baseline and not self.pushed_version_dir
        if self.baseline == NOTHING_SERVES or decided_without_serving:
            return "no version serves yet"
        return "the previous version keeps serving"

    @property
    def pushed_version(self) -> Optional[str]:
        """The version folder's name (its number) of `pushed_version_dir`, None without one."""
        return (self.pushed_version_dir or "").rstrip("/").rsplit("/", 1)[-1] or None

    def to_json(self) -> Dict[str, object]:
        record = dataclasses.asdict(self)
        record["outcome"] = self.outcome.value
        return record

    @classmethod
    def from_json(cls, record: Dict[str, object]) -> "RunReport":
        record = dict(record)
        record["outcome"] = Outcome(record["outcome"])
        record["nodes"] = [NodeRun(**node) for node in record.get("nodes", [])]
        return cls(**record)


@dataclasses.dataclass
class Ending:
    """How a command ended: the run's report, or the error it stopped on, said last (for
    `--notify` too), after the path of the log that holds its traceback."""

    report: Optional[RunReport] = None
    error: str = ""
    # The run's log file, or the log the command line writes for a failure it could not foresee.
    log_path: str = ""
    # Whether the error is one the log can tell more of (not a refused argument).
    logged: bool = False

    def fail(self, message: str, logged: bool = False) -> None:
        self.error, self.logged = message, logged or bool(self.log_path)

    def say(self) -> None:
        """The last lines on stderr: where the full log is, then what broke and what to do."""
        if self.logged and self.log_path:
            print(f"Full log: {self.log_path}", file=sys.stderr)
        print(f"error: {self.error}", file=sys.stderr)
