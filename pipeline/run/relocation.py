"""An output root (with its data root and serving folder) that was moved or copied: the
absolute paths its records hold are made to point where it sits now, once, by the first
command that writes it, which says so.

Three records hold absolute paths: MLMD's artifacts (the SQLite store in the output root:
their URIs and the paths they record, such as the Pusher's destination), `last_run.json`
(the pushed version's folder, the run page) and `models.config`'s `base_path`. Left as
they were, a restored root follows them back to where it was made, and a copy beside the
original reads the original's models and serves its versions.

`<output root>/location.json` says where the root was when a command last wrote it, and
the serving folder it pushed to. A difference is a move or a copy:
- the SQLite store's URIs under the old output root point under the new one; under the
  old serving folder, under the new one when the new one holds the versions they name
  (the serving folder came along); else they stay (they name versions that are not here);
- `last_run.json`'s paths the same way;
- `models.config` is corrected on its own evidence, whatever the output root: an entry
  whose `base_path` is not this serving folder's model folder, while this folder holds
  that model, was copied with the folder.

A MySQL store is shared by output roots on several hosts: its URIs cannot be rewritten
for one of them, so a moved root that records runs there is refused (docs/operations.md).

Nothing here imports TensorFlow or MLMD unless something moved: an unchanged re-run stays
well under a second.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from typing import Dict, List, Optional, Tuple

from google.protobuf import text_encoding

from components.model.trainer.settings import SAVED_MODEL_FILE
from components.support import files
from pipeline import config as config_lib
from pipeline.run import run_state

LOCATION_FILE = "location.json"
# `models.config`'s entries as the Pusher writes them (text format, one per model).
_ENTRY = re.compile(r'name: "(?P<name>(?:[^"\\]|\\.)+)"\s*base_path: "(?P<base>(?:[^"\\]|\\.)+)"')


class MovedSharedStoreError(RuntimeError):
    """A moved or copied output root whose runs are recorded in a shared MySQL store."""


@dataclasses.dataclass(frozen=True)
class Location:
    output_root: str
    serving_dir: str

    @classmethod
    def of(cls, run_config: config_lib.RunConfig) -> "Location":
        return cls(run_config.output_root, run_config.serving_dir)


def recorded(output_root: str) -> Optional[Location]:
    """Where the root was when a command last wrote it; for a root made before this file
    existed, read from its run record (the page under the root, the pushed folder under
    the serving folder); None when neither says."""
    try:
        with open(os.path.join(output_root, LOCATION_FILE)) as handle:
            return Location(**json.load(handle))
    except FileNotFoundError:
        pass
    except (ValueError, TypeError) as err:
        logging.warning("%s is unreadable (%s): taken as written here", LOCATION_FILE, err)
        return None
    try:
        with open(os.path.join(output_root, config_lib.LAST_RUN_FILE)) as handle:
            report = json.load(handle)["report"]
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None
    page, pushed = report.get("page") or "", report.get("pushed_version_dir") or ""
    if not page.startswith("/"):
        return None
    serving = os.path.dirname(os.path.dirname(pushed.rstrip("/"))) if pushed.startswith("/") else ""
    return Location(os.path.dirname(os.path.dirname(page)), serving)


def _write(output_root: str, location: Location) -> None:
    run_state.write_json(os.path.join(output_root, LOCATION_FILE), dataclasses.asdict(location))


def _moved_prefixes(before: Location, now: Location, model_serving_dir: str,
                    pushed_versions: List[str]) -> List[Tuple[str, str]]:
    """(old, new) path prefixes: the output root, and the serving folder when it came along."""
    moves = [(before.output_root, now.output_root)]
    if (before.serving_dir and before.serving_dir != now.serving_dir and not files.is_remote(now.serving_dir)
            and any(_whole(os.path.join(model_serving_dir, version)) for version in pushed_versions)):
        moves.append((before.serving_dir, now.serving_dir))
    # The longest first: a path under both is moved by the one nearest to it.
    return sorted(moves, key=lambda move: len(move[0]), reverse=True)


def _whole(version_dir: str) -> bool:
    """A version folder a reader loads (`serving_config.is_whole`, for a local folder)."""
    return os.path.isfile(os.path.join(version_dir, SAVED_MODEL_FILE))


def _replaced(path: str, moves: List[Tuple[str, str]]) -> str:
    for old, new in moves:
        if path == old or path.startswith(old.rstrip("/") + "/"):
            return new + path[len(old):]
    return path


def relocate(run_config: config_lib.RunConfig, pushes: bool = True) -> List[str]:
    """Makes the output root's records point where it sits now (see the module doc); the
    lines to say, one per record corrected. Called under the output root's lock.
    `pushes`: the command pushes to the serving folder it was given (`run`, `retrain`), so
    that folder is the one to remember; `gc`'s (a default, maybe) is not."""
    said = _relocate_serving_config(run_config)
    now = Location.of(run_config)
    before = recorded(run_config.output_root)
    if not pushes and before is not None:
        now = Location(now.output_root, before.serving_dir)
    if before is None or _same_folder(before.output_root, now.output_root):
        if before != now and pushes:
            _write(run_config.output_root, Location(before.output_root if before else now.output_root,
                                                    now.serving_dir))
        return said
    if run_config.metadata_mysql is not None:
        raise MovedSharedStoreError(
            f"the output root {now.output_root} was moved or copied from {before.output_root}, and its runs' "
            f"artifacts in the shared metadata store {run_config.metadata} are recorded there: run it from "
            f"{before.output_root} again (or mount it at that path), or give a new output root a database of its own"
        )
    moves = _moved_prefixes(before, Location.of(run_config), run_config.model_serving_dir,
                            _pushed_versions(run_config.output_root))
    if not any(old == before.serving_dir for old, _ in moves):
        now = Location(now.output_root, before.serving_dir if not pushes else now.serving_dir)
    count = _rewrite_metadata(run_config, moves) if run_config.metadata.exists() else 0
    _rewrite_run_record(run_config.output_root, moves)
    _write(run_config.output_root, now)
    where = "; ".join(f"{old} -> {new}" for old, new in sorted(moves, key=lambda move: move[0] != before.output_root))
    said.append(f"Moved or copied output root: {count} artifact location(s) in its metadata store and its run "
                f"record now point here ({where})")
    return said


def _same_folder(recorded_path: str, path: str) -> bool:
    """One folder, however spelled (a symlink, a bind mount): not a move."""
    if recorded_path == path:
        return True
    try:
        return os.path.samefile(recorded_path, path)
    except OSError:
        return False


def _pushed_versions(output_root: str) -> List[str]:
    try:
        record = run_state.load(output_root)
    except (ValueError, KeyError, TypeError):  # unreadable: no evidence that a serving folder came along
        return []
    reports = (record.report, record.window_report) if record else ()
    return [report.pushed_version for report in reports if report and report.pushed_version]


def _rewrite_metadata(run_config: config_lib.RunConfig, moves: List[Tuple[str, str]]) -> int:
    from ml_metadata import metadata_store

    from pipeline.inspect import run_report

    store = metadata_store.MetadataStore(run_report.connection_config(run_config.metadata))
    changed = []
    for artifact in store.get_artifacts():
        before = artifact.SerializeToString()
        artifact.uri = _replaced(artifact.uri, moves)
        # Paths an artifact records beside its URI (the Pusher's destination).
        for value in artifact.custom_properties.values():
            if value.WhichOneof("value") == "string_value":
                value.string_value = _replaced(value.string_value, moves)
        if artifact.SerializeToString() != before:
            changed.append(artifact)
    if changed:
        store.put_artifacts(changed)
    logging.info("rewrote %d artifact URIs: %s", len(changed), moves)
    return len(changed)


def _rewrite_run_record(output_root: str, moves: List[Tuple[str, str]]) -> None:
    path = os.path.join(output_root, config_lib.LAST_RUN_FILE)
    try:
        with open(path) as handle:
            record = json.load(handle)
    except FileNotFoundError:
        return

    def rewritten(value):
        if isinstance(value, str):
            return _replaced(value, moves)
        if isinstance(value, list):
            return [rewritten(item) for item in value]
        if isinstance(value, dict):
            return {key: rewritten(item) for key, item in value.items()}
        return value

    run_state.write_json(path, rewritten(record))


def _stale_entries(serving_dir: str, model_name: str) -> Dict[str, str]:
    """Model name -> the `base_path` of this model's `models.config` entry in a local
    serving folder, when it names another folder while this one holds the model."""
    if files.is_remote(serving_dir):
        # Not read here: that would import TensorFlow on every run. A bucket's folder
        # copied with gsutil keeps naming the original until its next push (docs/operations.md).
        return {}
    try:
        with open(os.path.join(serving_dir, "models.config")) as handle:
            text = handle.read()
    except (FileNotFoundError, NotADirectoryError):
        return {}
    found = {}
    for match in _ENTRY.finditer(text):
        # Text format escapes bytes outside ASCII and quotes: compare the path itself.
        name, base = (text_encoding.CUnescape(match[key]).decode("utf-8", "replace") for key in ("name", "base"))
        if name == model_name and base != os.path.join(serving_dir, name) \
                and os.path.isdir(os.path.join(serving_dir, name)):
            found[name] = base
    return found


def _relocate_serving_config(run_config: config_lib.RunConfig) -> List[str]:
    stale = _stale_entries(run_config.serving_dir, run_config.settings.model_name)
    if not stale:
        return []
    from components.support import serving_config

    said = []
    for name, base in sorted(stale.items()):
        with serving_config.push_lock(os.path.join(run_config.serving_dir, name)):
            serving_config.rebase(run_config.serving_dir, name)
        said.append(f"models.config named {base} for {name}, a folder this serving folder was copied or moved "
                    f"from: it now names {os.path.join(run_config.serving_dir, name)}")
    return said
