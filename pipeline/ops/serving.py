"""`taxi-pipeline serving`: what TF Serving serves, the operator's rollback and pin, and a
person's approval or rejection of a candidate awaiting approval (`--promotion approval`).

Every change rewrites `models.config` (see `components.support.serving_config`) under the model
folder's push lock (`components.support.serving_config.push_lock`: `flock` on a local folder, a lock
object on gs://), so it never interleaves with a push; no version folder is ever deleted
here.
"""

from __future__ import annotations

import dataclasses
import datetime
import getpass
import json
import logging
import os
import re
from typing import Dict, List, Optional

from components.support import files, registry, serving_config
from pipeline import failures
from pipeline.config import MetadataConfig
from pipeline.options import UsageError


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A person's decision on a candidate: `serving approve` or `serving reject`."""

    approve: bool
    note: str = ""
    by: str = ""

    @property
    def who(self) -> str:
        return self.by or getpass.getuser()


def describe(current: serving_config.ServingState, model_dir: str) -> str:
    """One line per version on disk, newest first: when it was pushed, its labels, which
    one a request with no version gets, and what the record says of it (awaiting
    approval, approved or rejected, by whom)."""
    missing = current.missing_note(model_dir)
    if not current.on_disk:
        return "\n".join(line for line in (f"No model versions in {model_dir}.", missing) if line)
    record = registry.read(model_dir)
    labels_of: Dict[int, List[str]] = {}
    for label, version in sorted(current.labels.items()):
        labels_of.setdefault(version, []).append(label)
    lines: List[str] = []
    for version in reversed(current.on_disk):
        seconds = files.size_and_mtime_ns(os.path.join(model_dir, str(version)))[1] / 1e9
        marks = ["SERVING" if version == current.serving else "loaded" if version in current.loaded else ""]
        marks += (["pinned"] if version == current.pinned else []) + labels_of.get(version, [])
        candidate = record.of_version(version)
        if candidate is not None and candidate.fate is not registry.Fate.SERVED:
            marks.append(_fate(candidate))
        pushed = datetime.datetime.fromtimestamp(seconds)
        lines.append(f"{version}  pushed {pushed:%Y-%m-%d %H:%M:%S}  {' '.join(m for m in marks if m)}".rstrip())
    mode = (f"pinned to version {current.pinned} (`serving unpin` serves the newest again)"
            if current.pinned is not None else "following the newest version")
    return "\n".join([f"{model_dir}: {mode}", *lines, *([missing] if missing else [])])


def _fate(candidate: registry.Candidate) -> str:
    said = candidate.fate.value.upper() if candidate.fate is registry.Fate.AWAITING_APPROVAL else candidate.fate.value
    return said + candidate.decision()


def _require_pushed(model_dir: str) -> None:
    if not files.isdir(model_dir):
        raise ValueError(f"no serving folder {model_dir}: nothing was pushed there yet")


def require_decision(version: Optional[int], verdict: Verdict) -> None:
    """A decision names its VERSION, and a rejection says why (`UsageError` otherwise)."""
    action = "approve" if verdict.approve else "reject"
    if version is None:
        raise UsageError(f"serving {action} needs the VERSION awaiting approval")
    if not verdict.approve and not verdict.note:
        raise UsageError("serving reject needs --note saying why")


def decide(serving_dir: str, model_name: str, version: Optional[int], verdict: Verdict,
           metadata: Optional[MetadataConfig] = None) -> str:
    """Approves (it serves) or rejects a version awaiting approval, under the model's push
    lock; records who, when and the note in the record and the version's model card, and
    on the version's PushedModel artifact in `metadata` when given."""
    require_decision(version, verdict)
    action = "approve" if verdict.approve else "reject"
    model_dir = os.path.join(serving_dir, model_name)
    _require_pushed(model_dir)  # before the lock, which would make the folder
    with serving_config.push_lock(model_dir) as confirm:
        record = registry.read(model_dir)
        candidate = record.of_version(version)
        done = registry.Fate.APPROVED if verdict.approve else registry.Fate.REJECTED
        # Approving again what was approved finishes an approval cut short before it served.
        if candidate is None or candidate.fate not in (registry.Fate.AWAITING_APPROVAL, done):
            waiting = ", ".join(str(c.version) for c in record.awaiting)
            what = f"is {candidate.fate.value}" if candidate is not None else "is not a candidate this record knows"
            raise ValueError(f"version {version} {what}; "
                             + (f"awaiting approval: version {waiting}" if waiting else "no version awaits approval"))
        # Deciding again keeps the first decision's who, when and note: the record is the
        # audit trail of who let a version serve, and a repeat only finishes what it began.
        repeated = candidate.fate is done
        if not repeated:
            candidate.fate, candidate.by, candidate.at = done, verdict.who, registry.now()
            candidate.reason = verdict.note
        confirm()
        registry.write(model_dir, record)  # first: the version may serve once the record says so
        _note_in_card(os.path.join(model_dir, str(version)), candidate)
        before = serving_config.state(serving_dir, model_name)
        if verdict.approve:
            confirm()
            if before.pinned is not None:
                serving_config.pin(serving_dir, model_name, version)
            else:
                serving_config.follow(serving_dir, model_name)
        now = serving_config.state(serving_dir, model_name)
    stored = f"\n{_stored(metadata, model_dir, version, candidate)}" if metadata is not None else ""
    first = f" already, at {candidate.at} (the record keeps the first decision)" if repeated else ""
    return (f"{action}: version {version} {done.value} by {candidate.by}{first}; serving version {now.serving}"
            f"{stored}\n" + describe(now, model_dir))


def _stored(metadata: MetadataConfig, model_dir: str, version: int, candidate: registry.Candidate) -> str:
    """`record_in_store`, or why it could not: the decision took effect already, and the
    record and the model card hold it, so a store that fails is said, not an error."""
    from ml_metadata import errors

    try:
        return record_in_store(metadata, model_dir, version, candidate)
    except (errors.StatusError, RuntimeError) as err:  # MLMD's query errors; its connection's
        logging.exception("the decision on version %d was not recorded in %s", version, metadata)
        # MLMD's message ends with the SQL it ran ("... query: CREATE TABLE ..."): the log has it.
        reason = re.sub(r"^(.*)\s+query:\s.*$", r"\1", failures.short(err), flags=re.DOTALL)
        return (f"note: not recorded in {metadata} ({reason}); the record and the model card hold the decision: "
                "the same command again records it there")


# The properties a person's decision sets on the version's PushedModel artifact.
DECISION_PROPERTIES = ("decision", "decided_by", "decided_at", "decision_note")


def record_in_store(metadata: MetadataConfig, model_dir: str, version: int, candidate: registry.Candidate) -> str:
    """The decision on `version`'s PushedModel artifact in MLMD, beside its lineage; says
    where it went, or why it did not."""
    from components.custom import pusher, serving_check
    from pipeline.inspect import lineage, run_report

    store = run_report.connect(metadata, writable=True)
    artifact = lineage.pushed_model(store, model_dir, version)
    if artifact is None:
        return (f"note: {metadata} holds no push of version {version}; the record and the model card hold the "
                "decision")
    for key, value in zip(DECISION_PROPERTIES, (candidate.fate.value, candidate.by, candidate.at, candidate.reason)):
        artifact.custom_properties[key].string_value = value
    changed = [artifact]
    # Approved, its push's served blessing says it serves: the next run's baseline and
    # warm start (the pipeline's resolver reads these blessings).
    producers = [e.execution_id for e in store.get_events_by_artifact_ids([artifact.id])
                 if e.type in run_report.OUTPUT_EVENTS]
    served = run_report.outputs(store, producers[0]).get(pusher.SERVED_KEY) if producers else None
    if served is not None and candidate.fate.servable:
        served.custom_properties[serving_check.BLESSED_PROPERTY].int_value = 1
        changed.append(served)
    store.put_artifacts(changed)
    baseline = "; it is now the next run's baseline and warm start" if len(changed) > 1 else ""
    return f"recorded on its push in {metadata} (PushedModel artifact {artifact.id}){baseline}"


def _note_in_card(version_dir: str, candidate: registry.Candidate) -> None:
    from components.custom import model_card

    found = model_card.read(version_dir)
    if found is None:  # pushed before the Pusher wrote cards: the record alone says it
        return
    found["decision"] = {"fate": candidate.fate.value, "by": candidate.by, "at": candidate.at,
                         "note": candidate.reason}
    model_card.write(version_dir, found)


def card(model_dir: str, version: Optional[int]) -> str:
    """Where version `version`'s model card is (default: the version that serves), its HTML
    written again from its JSON when it is missing."""
    from components.custom import model_card

    _require_pushed(model_dir)
    current = serving_config.state_of(model_dir)
    version = current.serving if version is None else version
    if version is None and not current.on_disk:
        raise ValueError(f"no version in {model_dir}: nothing was pushed there yet")
    if version is None:
        raise ValueError(f"no version of {model_dir} serves: name one of {', '.join(map(str, current.on_disk))} "
                         "(`taxi-pipeline serving card VERSION`)")
    if version not in current.on_disk:
        raise ValueError(f"no version {version} in {model_dir} ({', '.join(map(str, current.on_disk)) or 'none'})")
    folder = os.path.join(model_dir, str(version), model_card.CARD_DIR)
    page, data = os.path.join(folder, model_card.HTML_FILE), os.path.join(folder, model_card.JSON_FILE)
    if not files.exists(data):
        raise ValueError(f"version {version} has no model card ({data}): it was pushed before the Pusher wrote "
                         "them; `taxi-pipeline lineage` tells where it came from")
    if not files.exists(page):
        found = json.loads(files.read_text(data))
        with files.open_file(page, "w") as handle:
            handle.write(model_card.render_html(found))
    return f"Model card of version {version}: {page}\n  (for programs: {data})"


def command(serving_dir: str, model_name: str, action: str, version: Optional[int]) -> str:
    """Carries out `action` (list, card, rollback, pin, unpin) and says what serves now."""
    model_dir = os.path.join(serving_dir, model_name)
    if action == "list":
        return describe(serving_config.state(serving_dir, model_name), model_dir)
    if action == "card":
        return card(model_dir, version)
    if action == "pin" and version is None:
        raise UsageError("serving pin needs the VERSION to serve")
    if action == "unpin" and version is not None:
        raise UsageError("serving unpin takes no VERSION")
    _require_pushed(model_dir)
    with serving_config.push_lock(model_dir) as confirm:
        current = serving_config.state(serving_dir, model_name)
        confirm()
        if action == "unpin":
            serving_config.follow(serving_dir, model_name)
        else:
            target = (serving_config.rollback_target(current, version, registry.read(model_dir))
                      if action == "rollback" else version)
            serving_config.pin(serving_dir, model_name, target)
        now = serving_config.state(serving_dir, model_name)
    before = f"version {current.serving}" if current.serving is not None else "nothing"
    return (f"{action}: serving version {now.serving} (was {before}); "
            f"{serving_config.config_path(serving_dir)} updated\n" + describe(now, model_dir))
