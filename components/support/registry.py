"""The record of what was trained on what, and what became of it: one per model, in the
model's folder of the serving folder (`<serving>/<model>/record.json`), beside its
versions, so that a local run, a scheduled job on Vertex AI and an operator's command read
and write the same one, on a local disk or on `gs://`.

It holds the version that serves (following the newest or pinned) and each candidate the
pipeline trained: its inputs (`inputs_digest`: the span window's files, the code, the
libraries' versions, the settings that reach Transform or the Trainer), its spans, and its
fate (`Fate`), with who decided it, when and why when a person did. MLMD stays the
lineage store; this record is what the decisions read:

- whether a run trains at all (`decide`): not when its inputs are those of the version that
  serves, or of the newest candidate (whatever became of it: refused, awaiting approval,
  rejected, or served and then rolled back from), or of a candidate a person rejected
  (the newest of those inputs), or, while a pin holds, of the version an unpin would
  serve. Settings that only judge or place a model (thresholds, promotion, retention, the
  latency budget) are not inputs: a change to one trains nothing and applies to the next
  candidate;
- which versions TF Serving may load (`servable`): never one awaiting approval, rejected,
  or superseded while it waited.

Every write is made under the model folder's push lock (`components.support.serving_config.push_lock`),
by the Pusher and by `taxi-pipeline serving`, and replaces the file whole (a temporary
file renamed over it). Reading a local record imports no TensorFlow: a run with nothing
to train is decided in well under a second.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import functools
import hashlib
import json
from importlib import metadata as package_metadata
from typing import Any, Dict, List, Optional, Sequence, Tuple

from components.support import files, whole_files

# A serving version passed as text (a parameter) when no version serves.
NOTHING_SERVES = "none"
RECORD_FILE = "record.json"
# Distributions whose version changes what a run computes: a candidate's inputs.
RUNTIME_DISTRIBUTIONS = (
    "tfx", "tfx-bsl", "tensorflow", "tf-keras", "keras", "tensorflow-transform", "tensorflow-model-analysis",
    "tensorflow-data-validation", "tensorflow-metadata", "apache-beam", "ml-metadata", "numpy", "pyarrow",
    "protobuf",
)
# Candidates kept in the record, newest last (a year of weekly runs, with room).
KEEP_CANDIDATES = 200


class Fate(enum.Enum):
    """What became of a candidate."""

    SERVED = "served"
    NOT_BLESSED = "not blessed"
    SERVING_CHECK_FAILED = "refused by the serving check"
    SHADOW_REFUSED = "refused by the shadow check"
    AWAITING_APPROVAL = "awaiting approval"
    APPROVED = "approved"
    REJECTED = "rejected"
    # Awaited approval when a newer candidate passed every check.
    SUPERSEDED = "superseded"

    @property
    def pushed(self) -> bool:
        """Whether the candidate is a version in the serving folder."""
        return self in (Fate.SERVED, Fate.AWAITING_APPROVAL, Fate.APPROVED, Fate.REJECTED, Fate.SUPERSEDED)

    @property
    def servable(self) -> bool:
        """Whether TF Serving may load it."""
        return self in (Fate.SERVED, Fate.APPROVED)


@dataclasses.dataclass
class Candidate:
    inputs: str
    spans: List[int]
    fate: Fate
    # Its version in the serving folder, when it was copied there.
    version: Optional[int] = None
    # The run or pipeline job that trained it, and when its fate was decided.
    run: str = ""
    at: str = ""
    # A refusal's reason, or a person's note; and who decided, when a person did.
    reason: str = ""
    by: str = ""

    def decision(self) -> str:
        """Who decided its fate and when, then why: " by ana at 2026-…: slice drift", or
        only what was recorded of that ("" for nothing)."""
        said = f" by {self.by} at {self.at}" if self.by else ""
        return said + (f": {self.reason}" if self.reason else "")

    def to_json(self) -> Dict[str, Any]:
        found = dataclasses.asdict(self)
        found["fate"] = self.fate.value
        return found

    @classmethod
    def from_json(cls, found: Dict[str, Any]) -> "Candidate":
        known = {field.name for field in dataclasses.fields(cls)}
        values = {key: value for key, value in found.items() if key in known}
        values["fate"] = Fate(values["fate"])
        return cls(**values)


@dataclasses.dataclass
class Record:
    candidates: List[Candidate] = dataclasses.field(default_factory=list)
    # The version that serves and whether an operator pinned it, as the last command that
    # changed `models.config` left it.
    serving: Optional[int] = None
    pinned: bool = False

    def of_version(self, version: int) -> Optional[Candidate]:
        for candidate in reversed(self.candidates):
            if candidate.version == version:
                return candidate
        return None

    def of_inputs(self, inputs: str) -> List[Candidate]:
        """The candidates trained on `inputs`, oldest first."""
        return [c for c in self.candidates if c.inputs == inputs]

    @property
    def newest(self) -> Optional[Candidate]:
        return self.candidates[-1] if self.candidates else None

    @property
    def awaiting(self) -> List[Candidate]:
        return [c for c in self.candidates if c.fate is Fate.AWAITING_APPROVAL]

    def add(self, candidate: Candidate) -> None:
        """Records a candidate; one that passed every check supersedes any that awaits."""
        if candidate.fate in (Fate.SERVED, Fate.AWAITING_APPROVAL):
            for waiting in self.awaiting:
                waiting.fate, waiting.at = Fate.SUPERSEDED, candidate.at
                waiting.reason = f"version {candidate.version} passed every check after it"
        self.candidates = [*self.candidates, candidate][-KEEP_CANDIDATES:]

    def to_json(self) -> Dict[str, Any]:
        return {"serving": self.serving, "pinned": self.pinned,
                "candidates": [candidate.to_json() for candidate in self.candidates]}

    @classmethod
    def from_json(cls, found: Dict[str, Any]) -> "Record":
        return cls([Candidate.from_json(c) for c in found.get("candidates", [])], found.get("serving"),
                   bool(found.get("pinned")))


@dataclasses.dataclass(frozen=True)
class Decision:
    """Why a run with these inputs trains nothing: the candidate that had them."""

    candidate: Candidate
    serving: Optional[int]

    @property
    def says(self) -> str:
        candidate = self.candidate
        what = (f"version {candidate.version}" if candidate.version is not None
                else f"the candidate of run {candidate.run}")
        if candidate.version is not None and candidate.version == self.serving:
            return f"{what} serves, trained on these very inputs"
        fate = candidate.fate.value + (f" ({candidate.reason})" if candidate.reason else "")
        if candidate.fate.servable:
            now = f"version {self.serving} serves" if self.serving is not None else "nothing serves"
            return (f"{what} was trained on these very inputs and passed every check ({fate}); {now} now, as an "
                    f"operator set it (`taxi-pipeline serving unpin` serves {what})")
        return f"{what} was trained on these very inputs: {fate}"


def decide(record: Record, inputs: str, on_disk: Sequence[int], serving: Optional[int],
           pinned: bool = False) -> Optional[Decision]:
    """The candidate a run of `inputs` would repeat, if any: the version that serves
    (`serving`, as `models.config` names it), or the newest candidate, when either was
    trained on these inputs (see the module doc), or the newest candidate of these inputs
    when a person rejected it: the same inputs train the same model again, and a rejection
    is not undone by the data coming back (a `--force` run of them since undoes it). While
    a pin or a rollback holds (`pinned`), also the version `on_disk` an unpin would serve
    (the newest that may), when it has these inputs, however old its candidate: the
    operator chose what serves, and its copy would be pushed only to stay behind the pin.
    A version that serves or is the newest and is not `on_disk` (deleted or moved by
    hand) is not repeated: a run makes one that can serve."""
    served = serving if serving in on_disk else None
    serving = record.of_version(served) if served is not None else None
    if serving is not None and serving.inputs == inputs:
        return Decision(serving, served)
    newest = record.newest
    if newest is not None and newest.inputs == inputs and (newest.version is None or newest.version in on_disk):
        return Decision(newest, served)
    same = record.of_inputs(inputs)
    if same and same[-1].fate is Fate.REJECTED:
        return Decision(same[-1], served)
    kept = [c for c in same if pinned and c.fate.servable and c.version in on_disk]
    # Only the version an unpin would serve: a copy of an older one would be pushed as the newest.
    return Decision(kept[-1], served) if kept and servable(record, on_disk)[-1:] == [kept[-1].version] else None


@functools.cache
def _versions() -> Tuple[Tuple[str, str], ...]:
    return tuple((name, package_metadata.version(name)) for name in RUNTIME_DISTRIBUTIONS)


def runtime_versions() -> Dict[str, str]:
    """The versions of `RUNTIME_DISTRIBUTIONS` in this process (read once)."""
    return dict(_versions())


def inputs_digest(static: str, runtime: Dict[str, str], files: str) -> str:
    """What changes a trained model, as one digest: `static` (the code and the settings
    that reach Transform or the Trainer, `static_inputs`), the libraries' versions, and
    the span window's files (`spans.files_digest`)."""
    digest = hashlib.sha256()
    for part in (static, json.dumps(runtime, sort_keys=True), files):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:32]


def static_inputs(code_version: str, settings: Dict[str, Any]) -> str:
    """The part of a candidate's inputs known before the pipeline runs."""
    return hashlib.sha256(json.dumps({"code": code_version, "settings": settings}, sort_keys=True)
                          .encode()).hexdigest()[:32]


def path(model_dir: str) -> str:
    return files.join(model_dir, RECORD_FILE)


_NOT_A_RECORD = (ValueError, KeyError, TypeError, AttributeError)


def _read(where: str) -> Record:
    if not files.exists(where):
        return Record()
    return Record.from_json(json.loads(files.read_text(where)))


def read(model_dir: str) -> Record:
    """The model's record; an empty one before its first candidate."""
    where = path(model_dir)
    try:
        return files.parsed(where, _read, _NOT_A_RECORD)
    except _NOT_A_RECORD as err:
        raise ValueError(
            f"{where} is not a record this pipeline wrote ({err}): restore it from a backup, or move it aside to "
            "start a new one. A new record knows none of the versions there and lets any of them serve, one that "
            "awaited approval or was rejected too: remove those first (`taxi-pipeline history` lists the runs "
            "that awaited approval; a person's decision is also in the version's assets.extra/model_card.json). "
            "Moving it changes no version and not models.config") from err


def write(model_dir: str, record: Record) -> None:
    """Replaces the record whole. Call it under the model folder's push lock."""
    whole_files.write_text(path(model_dir), json.dumps(record.to_json(), indent=1))


def now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def servable(record: Record, versions: Sequence[int]) -> List[int]:
    """Of `versions`, those TF Serving may load: every one but those the record says await
    approval, were rejected, or were superseded while they waited. A version the record
    does not know may be loaded only if it is older than the first it knows (pushed before
    the record existed): the Pusher records a version before it becomes whole, so a newer
    unknown one was put there by something else, and nothing vouches for it."""
    barred = {c.version for c in record.candidates if c.version is not None and c.fate.pushed and not c.fate.servable}
    known = {c.version for c in record.candidates if c.version is not None}
    first = min(known, default=None)
    return [version for version in versions
            if version not in barred and (version in known or first is None or version < first)]
