"""TF Serving's models.config and batching parameters: follow, pin, rollback, retention."""

import os

import pytest
from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from components.custom import pusher
from components.support import files, serving_config
from tests.helpers import served_models

MODEL = "big_tip"


def _serving(tmp_path, versions):
    serving_dir = tmp_path / "serving"
    for version in versions:
        (serving_dir / MODEL / str(version)).mkdir(parents=True)
    return str(serving_dir)


def _model_folder(tmp_path):
    """A folder a push takes for a SavedModel."""
    path = tmp_path / "model"
    (path / "variables").mkdir(parents=True, exist_ok=True)
    (path / "saved_model.pb").write_bytes(b"graph")
    (path / "variables" / "variables.index").write_bytes(b"index")
    return str(path)


def test_following_loads_the_newest_two_and_labels_only_what_was_loaded(tmp_path):
    serving_dir = _serving(tmp_path, [100, 200, 300])
    serving_config.follow(serving_dir, MODEL)
    (entry,) = served_models(serving_dir)
    assert entry.name == MODEL
    assert entry.base_path == os.path.join(serving_dir, MODEL)
    assert entry.model_platform == "tensorflow"
    assert list(entry.model_version_policy.specific.versions) == [200, 300]
    # TF Serving had loaded nothing under an earlier config: a label would be refused.
    assert dict(entry.version_labels) == {}
    assert serving_config.state(serving_dir, MODEL).serving == 300
    # A push: the version that served before it (loaded by the config replaced) is `stable`.
    (tmp_path / "serving" / MODEL / "400").mkdir()
    serving_config.after_push(serving_dir, MODEL)
    (entry,) = served_models(serving_dir)
    assert list(entry.model_version_policy.specific.versions) == [300, 400]
    assert dict(entry.version_labels) == {"stable": 300}


def test_a_pin_survives_the_next_push_and_unpin_serves_the_newest(tmp_path):
    serving_dir = _serving(tmp_path, [100, 200])
    serving_config.follow(serving_dir, MODEL)
    serving_config.pin(serving_dir, MODEL, 100)
    (tmp_path / "serving" / MODEL / "300").mkdir()
    after = serving_config.after_push(serving_dir, MODEL)
    assert after.pinned == 100 and after.serving == 100
    (entry,) = served_models(serving_dir)
    assert list(entry.model_version_policy.specific.versions) == [100]
    assert dict(entry.version_labels) == {"stable": 100}  # loaded by the config it replaced
    serving_config.follow(serving_dir, MODEL)
    assert serving_config.state(serving_dir, MODEL).serving == 300
    assert serving_config.state(serving_dir, MODEL).pinned is None
    assert not (tmp_path / "serving" / MODEL / serving_config.PIN_FILE).exists()


def test_an_unpin_cut_short_leaves_no_pin_that_would_keep_later_pushes_from_serving(tmp_path, monkeypatch):
    serving_dir = _serving(tmp_path, [100, 200])
    serving_config.follow(serving_dir, MODEL)
    serving_config.pin(serving_dir, MODEL, 100)

    def killed(*_args):
        raise OSError("killed")

    with monkeypatch.context() as cut:
        cut.setattr(serving_config, "_write", killed)
        with pytest.raises(OSError):
            serving_config.follow(serving_dir, MODEL)  # `serving unpin`, cut before its config
    assert serving_config.state(serving_dir, MODEL).serving == 100  # what was serving stays
    (tmp_path / "serving" / MODEL / "300").mkdir()
    after = serving_config.after_push(serving_dir, MODEL)
    assert (after.pinned, after.serving) == (None, 300)


def test_rollback_goes_to_the_version_before_what_serves(tmp_path):
    serving_dir = _serving(tmp_path, [100, 200, 300])
    serving_config.follow(serving_dir, MODEL)
    assert serving_config.rollback_target(serving_config.state(serving_dir, MODEL)) == 200
    serving_config.pin(serving_dir, MODEL, 200)
    # A second rollback goes one further back.
    assert serving_config.rollback_target(serving_config.state(serving_dir, MODEL)) == 100
    serving_config.pin(serving_dir, MODEL, 100)
    with pytest.raises(serving_config.ServingConfigError, match="oldest"):
        serving_config.rollback_target(serving_config.state(serving_dir, MODEL))


def test_pinning_a_version_that_is_not_there_names_the_ones_that_are(tmp_path):
    serving_dir = _serving(tmp_path, [100, 200])
    with pytest.raises(serving_config.ServingConfigError, match="version 150 is not in .*100, 200"):
        serving_config.pin(serving_dir, MODEL, 150)
    assert not os.path.exists(os.path.join(serving_dir, serving_config.CONFIG_FILE))


def test_retention_never_deletes_a_pinned_or_loaded_version(tmp_path):
    serving_dir = _serving(tmp_path, [100, 200, 300, 400])
    serving_config.pin(serving_dir, MODEL, 100)
    removed = pusher.prune(os.path.join(serving_dir, MODEL), keep_versions=1)
    assert removed == [200, 300]
    assert serving_config.versions(os.path.join(serving_dir, MODEL)) == [100, 400]
    # Following, the two versions TF Serving loads stay whatever the retention.
    serving_config.follow(serving_dir, MODEL)
    assert pusher.prune(os.path.join(serving_dir, MODEL), keep_versions=1) == []


def test_other_models_entries_are_kept(tmp_path):
    serving_dir = _serving(tmp_path, [100])
    other = model_server_config_pb2.ModelServerConfig()
    other.model_config_list.config.add(name="other", base_path="/models/other", model_platform="tensorflow")
    (tmp_path / "serving" / serving_config.CONFIG_FILE).write_text(text_format.MessageToString(other))
    serving_config.follow(serving_dir, MODEL)
    assert [entry.name for entry in served_models(serving_dir)] == ["other", MODEL]


def test_a_config_that_is_not_one_is_named(tmp_path):
    serving_dir = _serving(tmp_path, [100])
    (tmp_path / "serving" / serving_config.CONFIG_FILE).write_text("this is not a config {")
    unreadable = "models.config is not a TF Serving model config: .*; restore it, or remove it and `taxi-pipeline"
    with pytest.raises(serving_config.ServingConfigError, match=unreadable):
        serving_config.state(serving_dir, MODEL)


def test_a_config_on_object_storage_read_truncated_is_read_again_a_bounded_number_of_times(tmp_path, monkeypatch):
    """TensorFlow's Cloud Storage client keeps an object's size for a few seconds and reads
    that many bytes: a config rewritten longer meanwhile reads short (seen against the
    emulator, twice in a row beside two pushes). It is read again after that time, up to
    REMOTE_READS reads in all, each after a wait of the cache's age; a local one is read once."""
    remote = f"ram://{tmp_path.name}/serving"
    local = str(tmp_path / "local-serving")
    for serving_dir in (remote, local):
        pusher.push(_model_folder(tmp_path), f"{serving_dir}/{MODEL}", version=100)
        serving_config.after_push(serving_dir, MODEL)
    real_read, reads, short = serving_config._read_config, [], {"times": 0}

    def read_short(path):
        reads.append(path)
        if len(reads) <= short["times"]:
            raise text_format.ParseError('1:20 : Expected "}".')
        return real_read(path)

    waits = []
    monkeypatch.setattr(serving_config, "_read_config", read_short)
    monkeypatch.setattr(files.time, "sleep", waits.append)
    short["times"] = files.REMOTE_READS - 1
    assert serving_config.state(remote, MODEL).serving == 100
    assert len(reads) == files.REMOTE_READS
    assert waits == [files.STAT_CACHE_SECONDS] * (files.REMOTE_READS - 1)
    reads.clear()
    short["times"] = files.REMOTE_READS
    with pytest.raises(serving_config.ServingConfigError, match="is not a TF Serving model config"):
        serving_config.state(remote, MODEL)
    assert len(reads) == files.REMOTE_READS
    reads.clear()
    short["times"] = 1
    with pytest.raises(serving_config.ServingConfigError, match="is not a TF Serving model config"):
        serving_config.state(local, MODEL)
    assert len(reads) == 1


def test_batching_parameters_are_written_once_and_parse_as_tf_servings(tmp_path):
    serving_dir = _serving(tmp_path, [100])
    serving_config.follow(serving_dir, MODEL)
    path = os.path.join(serving_dir, serving_config.BATCHING_FILE)
    parameters = text_format.Parse(open(path).read(), serving_config.batching_parameters_class()())
    assert parameters.max_batch_size.value == serving_config.BATCHING_DEFAULTS["max_batch_size"]
    assert parameters.batch_timeout_micros.value == serving_config.BATCHING_DEFAULTS["batch_timeout_micros"]
    # The text TF Serving's --batching_parameters_file reads (its documented example form).
    assert "max_batch_size {\n  value: 64\n}" in open(path).read()
    with open(path, "w") as handle:
        handle.write("max_batch_size { value: 8 }\n")
    serving_config.follow(serving_dir, MODEL)
    assert open(path).read() == "max_batch_size { value: 8 }\n"  # an operator's file is kept


def test_two_models_written_at_once_both_keep_their_entries(tmp_path, monkeypatch):
    """One `models.config` holds every model's entry: a rewrite of one model's entry that
    reads the file while another model's is being written (two pushes, or a push beside a
    pin of another model) loses neither."""
    import threading

    serving_dir = _serving(tmp_path, [100])
    (tmp_path / "serving" / "other" / "7").mkdir(parents=True)
    serving_config.follow(serving_dir, MODEL)
    read = serving_config.read_config
    first_read, other_written = threading.Event(), threading.Event()

    def slow_read(folder):
        config = read(folder)
        if threading.current_thread().name == MODEL and not first_read.is_set():
            first_read.set()
            other_written.wait(2)  # the other model's write lands here, unless a lock holds it back
        return config

    monkeypatch.setattr(serving_config, "read_config", slow_read)
    writer = threading.Thread(target=serving_config.follow, args=(serving_dir, MODEL), name=MODEL)
    writer.start()
    first_read.wait(10)
    other = threading.Thread(target=lambda: (serving_config.follow(serving_dir, "other"), other_written.set()))
    other.start()
    writer.join(30)
    other.join(30)
    assert sorted(entry.name for entry in served_models(serving_dir)) == [MODEL, "other"]
    assert not [name for name in os.listdir(serving_dir) if ".tmp-" in name]


def test_the_config_s_temporary_name_is_unique_per_host_process_and_write(tmp_path, monkeypatch):
    import socket

    serving_dir = _serving(tmp_path, [100])
    renamed = []
    replace = files.replace
    monkeypatch.setattr(files, "replace", lambda src, dst: (renamed.append(os.path.basename(src)), replace(src, dst)))
    serving_config.follow(serving_dir, MODEL)
    serving_config.follow(serving_dir, MODEL)
    temporary = [name for name in renamed if name.startswith(serving_config.CONFIG_FILE)]
    assert len(temporary) == 2 and temporary[0] != temporary[1]
    assert all(f".tmp-{socket.gethostname()}-{os.getpid()}-" in name for name in temporary), temporary


def test_a_loaded_version_deleted_by_hand_is_not_what_serves_and_is_named(tmp_path):
    """TF Serving serves the highest loaded version it can load: one deleted by hand is
    not it, and what reads the folder says which is missing and what to do."""
    serving_dir = _serving(tmp_path, [100, 200])
    model_dir = os.path.join(serving_dir, MODEL)
    serving_config.follow(serving_dir, MODEL)
    assert serving_config.state(serving_dir, MODEL).missing_note(model_dir) == ""
    os.rmdir(os.path.join(model_dir, "200"))
    current = serving_config.state(serving_dir, MODEL)
    assert (current.loaded, current.missing, current.serving) == ([100, 200], [200], 100)
    assert serving_config.serving_version(model_dir) == 100
    note = current.missing_note(model_dir)
    assert f"loads version 200 of {model_dir}, which is not there" in note and "serving pin VERSION" in note
    assert current.require_serving(model_dir) == 100
    os.rmdir(os.path.join(model_dir, "100"))
    assert serving_config.state(serving_dir, MODEL).serving is None
    assert serving_config.serving_version(model_dir) is None
    # What `predict` and `monitor` of the serving version say.
    with pytest.raises(serving_config.ServingConfigError, match="loads version 100, 200 of .*not there"):
        serving_config.state(serving_dir, MODEL).require_serving(model_dir)


def test_a_pin_to_a_version_that_is_gone_stops_a_run_naming_the_ways_out(tmp_path):
    serving_dir = _serving(tmp_path, [100, 200])
    model_dir = os.path.join(serving_dir, MODEL)
    serving_config.pin(serving_dir, MODEL, 200)
    serving_config.refuse_a_lost_pin(model_dir)  # there: nothing to say
    os.rmdir(os.path.join(model_dir, "200"))
    with pytest.raises(serving_config.ServingConfigError, match=r"pinned to version 200, which is not there .*"
                       r"`taxi-pipeline serving unpin`"):
        serving_config.refuse_a_lost_pin(model_dir)
    # A rollback goes back from the version that is gone.
    assert serving_config.rollback_target(serving_config.state(serving_dir, MODEL)) == 100
    os.rmdir(os.path.join(model_dir, "100"))
    with pytest.raises(serving_config.ServingConfigError, match=r"remove .*\.pinned \(no other version"):
        serving_config.refuse_a_lost_pin(model_dir)
    serving_config.refuse_a_lost_pin(os.path.join(str(tmp_path), "never-pushed", MODEL))


def test_an_approval_cut_short_before_its_config_is_decided_and_not_run_again(tmp_path):
    """Only a push cut short is finished by a run (its Pusher executes again); an approval
    cut short is finished by approving again, and a run with its inputs trains nothing."""
    from components.support import registry

    serving_dir = _serving(tmp_path, [100, 200])
    model_dir = os.path.join(serving_dir, MODEL)
    record = registry.Record()
    record.add(registry.Candidate("a", [1], registry.Fate.SERVED, version=100))
    record.add(registry.Candidate("b", [2], registry.Fate.AWAITING_APPROVAL, version=200))
    registry.write(model_dir, record)
    serving_config.follow(serving_dir, MODEL)
    record.candidates[-1].fate = registry.Fate.APPROVED  # the approval's record, then cut before `follow`
    registry.write(model_dir, record)
    assert serving_config.state(serving_dir, MODEL).serving == 100
    assert serving_config.decide(model_dir, "b").candidate.version == 200


def test_a_run_with_the_inputs_of_the_version_an_unpin_would_serve_trains_nothing_while_a_rollback_holds(tmp_path):
    from components.support import registry

    serving_dir = _serving(tmp_path, [100, 200, 300])
    model_dir = os.path.join(serving_dir, MODEL)
    record = registry.Record()
    record.add(registry.Candidate("a", [1], registry.Fate.SERVED, version=100))
    record.add(registry.Candidate("b", [2], registry.Fate.SERVED, version=200))
    record.add(registry.Candidate("c", [3], registry.Fate.REJECTED, version=300))
    registry.write(model_dir, record)
    serving_config.follow(serving_dir, MODEL)
    assert serving_config.decide(model_dir, "b").candidate.version == 200  # it serves
    serving_config.pin(serving_dir, MODEL, 100)  # what `serving rollback` pins here
    # Rolled back from 200, which an unpin would serve again: its inputs train nothing.
    decision = serving_config.decide(model_dir, "b")
    assert decision.candidate.version == 200 and "serving unpin` serves version 200" in decision.says
    serving_config.follow(serving_dir, MODEL)  # `serving unpin`
    assert serving_config.state(serving_dir, MODEL).serving == 200
    assert serving_config.decide(model_dir, "b").candidate.version == 200  # it serves again


def test_a_pushed_version_gone_from_the_folder_is_named_for_its_inputs_only(tmp_path):
    from components.support import registry

    serving_dir = _serving(tmp_path, [100])
    model_dir = os.path.join(serving_dir, MODEL)
    record = registry.Record()
    record.add(registry.Candidate("a", [1], registry.Fate.SERVED, version=100))
    record.add(registry.Candidate("b", [2], registry.Fate.SERVED, version=200))  # moved aside by hand
    record.add(registry.Candidate("c", [3], registry.Fate.NOT_BLESSED))
    registry.write(model_dir, record)
    assert [serving_config.pushed_and_gone(model_dir, inputs) for inputs in ("a", "b", "c", "")] == [
        None, 200, None, None]
    (tmp_path / "serving" / MODEL / registry.RECORD_FILE).write_text("{not json")
    assert serving_config.pushed_and_gone(model_dir, "b") is None  # said where the record is needed
