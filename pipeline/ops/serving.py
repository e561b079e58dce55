"""`taxi-pipeline serving`: what TF Serving serves, and the operator's rollback and pin.

Every change rewrites `models.config` (see `components.support.serving_config`) under the model
folder's push lock (`components.custom.pusher.push_lock`: `flock` on a local folder, a lock
object on gs://), so it never interleaves with a push; no version folder is ever deleted
here.
"""

from __future__ import annotations

import datetime
import json
import os
from typing import Dict, List, Optional

import tensorflow as tf

from components.custom import model_card, pusher
from components.support import serving_config


def describe(current: serving_config.ServingState, model_dir: str) -> str:
    """One line per version on disk, newest first: when it was pushed, its labels, and
    which one a request with no version gets."""
    if not current.on_disk:
        return f"No model versions in {model_dir}."
    labels_of: Dict[int, List[str]] = {}
    for label, version in sorted(current.labels.items()):
        labels_of.setdefault(version, []).append(label)
    lines: List[str] = []
    for version in reversed(current.on_disk):
        seconds = tf.io.gfile.stat(os.path.join(model_dir, str(version))).mtime_nsec / 1e9
        marks = ["SERVING" if version == current.serving else "loaded" if version in current.loaded else ""]
        marks += (["pinned"] if version == current.pinned else []) + labels_of.get(version, [])
        pushed = datetime.datetime.fromtimestamp(seconds)
        lines.append(f"{version}  pushed {pushed:%Y-%m-%d %H:%M:%S}  {' '.join(m for m in marks if m)}".rstrip())
    mode = (f"pinned to version {current.pinned} (`serving unpin` serves the newest again)"
            if current.pinned is not None else "following the newest version")
    return "\n".join([f"{model_dir}: {mode}", *lines])


def card(model_dir: str, version: Optional[int]) -> str:
    """Where version `version`'s model card is (default: the version that serves), its HTML
    written again from its JSON when it is missing."""
    current = serving_config.state(*os.path.split(model_dir.rstrip("/")))
    version = current.serving if version is None else version
    if version is None or version not in current.on_disk:
        raise ValueError(f"no version {version} in {model_dir} ({', '.join(map(str, current.on_disk)) or 'none'})")
    folder = os.path.join(model_dir, str(version), model_card.CARD_DIR)
    page, data = os.path.join(folder, model_card.HTML_FILE), os.path.join(folder, model_card.JSON_FILE)
    if not tf.io.gfile.exists(data):
        raise ValueError(f"version {version} has no model card ({data}): it was pushed before the Pusher wrote "
                         "them; `taxi-pipeline lineage` tells where it came from")
    if not tf.io.gfile.exists(page):
        with tf.io.gfile.GFile(data) as handle:
            found = json.load(handle)
        with tf.io.gfile.GFile(page, "w") as handle:
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
        raise ValueError("serving pin needs the VERSION to serve")
    if action == "unpin" and version is not None:
        raise ValueError("serving unpin takes no VERSION")
    if not tf.io.gfile.isdir(model_dir):
        raise ValueError(f"no serving folder {model_dir}: nothing was pushed there yet")
    with pusher.push_lock(model_dir) as confirm:
        current = serving_config.state(serving_dir, model_name)
        confirm()
        if action == "unpin":
            serving_config.follow(serving_dir, model_name)
        else:
            target = serving_config.rollback_target(current, version) if action == "rollback" else version
            serving_config.pin(serving_dir, model_name, target)
        now = serving_config.state(serving_dir, model_name)
    before = f"version {current.serving}" if current.serving is not None else "nothing"
    return (f"{action}: serving version {now.serving} (was {before}); "
            f"{serving_config.config_path(serving_dir)} updated\n" + describe(now, model_dir))
