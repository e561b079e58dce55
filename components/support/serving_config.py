"""TF Serving's view of the serving folder: `models.config`, `batching_parameters.txt`,
and which version serves.

    <serving dir>/models.config             --model_config_file (polled by TF Serving with
                                            --model_config_file_poll_wait_seconds)
    <serving dir>/batching_parameters.txt   --enable_batching --batching_parameters_file
    <serving dir>/<model>/<version>/        what the Pusher pushes
    <serving dir>/<model>/.pinned           the pinned version, when an operator pinned one

- **following** (the default): the newest version serves. TF Serving loads the newest two
  (`specific` versions), so a rollback to the one before needs no new load; requests with
  no version get the newest.
- **pinned** to version V (`serving pin V`, `serving rollback`): TF Serving loads V alone,
  and every request gets it, whatever is pushed after: a push adds a folder and leaves
  `models.config` as it is, until `serving unpin`.

Version labels: `stable` names the version that served before the newest push (following)
or the pinned one. TF Serving refuses a config whose label names a version it has not
loaded yet (and keeps its previous config), so a label is only ever written for a version
that the config being replaced already loaded; a version pinned from further back gets its
label with the next change. (A `canary` label for a just-pushed version would name a
version not loaded yet at the moment its config is written: it is not written.)

Retention (`components.custom.pusher.prune`) never deletes a version `models.config` loads or
labels, nor the pinned one. The file is replaced atomically (a temporary file, named for
its host, process and a random part, renamed over it), under the model folder's push lock,
so TF Serving never reads half a file and a push and an operator's command never
interleave; and, since one file holds every model's entry, each read-modify-write of it
is made under the serving folder's own lock (`CONFIG_LOCK_FILE`), so that two models pushed
at once, or a push beside an operator pinning another model, both keep their entries.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import logging
import os
from typing import Callable, Dict, Iterator, List, Optional

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format, wrappers_pb2
from tensorflow_serving.config import model_server_config_pb2

from components.model.trainer.settings import SAVED_MODEL_FILE
from components.support import files, object_lock, registry, whole_files

CONFIG_FILE = "models.config"
# The serving folder's lock on `models.config`, which holds every model's entry.
CONFIG_LOCK_FILE = ".models.config.lock"
# A model folder's lock: every push, `serving` command and write of the model's record holds it.
PUSH_LOCK_FILE = ".push.lock"
BATCHING_FILE = "batching_parameters.txt"
STABLE = "stable"
PIN_FILE = ".pinned"
MODEL_PLATFORM = "tensorflow"
# Server-side batching: small batches that wait at most 2 ms, so that a single request's
# latency stays near a lone call's (measured by the serving check) and bursts share a
# batch. Written once; an operator's edits are kept.
BATCHING_DEFAULTS = {
    "max_batch_size": 64,
    "batch_timeout_micros": 2000,
    "max_enqueued_batches": 100,
    "num_batch_threads": os.cpu_count() or 1,
}


# How a version deleted or moved by hand comes back: whole, or TF Serving (and a push's
# clean-up of partial copies, `components.custom.pusher`) may see half of it.
PUT_IT_BACK = "Move it back whole (on object storage copy it with its saved_model.pb last, while no run pushes)"


class ServingConfigError(ValueError):
    """An operator's request that cannot be carried out (an unknown version, ...)."""


@dataclasses.dataclass(frozen=True)
class ServingState:
    """What TF Serving serves for one model, as `models.config` says."""

    model_name: str
    # Every version folder on disk, oldest first.
    on_disk: List[int]
    # The versions TF Serving loads, their labels, and the pinned version if any.
    loaded: List[int]
    labels: Dict[str, int]
    pinned: Optional[int]

    @property
    def serving(self) -> Optional[int]:
        """The version a request with no version or label gets: TF Serving's highest loaded
        one, of those it can load (whole in the folder)."""
        servable = [version for version in self.loaded if version in self.on_disk]
        return max(servable) if servable else None

    @property
    def missing(self) -> List[int]:
        """The versions `models.config` loads that are not whole in the folder (deleted or
        moved by hand): TF Serving cannot serve them."""
        return [version for version in self.loaded if version not in self.on_disk]

    def missing_note(self, model_dir: str) -> str:
        """What `missing` means and what to do, or ""."""
        if not self.missing:
            return ""
        named = ", ".join(map(str, self.missing))
        return (f"{CONFIG_FILE} loads version {named} of {model_dir}, which is not there (deleted or moved?): "
                f"TF Serving cannot serve it. {PUT_IT_BACK}, or serve another (`taxi-pipeline serving pin VERSION`, "
                "`serving unpin`); a push writes the config anew too, unless a version is pinned.")

    def require_serving(self, model_dir: str) -> int:
        """`serving`, or an error saying why no version serves."""
        if self.serving is None:
            raise ServingConfigError(self.missing_note(model_dir) or f"no version of {model_dir} may serve yet")
        return self.serving


def version_folders(model_dir: str) -> List[int]:
    """Every numeric folder, whole or not, oldest first."""
    if not files.isdir(model_dir):
        return []
    return sorted(int(name) for name in files.listdir(model_dir) if name.isdigit())


def is_whole(model_dir: str, version: int) -> bool:
    """Whether a version folder is whole. A local one always is (a push renames it into
    place); on object storage, where a folder cannot be renamed in one step, a push
    writes `saved_model.pb` last, so a folder without it is a copy under way or dead."""
    return not files.is_remote(model_dir) or files.exists(
        os.path.join(model_dir, str(version), SAVED_MODEL_FILE))


def versions(model_dir: str) -> List[int]:
    """The whole version folders, oldest first: what a reader may load."""
    return [version for version in version_folders(model_dir) if is_whole(model_dir, version)]


def config_path(serving_dir: str) -> str:
    return os.path.join(serving_dir, CONFIG_FILE)


def read_config(serving_dir: str) -> Optional[model_server_config_pb2.ModelServerConfig]:
    path = config_path(serving_dir)
    try:
        return files.parsed(path, _read_config, (text_format.ParseError,))
    except text_format.ParseError as err:
        raise _unreadable(path, err) from err


def _unreadable(path: str, err: text_format.ParseError) -> "ServingConfigError":
    return ServingConfigError(f"{path} is not a TF Serving model config: {err}; restore it, or remove it and "
                              "`taxi-pipeline serving unpin` (or `serving pin VERSION`) writes it again")


def _read_config(path: str) -> Optional[model_server_config_pb2.ModelServerConfig]:
    if not files.exists(path):
        return None
    return text_format.Parse(files.read_text(path), model_server_config_pb2.ModelServerConfig())


def _model_entry(config: Optional[model_server_config_pb2.ModelServerConfig], model_name: str):
    if config is None:
        return None
    for entry in config.model_config_list.config:
        if entry.name == model_name:
            return entry
    return None


def _pinned(model_dir: str) -> Optional[int]:
    path = os.path.join(model_dir, PIN_FILE)
    if not files.exists(path):
        return None
    text = files.read_text(path).strip()
    return int(text) if text.isdigit() else None


def state(serving_dir: str, model_name: str) -> ServingState:
    return _state(serving_dir, model_name, _model_entry(read_config(serving_dir), model_name))


def state_of(model_dir: str) -> ServingState:
    """`state` of the model in `model_dir` (`<serving folder>/<model name>`)."""
    return state(*os.path.split(model_dir.rstrip("/")))


def _state(serving_dir: str, model_name: str, entry) -> ServingState:
    """`state`, given the model's `models.config` entry (None: none)."""
    model_dir = os.path.join(serving_dir, model_name)
    on_disk = versions(model_dir)
    pinned = _pinned(model_dir)
    if entry is None:
        # No config yet: TF Serving's default policy, the newest version; none of those
        # the record bars (a first candidate awaiting approval is written without one).
        return ServingState(model_name, on_disk, registry.servable(registry.read(model_dir), on_disk)[-1:], {},
                            pinned)
    policy = entry.model_version_policy
    if policy.WhichOneof("policy_choice") == "specific":
        loaded = sorted(policy.specific.versions)
    elif policy.WhichOneof("policy_choice") == "all":
        loaded = list(on_disk)
    else:
        count = policy.latest.num_versions if policy.HasField("latest") else 1
        loaded = on_disk[-(count or 1):]
    return ServingState(model_name, on_disk, loaded, dict(entry.version_labels), pinned)


def serving_version(model_dir: str) -> Optional[int]:
    """The version that serves the model in `model_dir` (`<serving folder>/<model name>`),
    pinned or following, as `models.config` names it, else as the record last noted it;
    None when neither names one. Not TF Serving's default for a folder with no config (the
    newest version): a push cut short after its copy and before `models.config` names no
    version that serves, so the run that completes it sees what the cut run saw."""
    serving_dir, model_name = os.path.split(model_dir.rstrip("/"))
    entry = _model_entry(read_config(serving_dir), model_name)
    if entry is not None:
        return _state(serving_dir, model_name, entry).serving
    noted = registry.read(model_dir).serving
    return noted if noted is not None and noted in versions(model_dir) else None


def _entry_for(serving_dir: str, model_name: str, loaded: List[int], labels: Dict[str, int]):
    entry = model_server_config_pb2.ModelConfig(
        name=model_name,
        base_path=_model_base_path(serving_dir, model_name),
        model_platform=MODEL_PLATFORM,
    )
    entry.model_version_policy.specific.versions.extend(loaded)
    for label, version in labels.items():
        entry.version_labels[label] = version
    return entry


def still_held() -> None:
    """The check of a lock that cannot be lost while its holder lives (`flock`)."""


@contextlib.contextmanager
def folder_lock(folder: str, name: str) -> Iterator[Callable[[], None]]:
    """Holds the lock file `name` in `folder`: by `flock` on a local folder (released by
    the kernel when its holder dies), by a lock object on Cloud Storage
    (`object_lock.held`); other remote file systems are the scheduler's to serialize.
    Gives a check to call before each step a reader sees, which raises when the lock was
    lost meanwhile (`object_lock.Lease.confirm`; a `flock` is never lost)."""
    lock = files.join(folder, name)
    if folder.startswith("gs://"):
        with object_lock.held(lock) as lease:
            yield lease.confirm
        return
    if files.is_remote(folder):
        yield still_held
        return
    os.makedirs(folder, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # waits: a config is rewritten in milliseconds
        yield still_held
    finally:
        os.close(fd)


@contextlib.contextmanager
def push_lock(model_dir: str) -> Iterator[Callable[[], None]]:
    """Holds the model's folder for one push or one operator's change (`folder_lock`);
    gives a check to call before each step a reader sees, which raises when the lock was
    lost meanwhile."""
    files.makedirs(model_dir)
    with folder_lock(model_dir, PUSH_LOCK_FILE) as confirm:
        yield confirm


def _write(serving_dir: str, model_name: str, loaded: List[int], stable: Optional[int]) -> None:
    """Replaces this model's entry of `models.config` (other models' entries stay),
    atomically, under the serving folder's config lock; `stable` is labelled only if the
    config it replaces loaded it."""
    with folder_lock(serving_dir, CONFIG_LOCK_FILE) as confirm:
        _write_entry(serving_dir, model_name, loaded, stable, confirm)


def _write_entry(serving_dir: str, model_name: str, loaded: List[int], stable: Optional[int],
                 confirm: Callable[[], None]) -> None:
    config = read_config(serving_dir) or model_server_config_pb2.ModelServerConfig()
    available = state(serving_dir, model_name).loaded if _model_entry(config, model_name) else []
    labels = {STABLE: stable} if stable is not None and stable in available else {}
    kept = [entry for entry in config.model_config_list.config if entry.name != model_name]
    del config.model_config_list.config[:]
    config.model_config_list.config.extend(kept + [_entry_for(serving_dir, model_name, loaded, labels)])
    confirm()
    whole_files.write_text(config_path(serving_dir), text_format.MessageToString(config))
    write_batching_parameters(serving_dir)


def rebase(serving_dir: str, model_name: str) -> None:
    """Points this model's entry at its folder in `serving_dir`, its versions and labels
    kept: the config of a serving folder that was copied or moved names the folder it
    came from (`pipeline.run.relocation`)."""
    with folder_lock(serving_dir, CONFIG_LOCK_FILE) as confirm:
        config = read_config(serving_dir)
        entry = _model_entry(config, model_name)
        if entry is None:
            return
        entry.base_path = _model_base_path(serving_dir, model_name)
        confirm()
        whole_files.write_text(config_path(serving_dir), text_format.MessageToString(config))


def _model_base_path(serving_dir: str, model_name: str) -> str:
    model_dir = os.path.join(serving_dir, model_name)
    return model_dir if files.is_remote(model_dir) else os.path.abspath(model_dir)


def after_push(serving_dir: str, model_name: str) -> ServingState:
    """After a push (or a retention prune): a following config names the newest two
    versions; a pinned one is left as the operator set it."""
    current = state(serving_dir, model_name)
    model_dir = os.path.join(serving_dir, model_name)
    if current.pinned is None and registry.servable(registry.read(model_dir), versions(model_dir)):
        follow(serving_dir, model_name)
    else:  # pinned, or only versions awaiting approval: nothing changes what serves
        write_batching_parameters(serving_dir)
    return state(serving_dir, model_name)


def follow(serving_dir: str, model_name: str) -> None:
    """Unpinned: the newest version serves (see the module doc), of those the record lets
    serve (`registry.servable`: not one awaiting approval or rejected)."""
    model_dir = os.path.join(serving_dir, model_name)
    on_disk = registry.servable(registry.read(model_dir), versions(model_dir))
    if not on_disk:
        raise ServingConfigError(f"no model versions that may serve under {model_dir}")
    # The pin goes first: cut short after it, the config still loads the pinned version
    # and the next push or `unpin` follows; the other way round, a pin left behind a
    # following config would keep every later push from serving.
    pin_file = os.path.join(model_dir, PIN_FILE)
    if files.exists(pin_file):
        files.remove(pin_file)
    _write(serving_dir, model_name, on_disk[-2:], on_disk[-2] if len(on_disk) > 1 else on_disk[-1])
    _note_serving(model_dir, on_disk[-1], pinned=False)


def _note_serving(model_dir: str, version: int, pinned: bool) -> None:
    """The record says what `models.config` now serves (under the model's push lock)."""
    record = registry.read(model_dir)
    if (record.serving, record.pinned) != (version, pinned):
        record.serving, record.pinned = version, pinned
        registry.write(model_dir, record)


def decide(model_dir: str, inputs: str) -> Optional[registry.Decision]:
    """`registry.decide` on the model's record, given the versions that are there and the
    one that serves (`serving_version`); None when the candidate it names may serve and
    should, but does not: its push was cut short after the version was recorded and before
    `models.config` (a kill, a lost machine), and a run with its inputs finishes that push
    instead of repeating a decision never carried out. Unpinned, the newest version the
    record lets serve is the one that serves (`follow`); pinned (a rollback), what serves
    is the operator's choice and stands."""
    on_disk = versions(model_dir)
    record = registry.read(model_dir)
    serving = serving_version(model_dir)
    pinned = _pinned(model_dir) is not None or record.pinned
    decision = registry.decide(record, inputs, on_disk, serving, pinned)
    if decision is None or decision.candidate.version in (None, serving):
        return decision
    servable = registry.servable(record, on_disk)
    # SERVED only: the Pusher sets it and serves in one execution, which a kill leaves
    # unfinished and the next run executes again; an approval cut short is finished by
    # approving again (`pipeline.ops.serving.decide`).
    if decision.candidate.fate is registry.Fate.SERVED and not pinned and servable \
            and servable[-1] == decision.candidate.version:
        logging.info("version %d may serve and does not: its push was cut short; this run finishes it",
                     decision.candidate.version)
        return None
    return decision


def pushed_and_gone(model_dir: str, inputs: str) -> Optional[int]:
    """The version the newest candidate of `inputs` was pushed as, when it is no longer
    whole in `model_dir` (deleted or moved by hand); else None. A run of those inputs
    finds every component's output cached, its Pusher's too, and must push it again."""
    try:
        record = registry.read(model_dir)
    except ValueError:  # damaged: said where the record is needed (the decision, the Pusher)
        return None
    same = record.of_inputs(inputs) if inputs else []
    if same and same[-1].fate.pushed and same[-1].version is not None and same[-1].version not in versions(model_dir):
        return same[-1].version
    return None


def refuse_a_lost_pin(model_dir: str) -> None:
    """Raises when the model in `model_dir` is pinned to a version that is not whole in
    its folder: TF Serving serves nothing, and a run's pushes would never serve while the
    pin stands."""
    current = state_of(model_dir)
    if current.pinned is None or current.pinned in current.on_disk:
        return
    ways = ("`taxi-pipeline serving unpin` (the newest version serves) or `serving pin VERSION`"
            if registry.servable(registry.read(model_dir), current.on_disk)
            else f"remove {os.path.join(model_dir, PIN_FILE)} (no other version there may serve)")
    raise ServingConfigError(
        f"{model_dir} is pinned to version {current.pinned}, which is not there (deleted or moved?): TF Serving "
        f"serves nothing, and no version a run pushes serves while the pin stands. {PUT_IT_BACK}, or {ways}; "
        "then run again. Nothing that was serving changed.")


def refuse_unservable(model_dir: str, version: int) -> None:
    """Raises when the record bars `version` from serving, naming what to do instead."""
    candidate = registry.read(model_dir).of_version(version)
    if candidate is not None and candidate.fate.pushed and not candidate.fate.servable:
        hint = (f"`taxi-pipeline serving approve {version}` makes it serve"
                if candidate.fate is registry.Fate.AWAITING_APPROVAL else "it may not serve")
        raise ServingConfigError(f"version {version} is {candidate.fate.value}: {hint}")


def pin(serving_dir: str, model_name: str, version: int) -> None:
    """Only `version` serves, until `follow`; pushes after it do not change that."""
    model_dir = os.path.join(serving_dir, model_name)
    on_disk = versions(model_dir)
    if version not in on_disk:
        raise ServingConfigError(
            f"version {version} is not in {model_dir}; the versions there are {', '.join(map(str, on_disk)) or 'none'}"
        )
    refuse_unservable(model_dir, version)
    # The pin first: a config that loads only `version` is then never without its record.
    whole_files.write_text(os.path.join(model_dir, PIN_FILE), f"{version}\n")
    _write(serving_dir, model_name, [version], version)
    _note_serving(model_dir, version, pinned=True)


def rollback_target(current: ServingState, version: Optional[int] = None,
                    record: Optional[registry.Record] = None) -> int:
    """The version a rollback pins: `version`, or the newest one older than what serves
    that the record lets serve."""
    if version is not None:
        return version
    # Every loaded version gone (deleted or moved by hand): back from the newest of them.
    reference = current.serving if current.serving is not None else max(current.missing, default=None)
    older = [v for v in registry.servable(record or registry.Record(), current.on_disk)
             if reference is not None and v < reference]
    if older:
        return older[-1]
    if current.serving is None:
        raise ServingConfigError("nothing to roll back to: no version serves")
    barred = [v for v in current.on_disk if v < current.serving]
    if barred:
        raise ServingConfigError(f"nothing to roll back to: no version older than {current.serving} may serve "
                                 f"(the record bars version {', '.join(map(str, barred))}: `taxi-pipeline serving "
                                 "list` says why)")
    raise ServingConfigError(f"nothing to roll back to: version {current.serving} is the oldest in the serving folder")


def protected_versions(serving_dir: str, model_name: str) -> List[int]:
    """Versions retention must keep: every one `models.config` loads or labels, the pinned
    one, and those awaiting approval."""
    current = state(serving_dir, model_name)
    pinned = {current.pinned} if current.pinned is not None else set()
    pinned |= {c.version for c in registry.read(os.path.join(serving_dir, model_name)).awaiting}
    if _model_entry(read_config(serving_dir), model_name) is None:
        return sorted(pinned)
    return sorted(set(current.loaded) | set(current.labels.values()) | pinned)


def batching_parameters_class():
    """TF Serving's `BatchingParameters` message (session_bundle_config.proto, fields by
    their numbers there). tensorflow-serving-api does not ship that proto, so its text
    format is written through a message of the same shape."""
    pool = descriptor_pool.DescriptorPool()
    wrappers = descriptor_pb2.FileDescriptorProto()
    wrappers_pb2.DESCRIPTOR.CopyToProto(wrappers)
    pool.Add(wrappers)
    file = descriptor_pb2.FileDescriptorProto(
        name="tensorflow_serving/servables/tensorflow/batching_parameters.proto",
        package="tensorflow.serving", dependency=[wrappers.name], syntax="proto3",
    )
    message = file.message_type.add(name="BatchingParameters")
    fields = [("max_batch_size", 1, "Int64Value"), ("batch_timeout_micros", 2, "Int64Value"),
              ("max_enqueued_batches", 3, "Int64Value"), ("num_batch_threads", 4, "Int64Value")]
    for name, number, wrapper in fields:
        message.field.add(name=name, number=number, type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
                          type_name=f".google.protobuf.{wrapper}",
                          label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool.Add(file)
    descriptor = pool.FindMessageTypeByName("tensorflow.serving.BatchingParameters")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)


def write_batching_parameters(serving_dir: str) -> str:
    """`batching_parameters.txt` with `BATCHING_DEFAULTS`, unless it exists (an operator's
    file is kept as it is)."""
    path = os.path.join(serving_dir, BATCHING_FILE)
    if files.exists(path):
        return path
    parameters = batching_parameters_class()()
    for name, value in BATCHING_DEFAULTS.items():
        getattr(parameters, name).value = value
    whole_files.write_text(path, text_format.MessageToString(parameters))
    return path
