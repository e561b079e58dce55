"""A Pusher whose pushes are atomic, idempotent and pruned.

TFX's own filesystem Pusher copies the model straight into `<base>/<version>/`
(`saved_model.pb` last). A run killed mid-copy leaves a partial version folder behind
for TF Serving to trip over, and a run killed after the copy but before MLMD recorded
it pushes the same model again on the re-run. This one:

- stages the copy in `<base>/.staging-<version>/` and renames it into place, so a
  version folder is either complete or absent (TF Serving ignores non-numeric names);
- recognizes a model that is already the newest version (same SavedModel fingerprint)
  and records that version instead of pushing a duplicate;
- keeps the newest `keep_versions` versions and deletes older ones (never the newest,
  which is the one TF Serving's default policy serves), plus stale staging folders.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any, Dict, List, Optional

import tensorflow as tf
from tfx import types
from tfx import v1 as tfx
from tfx.components.pusher import executor as tfx_pusher_executor
from tfx.dsl.components.base import executor_spec
from tfx.proto import pusher_pb2
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import io_utils, proto_utils

KEEP_VERSIONS_KEY = "keep_versions"
STAGING_PREFIX = ".staging-"
# The PushedModel artifact's properties, as TFX's own Pusher names them.
PUSHED_PROPERTY = "pushed"
DESTINATION_PROPERTY = "pushed_destination"
VERSION_PROPERTY = "pushed_version"
_FINGERPRINT = "fingerprint.pb"


def versions(base_directory: str) -> List[int]:
    """The version folders TF Serving would see, oldest first."""
    if not tf.io.gfile.isdir(base_directory):
        return []
    names = (name.rstrip("/") for name in tf.io.gfile.listdir(base_directory))
    return sorted(int(name) for name in names if name.isdigit())


def _read(path: str) -> Optional[bytes]:
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path, "rb") as handle:
        return handle.read()


def already_pushed(model_path: str, base_directory: str) -> Optional[int]:
    """The newest version, if it holds this very model (same SavedModel fingerprint)."""
    fingerprint = _read(os.path.join(model_path, _FINGERPRINT))
    existing = versions(base_directory)
    if fingerprint is None or not existing:
        return None
    newest = existing[-1]
    return newest if _read(os.path.join(base_directory, str(newest), _FINGERPRINT)) == fingerprint else None


def push(model_path: str, base_directory: str, version: Optional[int] = None) -> int:
    """Copies the SavedModel to `<base>/<version>` through a staging folder; returns the version."""
    tf.io.gfile.makedirs(base_directory)
    existing = versions(base_directory)
    version = max([version or int(time.time())] + [v + 1 for v in existing[-1:]])
    staging = os.path.join(base_directory, f"{STAGING_PREFIX}{version}")
    if tf.io.gfile.exists(staging):
        tf.io.gfile.rmtree(staging)
    io_utils.copy_dir(model_path, staging)
    tf.io.gfile.rename(staging, os.path.join(base_directory, str(version)))
    return version


def prune(base_directory: str, keep_versions: int) -> List[int]:
    """Deletes all but the newest `keep_versions` versions and any staging leftovers."""
    if keep_versions < 1:
        raise ValueError(f"{KEEP_VERSIONS_KEY} must be at least 1, got {keep_versions}")
    for name in tf.io.gfile.listdir(base_directory):
        if name.rstrip("/").startswith(STAGING_PREFIX):
            tf.io.gfile.rmtree(os.path.join(base_directory, name.rstrip("/")))
    removed = versions(base_directory)[:-keep_versions]
    for version in removed:
        tf.io.gfile.rmtree(os.path.join(base_directory, str(version)))
    return removed


def mark_pushed(model_push: types.Artifact, destination: str, version: int) -> None:
    """The properties TFX's Pusher sets on its output, which the run report reads."""
    model_push.set_int_custom_property(PUSHED_PROPERTY, 1)
    model_push.set_string_custom_property(DESTINATION_PROPERTY, destination)
    model_push.set_string_custom_property(VERSION_PROPERTY, str(version))


class Executor(tfx_pusher_executor.Executor):
    """Pusher executor with staged, idempotent pushes and retention (filesystem only)."""

    def Do(
        self,
        input_dict: Dict[str, List[types.Artifact]],
        output_dict: Dict[str, List[types.Artifact]],
        exec_properties: Dict[str, Any],
    ) -> None:
        model_push = artifact_utils.get_single_instance(output_dict[standard_component_specs.PUSHED_MODEL_KEY])
        if not self.CheckBlessing(input_dict):
            model_push.set_int_custom_property(PUSHED_PROPERTY, 0)
            return
        model_path = self.GetModelPath(input_dict)
        destination = pusher_pb2.PushDestination()
        proto_utils.json_to_proto(exec_properties[standard_component_specs.PUSH_DESTINATION_KEY], destination)
        if destination.WhichOneof("destination") != "filesystem":
            raise ValueError("this Pusher pushes to a filesystem destination only")
        base = destination.filesystem.base_directory
        custom_config = exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY) or {}
        if isinstance(custom_config, str):
            custom_config = json.loads(custom_config or "{}")
        if KEEP_VERSIONS_KEY not in custom_config:
            raise ValueError(f"the Pusher's custom_config needs {KEEP_VERSIONS_KEY!r}")
        keep = int(custom_config[KEEP_VERSIONS_KEY])

        version = already_pushed(model_path, base)
        if version is None:
            version = push(model_path, base)
            logging.info("pushed %s to %s/%d", model_path, base, version)
        else:
            logging.info("model %s is already version %d in %s; not pushed again", model_path, version, base)
        removed = prune(base, keep)
        if removed:
            logging.info("retention (%d versions): removed %s", keep, removed)
        io_utils.copy_dir(model_path, model_push.uri)
        mark_pushed(model_push, os.path.join(base, str(version)), version)


class StagedPusher(tfx.components.Pusher):
    """`tfx.components.Pusher` with the staged, idempotent, pruning executor."""

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)
