"""A Pusher whose pushes are atomic, idempotent, serialized and pruned, and which says
which model serves.

TFX's own filesystem Pusher copies the model straight into `<base>/<version>/`
(`saved_model.pb` last). A run killed mid-copy leaves a partial version folder behind
for TF Serving to trip over, and a run killed after the copy but before MLMD recorded
it pushes the same model again on the re-run. This one:

- publishes a version whole or not at all. A local folder: the copy is staged in
  `<base>/.staging-<version>/` and renamed into place (TF Serving ignores non-numeric
  names). Object storage (`gs://`) renames a folder object by object, so there the copy
  goes straight to `<base>/<version>/` with `saved_model.pb` written last: a version
  without it is not whole (`serving_config.versions` skips it), `models.config` (one
  object, written after) never names it, and the next push removes it;
- recognizes a model that is already the newest version (same SavedModel fingerprint)
  and records that version instead of pushing a duplicate;
- holds a lock while it chooses a version, copies and prunes: `<base>/.push.lock` with
  `fcntl.flock` on a local folder (released by the kernel when its holder dies), or the
  same object on Cloud Storage, created only if absent (`components.support.object_lock`,
  a lease a dead holder's successor breaks). Two pipelines pushing to one folder get
  distinct versions even within one second, and a staging folder or partial version
  found under the lock is a dead push's, never a live one's;
- keeps the newest `keep_versions` versions and deletes older ones (never the newest,
  nor one that TF Serving's `models.config` loads or labels: a pin, a rollback), each
  unmade whole first, as it was made whole last (`remove_version`), plus stale staging
  folders;
- rewrites `models.config` after the push (`components.support.serving_config`): the newest
  version serves, unless an operator pinned one, which then stays;
- serves a candidate only if the version that serves under the lock is the one it was
  judged against (the run's serving baseline): when another push or an operator's
  command changed it while the run went on, the candidate awaits approval instead
  (`hold_if_judged_against_another`), since nothing compared it with what it would replace;
- outputs a `ServedModelBlessing` (blessed, with the model's id, as the Evaluator's
  blessing has it) when the model serves. The pipeline's baseline resolver reads these,
  not the Evaluator's blessings: the baseline, and the warm start, is the model that
  last reached serving. A blessing alone changes nothing: after a kill between the
  Evaluator and the Pusher, the re-run finds every input as before, reuses the trained
  and evaluated model, and pushes it once.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import tensorflow as tf
from tfx import types
from tfx.components.evaluator import constants as evaluator_constants
from tfx.components.pusher import executor as tfx_pusher_executor
from tfx.dsl.components.base import base_component, executor_spec
from tfx.proto import pusher_pb2
from tfx.types import artifact_utils, standard_artifacts, standard_component_specs
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter
from tfx.utils import io_utils, proto_utils

from components.custom import baseline, ingest, model_card, promotion, recorded, serving_check
from components.model import features
from components.support import files, registry, serving_config, spans
from components.support.serving_config import SAVED_MODEL_FILE, push_lock, still_held, version_folders, versions

KEEP_VERSIONS_KEY = "keep_versions"
# The candidate's inputs and spans (`registry`), as SpanWindow gave them, and whether a
# candidate that passed every check serves at once ("auto") or awaits a person ("approval").
INPUTS_KEY = "inputs"
SPANS_KEY = "spans"
PROMOTION_KEY = "promotion"
# The run that made the candidate, as the record names it: set in a compiled pipeline to
# the pipeline job's name (`pipeline.cloud.compiled_fixes`); a local run's is its run id.
RUN_KEY = "run"
# The PushedModel's fate in the record (`registry.Fate`), which the run report reads.
FATE_PROPERTY = recorded.FATE_PROPERTY
SERVED_KEY = "served_blessing"
DATA_VERDICT_KEY = "data_verdict"
BASELINE_KEY = "baseline"
CODE_VERSION_KEY = "code_version"
STAGING_PREFIX = ".staging-"
# A local version being deleted is first renamed to this prefix and its number: a name no
# reader takes for a version, so none sees it half gone.
REMOVING_PREFIX = ".removing-"
# The PushedModel artifact's properties: TFX's own Pusher's, and the versions that served
# before and after the push.
PUSHED_PROPERTY = recorded.PUSHED_PROPERTY
DESTINATION_PROPERTY = recorded.DESTINATION_PROPERTY
VERSION_PROPERTY = recorded.VERSION_PROPERTY
REPLACED_PROPERTY = recorded.REPLACED_PROPERTY
SERVING_PROPERTY = recorded.SERVING_PROPERTY
HELD_PROPERTY = recorded.HELD_PROPERTY
PINNED_PROPERTY = recorded.PINNED_PROPERTY
_FINGERPRINT = "fingerprint.pb"


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


def copy_whole_last(model_path: str, target: str, staged: Optional[Callable[[str, int], None]],
                    version: int, confirm: Callable[[], None] = still_held) -> None:
    """Copies the SavedModel into `target` file by file, then `staged`'s additions, then,
    once `confirm()` says the lock is still held, `saved_model.pb`: the one file whose
    presence makes the version whole."""
    last = None
    base = model_path.rstrip("/")
    for folder, _, names in tf.io.gfile.walk(base):
        relative = folder.rstrip("/")[len(base):].strip("/")
        into = files.join(target, relative) if relative else target
        for name in names:
            source, destination = files.join(folder.rstrip("/"), name), files.join(into, name)
            if not relative and name == SAVED_MODEL_FILE:
                last = (source, destination)
                continue
            tf.io.gfile.makedirs(into)
            tf.io.gfile.copy(source, destination, overwrite=True)
    if last is None:
        raise FileNotFoundError(f"no {SAVED_MODEL_FILE} in {model_path}")
    if staged is not None:
        staged(target, version)
    confirm()
    tf.io.gfile.copy(*last, overwrite=True)


def remove_partial(base_directory: str, confirm: Callable[[], None] = still_held) -> List[int]:
    """Removes version folders a dead push left without `saved_model.pb` (nothing loads
    them). Call it under `push_lock`, whose check `confirm` runs before each deletion: a
    holder that lost the lock meanwhile would delete the new holder's copy in progress."""
    partial = sorted(set(version_folders(base_directory)) - set(versions(base_directory)))
    for version in partial:
        confirm()
        tf.io.gfile.rmtree(os.path.join(base_directory, str(version)))
    return partial


def push(model_path: str, base_directory: str, version: Optional[int] = None,
         staged: Optional[Callable[[str, int], None]] = None, confirm: Callable[[], None] = still_held) -> int:
    """Copies the SavedModel to `<base>/<version>` through a staging folder; returns the
    version: `version` (default: now, in seconds) or one more than the newest, if larger.
    `staged(folder, version)` adds to the staged copy before it is renamed into place (the
    model card). Call it under `push_lock`."""
    tf.io.gfile.makedirs(base_directory)
    existing = version_folders(base_directory)
    version = max([version or int(time.time())] + [v + 1 for v in existing[-1:]])
    if files.is_remote(base_directory):
        copy_whole_last(model_path, os.path.join(base_directory, str(version)), staged, version, confirm)
        return version
    staging = os.path.join(base_directory, f"{STAGING_PREFIX}{version}")
    if tf.io.gfile.exists(staging):
        tf.io.gfile.rmtree(staging)
    try:
        io_utils.copy_dir(model_path, staging)
        if staged is not None:
            staged(staging, version)
    except Exception:
        # A full or read-only disk: the partial copy would hold the space until the next
        # push prunes it (nothing serves from it).
        try:
            tf.io.gfile.rmtree(staging)
        except tf.errors.OpError as err:
            logging.warning("could not remove the partial copy %s: %s", staging, err)
        raise
    tf.io.gfile.rename(staging, os.path.join(base_directory, str(version)))
    return version


def prune(base_directory: str, keep_versions: int, confirm: Callable[[], None] = still_held) -> List[int]:
    """Deletes all but the newest `keep_versions` versions and any staging leftovers, but
    never a version TF Serving's `models.config` loads or labels (a pin, a rollback).
    Call it under `push_lock`: a staging folder is then a dead push's; `confirm`, the
    lock's check, runs before each deletion."""
    if keep_versions < 1:
        raise ValueError(f"{KEEP_VERSIONS_KEY} must be at least 1, got {keep_versions}")
    for name in tf.io.gfile.listdir(base_directory):
        if name.rstrip("/").startswith((STAGING_PREFIX, REMOVING_PREFIX)):
            confirm()
            tf.io.gfile.rmtree(os.path.join(base_directory, name.rstrip("/")))
    remove_partial(base_directory, confirm)
    protected = set(serving_config.protected_versions(*os.path.split(base_directory.rstrip("/"))))
    removed = [v for v in versions(base_directory)[:-keep_versions] if v not in protected]
    for version in removed:
        confirm()
        remove_version(base_directory, version)
    return removed


def remove_version(base_directory: str, version: int) -> None:
    """Deletes a whole version so that no reader ever sees it in part, the way `push` made
    it whole in reverse: on object storage its `saved_model.pb` goes first (the folder is
    then no version), a local folder is renamed out of sight first (`REMOVING_PREFIX`). A
    deletion cut short leaves a folder the next prune removes."""
    folder = os.path.join(base_directory, str(version))
    if files.is_remote(base_directory):
        tf.io.gfile.remove(os.path.join(folder, SAVED_MODEL_FILE))
        tf.io.gfile.rmtree(folder)
        return
    doomed = os.path.join(base_directory, f"{REMOVING_PREFIX}{version}")
    os.rename(folder, doomed)
    tf.io.gfile.rmtree(doomed)


def hold_if_judged_against_another(candidate: registry.Candidate, judged_against: str, now: str) -> None:
    """A candidate that would serve, judged (evaluated, shadow-checked) against version
    `judged_against` while `now` serves (both as `baseline.serving_now` says them), awaits
    approval instead, its reason saying so."""
    if candidate.fate is not registry.Fate.SERVED or judged_against == now:
        return

    def named(version: str) -> str:
        return "no version" if version == registry.NOTHING_SERVES else f"version {version}"

    candidate.fate = registry.Fate.AWAITING_APPROVAL
    candidate.reason = (f"judged against {named(judged_against)}, but {named(now)} serves since the run started: "
                        f"`taxi-pipeline serving approve {candidate.version}` serves it as it is")


def publish(model_path: str, base_directory: str, keep_versions: int,
            staged: Optional[Callable[[str, int], None]] = None,
            candidate: Optional[registry.Candidate] = None, judged_against: Optional[str] = None,
            ) -> Tuple[Optional[int], int, List[int], serving_config.ServingState]:
    """Under the push lock: pushes the model unless it already is the newest version,
    records `candidate` (its fate `SERVED`, or `AWAITING_APPROVAL`, which copies the
    version without serving it; `hold_if_judged_against_another` when `judged_against`,
    the version it was judged against, is given) with that version, prunes, and rewrites
    `models.config`.
    The record is written before the version becomes whole, so that no version is ever
    whole and unknown to it (`registry.servable`). A version the record already knew keeps
    its fate (a person may have rejected it since), and `candidate.fate` says it.
    Returns the version that served before, the model's version, the versions removed,
    and what serves after."""
    serving_dir, model_name = os.path.split(base_directory.rstrip("/"))

    def record(number: int) -> None:
        if candidate is not None:
            _record_pushed(base_directory, candidate, number, confirm, judged_against, serving)

    def staged_and_recorded(folder: str, number: int) -> None:
        if staged is not None:
            staged(folder, number)
        record(number)

    with push_lock(base_directory) as confirm:
        before = serving_config.state(serving_dir, model_name).serving
        # Read as the serving baseline read it, so that the two compare.
        serving = baseline.serving_now(base_directory)
        version = already_pushed(model_path, base_directory)
        if version is None:
            version = push(model_path, base_directory, staged=staged_and_recorded, confirm=confirm)
            logging.info("pushed %s to %s/%d", model_path, base_directory, version)
        else:
            logging.info("model %s is already version %d in %s; not pushed again", model_path, version,
                         base_directory)
            record(version)
        removed = prune(base_directory, keep_versions, confirm)
        confirm()
        after = serving_config.after_push(serving_dir, model_name)
    return before, version, removed, after


def _record_pushed(base_directory: str, candidate: registry.Candidate, version: int,
                   confirm: Callable[[], None], judged_against: Optional[str], serving: str) -> None:
    """`candidate` as version `version` in the record, unless the record knows that
    version already: then `candidate` takes its fate and reason. A new one is held for
    approval when judged against another version than `serving`
    (`hold_if_judged_against_another`, with `judged_against` given). Call it under the
    push lock."""
    record = registry.read(base_directory)
    known = record.of_version(version)
    candidate.version = version
    if known is not None:
        candidate.fate, candidate.reason = known.fate, known.reason
        return
    if judged_against is not None:
        hold_if_judged_against_another(candidate, judged_against, serving)
    record.add(candidate)
    confirm()
    registry.write(base_directory, record)


def refusal(blessing: types.Artifact) -> Tuple[registry.Fate, str]:
    """The fate of a candidate its blessing (the last check's) refuses, and the reason the
    check that refused it gave: the shadow check passes the serving check's reason on beside
    its own."""
    fate = registry.Fate(blessing.get_string_custom_property(serving_check.FATE_PROPERTY)
                         or registry.Fate.NOT_BLESSED.value)
    reason = recorded.SHADOW_CHECK_PROPERTY if fate is registry.Fate.SHADOW_REFUSED else serving_check.REASON_PROPERTY
    return fate, blessing.get_string_custom_property(reason)


def record_refusal(base_directory: str, candidate: registry.Candidate) -> None:
    """Records a candidate a check refused, under the push lock (nothing is pushed)."""
    with push_lock(base_directory) as confirm:
        record = registry.read(base_directory)
        newest = record.newest
        if newest is not None and (newest.inputs, newest.run, newest.fate) == (
                candidate.inputs, candidate.run, candidate.fate):
            return  # the same run's Pusher again (a re-run after a crash)
        record.add(candidate)
        confirm()
        registry.write(base_directory, record)


def mark_pushed(model_push: types.Artifact, destination: str, version: int) -> None:
    """The properties TFX's Pusher sets on its output, which the run report reads."""
    model_push.set_int_custom_property(PUSHED_PROPERTY, 1)
    model_push.set_string_custom_property(DESTINATION_PROPERTY, destination)
    model_push.set_string_custom_property(VERSION_PROPERTY, str(version))


class ServedModelBlessing(standard_artifacts.ModelBlessing):
    """A model that reached serving: `blessed` 1 and the model's id in `current_model_id`,
    as in the Evaluator's blessing, so `LatestBlessedModelStrategy` resolves it."""

    # `<module>.<Class>`: KFP v2 needs a custom type's name in that form, and its
    # containers import the class by it (`components/__init__.py` provides it).
    TYPE_NAME = "components.ServedModelBlessing"


class StagedPusherSpec(ComponentSpec):
    PARAMETERS = {
        standard_component_specs.PUSH_DESTINATION_KEY: ExecutionParameter(type=pusher_pb2.PushDestination),
        KEEP_VERSIONS_KEY: ExecutionParameter(type=int),
        CODE_VERSION_KEY: ExecutionParameter(type=str, optional=True),
        INPUTS_KEY: ExecutionParameter(type=str, optional=True),
        SPANS_KEY: ExecutionParameter(type=str, optional=True),
        PROMOTION_KEY: ExecutionParameter(type=str, optional=True),
        RUN_KEY: ExecutionParameter(type=str, optional=True),
    }
    INPUTS = {
        standard_component_specs.MODEL_KEY: ChannelParameter(type=standard_artifacts.Model),
        standard_component_specs.MODEL_BLESSING_KEY: ChannelParameter(type=standard_artifacts.ModelBlessing),
        # What the model card tells (`components.custom.model_card`).
        standard_component_specs.EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples, optional=True),
        standard_component_specs.STATISTICS_KEY: ChannelParameter(
            type=standard_artifacts.ExampleStatistics, optional=True),
        standard_component_specs.EVALUATION_KEY: ChannelParameter(
            type=standard_artifacts.ModelEvaluation, optional=True),
        standard_component_specs.SCHEMA_KEY: ChannelParameter(type=standard_artifacts.Schema, optional=True),
        DATA_VERDICT_KEY: ChannelParameter(type=standard_artifacts.ExampleAnomalies, optional=True),
        # The serving baseline the candidate was judged against (`components.custom.baseline`).
        BASELINE_KEY: ChannelParameter(type=standard_artifacts.Model, optional=True),
    }
    OUTPUTS = {
        standard_component_specs.PUSHED_MODEL_KEY: ChannelParameter(type=standard_artifacts.PushedModel),
        SERVED_KEY: ChannelParameter(type=ServedModelBlessing),
    }


def _mark_served(served: types.Artifact, blessing: types.Artifact, model: types.Artifact, serves: bool,
                 copied: bool) -> None:
    """`blessed` is whether the model serves; a model `copied` into the serving folder (it
    may await approval) is named, so that `serving approve` can make it the baseline."""
    served.set_int_custom_property(evaluator_constants.ARTIFACT_PROPERTY_BLESSED_KEY, int(serves))
    if copied:
        model_id = evaluator_constants.ARTIFACT_PROPERTY_CURRENT_MODEL_ID_KEY
        if blessing.has_custom_property(model_id):
            # As the blessing holds it: an MLMD id locally, but on Vertex the model's
            # resource name, a string (TFX's entry point rewrites the Evaluator's), which
            # the compiled baseline resolver matches against the model's name.
            served.mlmd_artifact.custom_properties[model_id].CopyFrom(
                blessing.mlmd_artifact.custom_properties[model_id])
        else:
            served.set_int_custom_property(model_id, model.id)
        served.set_string_custom_property(evaluator_constants.ARTIFACT_PROPERTY_CURRENT_MODEL_URI_KEY, model.uri)


def _one(input_dict: Dict[str, List[types.Artifact]], key: str) -> Optional[types.Artifact]:
    found = input_dict.get(key) or []
    return found[0] if found else None


def _card(input_dict: Dict[str, List[types.Artifact]], exec_properties: Dict[str, Any], model_name: str,
          model_path: str, blessing: types.Artifact) -> Dict[str, Any]:
    """The model card of this push, from the inputs the run gave (its version set at the push)."""
    examples = _one(input_dict, standard_component_specs.EXAMPLES_KEY)
    statistics = _one(input_dict, standard_component_specs.STATISTICS_KEY)
    evaluation = _one(input_dict, standard_component_specs.EVALUATION_KEY)
    schema = _one(input_dict, standard_component_specs.SCHEMA_KEY)
    verdict = _one(input_dict, DATA_VERDICT_KEY)
    source_files = examples.get_string_custom_property(ingest.SOURCE_FILES_PROPERTY) if examples else ""
    return model_card.build(
        model_name=model_name, version=0, model_path=model_path,
        code_version=exec_properties.get(CODE_VERSION_KEY) or "",
        source_files=json.loads(source_files or "{}"),
        split_names=artifact_utils.decode_split_names(examples.split_names) if examples else [],
        statistics_uri=statistics.uri if statistics else "", evaluation_uri=evaluation.uri if evaluation else "",
        verdict_uri=verdict.uri if verdict else "",
        serving_check=blessing.get_string_custom_property(serving_check.REASON_PROPERTY)
        if blessing.has_custom_property(serving_check.REASON_PROPERTY) else "",
        schema_dir=schema.uri if schema else os.path.join(os.path.dirname(features.__file__), "schema"),
    )


class Executor(tfx_pusher_executor.Executor):
    """Pusher executor with staged, idempotent, serialized pushes and retention
    (filesystem destinations only)."""

    def Do(
        self,
        input_dict: Dict[str, List[types.Artifact]],
        output_dict: Dict[str, List[types.Artifact]],
        exec_properties: Dict[str, Any],
    ) -> None:
        model_push = artifact_utils.get_single_instance(output_dict[standard_component_specs.PUSHED_MODEL_KEY])
        served = artifact_utils.get_single_instance(output_dict[SERVED_KEY])
        blessing = artifact_utils.get_single_instance(input_dict[standard_component_specs.MODEL_BLESSING_KEY])
        model = artifact_utils.get_single_instance(input_dict[standard_component_specs.MODEL_KEY])
        destination = pusher_pb2.PushDestination()
        proto_utils.json_to_proto(exec_properties[standard_component_specs.PUSH_DESTINATION_KEY], destination)
        if destination.WhichOneof("destination") != "filesystem":
            raise ValueError("this Pusher pushes to a filesystem destination only")
        base = destination.filesystem.base_directory
        candidate = self._candidate(exec_properties)
        if not self.CheckBlessing(input_dict):
            model_push.set_int_custom_property(PUSHED_PROPERTY, 0)
            _mark_served(served, blessing, model, serves=False, copied=False)
            candidate.fate, candidate.reason = refusal(blessing)
            model_push.set_string_custom_property(FATE_PROPERTY, candidate.fate.value)
            record_refusal(base, candidate)
            return
        if exec_properties.get(PROMOTION_KEY) == promotion.APPROVAL:
            candidate.fate = registry.Fate.AWAITING_APPROVAL
        model_path = self.GetModelPath(input_dict)
        keep = int(exec_properties[KEEP_VERSIONS_KEY])

        serving_dir, model_name = os.path.split(base.rstrip("/"))
        card = _card(input_dict, exec_properties, model_name, model_path, blessing)

        def with_card(folder: str, version: int) -> None:
            card["model"]["version"] = version
            model_card.write(folder, card)

        judged = _one(input_dict, BASELINE_KEY)
        judged_against = judged.get_string_custom_property(SERVING_PROPERTY) if judged else ""
        before, version, removed, after = publish(model_path, base, keep, staged=with_card, candidate=candidate,
                                                  judged_against=judged_against or None)
        if removed:
            logging.info("retention (%d versions): removed %s", keep, removed)
        if after.pinned is not None:
            logging.warning("serving stays pinned to version %d (models.config); version %d is on disk, "
                            "not served, until `taxi-pipeline serving unpin`", after.pinned, version)
        io_utils.copy_dir(model_path, model_push.uri)
        mark_pushed(model_push, os.path.join(base, str(version)), version)
        if before is not None and before != after.serving:
            model_push.set_string_custom_property(REPLACED_PROPERTY, str(before))
        model_push.set_string_custom_property(SERVING_PROPERTY, str(after.serving))
        if after.pinned is not None:
            model_push.set_string_custom_property(PINNED_PROPERTY, str(after.pinned))
        model_push.set_string_custom_property(FATE_PROPERTY, candidate.fate.value)
        if candidate.fate is registry.Fate.AWAITING_APPROVAL and candidate.reason:
            model_push.set_string_custom_property(HELD_PROPERTY, candidate.reason)
        # A version awaiting approval (or rejected) is not the baseline nor the next warm start.
        _mark_served(served, blessing, model, serves=candidate.fate.servable, copied=True)

    def _candidate(self, exec_properties: Dict[str, Any]) -> registry.Candidate:
        """This run's candidate, its fate `SERVED` until a check or the promotion says otherwise."""
        return registry.Candidate(
            inputs=exec_properties.get(INPUTS_KEY) or "",
            spans=spans.parse_numbers(exec_properties.get(SPANS_KEY) or ""),
            fate=registry.Fate.SERVED,
            run=exec_properties.get(RUN_KEY) or str(getattr(self._context, "pipeline_run_id", "") or ""),
            at=registry.now(),
        )


class StagedPusher(base_component.BaseComponent):
    """Pushes a blessed model to a filesystem folder in TF Serving's layout (see the
    module doc); `outputs[SERVED_KEY]` says which model serves."""

    SPEC_CLASS = StagedPusherSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(self, model: types.BaseChannel, model_blessing: types.BaseChannel, serving_model_dir: str,
                 keep_versions: int, examples: Optional[types.BaseChannel] = None,
                 statistics: Optional[types.BaseChannel] = None, evaluation: Optional[types.BaseChannel] = None,
                 schema: Optional[types.BaseChannel] = None, data_verdict: Optional[types.BaseChannel] = None,
                 baseline: Optional[types.BaseChannel] = None,
                 code_version: str = "", inputs: Any = "", spans_used: Any = "",
                 promotion_mode: str = promotion.AUTO):
        """`examples`, `statistics`, `evaluation`, `schema`, `data_verdict` and
        `code_version` are what the model card of each pushed version tells."""
        if keep_versions < 1:
            raise ValueError(f"{KEEP_VERSIONS_KEY} must be at least 1, got {keep_versions}")
        super().__init__(spec=StagedPusherSpec(
            model=model,
            model_blessing=model_blessing,
            examples=examples,
            statistics=statistics,
            evaluation=evaluation,
            schema=schema,
            data_verdict=data_verdict,
            baseline=baseline,
            code_version=code_version,
            inputs=inputs,
            spans=spans_used,
            promotion=promotion_mode,
            push_destination=pusher_pb2.PushDestination(
                filesystem=pusher_pb2.PushDestination.Filesystem(base_directory=serving_model_dir)
            ),
            keep_versions=keep_versions,
            pushed_model=types.Channel(type=standard_artifacts.PushedModel),
            served_blessing=types.Channel(type=ServedModelBlessing),
        ))
