"""The staged Pusher: atomic versions, no duplicate push, retention."""

import contextlib
import os

import pytest
import tensorflow as tf

from components.custom import pusher


def _model(tmp_path, name, fingerprint):
    path = tmp_path / "models" / name
    (path / "variables").mkdir(parents=True)
    (path / "saved_model.pb").write_bytes(b"graph " + name.encode())
    (path / "variables" / "variables.index").write_bytes(b"index")
    (path / "fingerprint.pb").write_bytes(fingerprint)
    return str(path)


def test_push_writes_a_complete_version_and_leaves_no_staging_folder(tmp_path):
    base = str(tmp_path / "serving")
    version = pusher.push(_model(tmp_path, "a", b"fa"), base, version=100)
    assert version == 100
    assert sorted(os.listdir(base)) == ["100"]
    assert sorted(os.listdir(os.path.join(base, "100"))) == ["fingerprint.pb", "saved_model.pb", "variables"]


def test_versions_only_grow_even_when_the_clock_does_not(tmp_path):
    base = str(tmp_path / "serving")
    pusher.push(_model(tmp_path, "a", b"fa"), base, version=200)
    assert pusher.push(_model(tmp_path, "b", b"fb"), base, version=150) == 201


def test_the_newest_version_holding_the_same_model_is_recognized(tmp_path):
    base = str(tmp_path / "serving")
    model = _model(tmp_path, "a", b"fa")
    pusher.push(model, base, version=100)
    assert pusher.already_pushed(model, base) == 100
    pusher.push(_model(tmp_path, "b", b"fb"), base, version=101)
    assert pusher.already_pushed(model, base) is None  # an older model is pushed anew, to serve again


def test_a_staging_folder_left_by_a_killed_push_is_invisible_and_then_cleaned(tmp_path):
    base = tmp_path / "serving"
    pusher.push(_model(tmp_path, "a", b"fa"), str(base), version=100)
    partial = base / f"{pusher.STAGING_PREFIX}101"
    partial.mkdir()
    (partial / "variables").mkdir()
    assert pusher.versions(str(base)) == [100]
    pusher.prune(str(base), keep_versions=3)
    assert sorted(os.listdir(base)) == ["100"]


def test_retention_keeps_the_newest_versions(tmp_path):
    base = str(tmp_path / "serving")
    for i, name in enumerate("abcde"):
        pusher.push(_model(tmp_path, name, name.encode()), base, version=100 + i)
    assert pusher.prune(base, keep_versions=2) == [100, 101, 102]
    assert pusher.versions(base) == [103, 104]
    with pytest.raises(ValueError, match="at least 1"):
        pusher.prune(base, keep_versions=0)
    assert pusher.prune(base, keep_versions=1) == [103]
    assert pusher.versions(base) == [104]


def test_versions_ignores_what_tf_serving_ignores(tmp_path):
    base = tmp_path / "serving"
    for name in ("12", "7", ".staging-13", "README.md", "tmp"):
        (base / name).mkdir(parents=True)
    assert pusher.versions(str(base)) == [7, 12]
    assert pusher.versions(str(tmp_path / "nowhere")) == []
    assert tf.io.gfile.exists(str(base / "README.md"))


PUSH_IN_A_PROCESS = """
import sys, time
from components.custom import pusher
model, base, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
time.sleep(max(0.0, start - time.time()))
with pusher.push_lock(base):
    print(pusher.push(model, base, version=1700000000))
"""


def test_two_pushes_in_the_same_second_from_two_processes_get_two_versions(tmp_path):
    """Two pipelines with their own output roots, one serving folder: the serving folder's
    lock makes the second push see the first's version."""
    import subprocess
    import sys
    import time

    base = str(tmp_path / "serving")
    start = str(time.time() + 3)  # both start pushing at the same moment
    processes = [
        subprocess.Popen([sys.executable, "-c", PUSH_IN_A_PROCESS, _model(tmp_path, name, name.encode()), base, start],
                         stdout=subprocess.PIPE, text=True)
        for name in ("a", "b")
    ]
    pushed = sorted(int(process.communicate(timeout=240)[0]) for process in processes)
    assert pushed == [1700000000, 1700000001]
    assert pusher.versions(base) == pushed


def test_prune_waits_for_a_push_in_progress_and_never_deletes_its_staging_folder(tmp_path):
    import threading

    base = tmp_path / "serving"
    pusher.push(_model(tmp_path, "a", b"fa"), str(base), version=100)
    staging = base / f"{pusher.STAGING_PREFIX}101"
    holding, pruned = threading.Event(), []

    def slow_push():
        with pusher.push_lock(str(base)):
            staging.mkdir()
            holding.set()
            (staging / "saved_model.pb").write_bytes(b"graph")
            threading.Event().wait(1.0)  # still copying
            staging.rename(base / "101")

    pushing = threading.Thread(target=slow_push)
    pushing.start()
    holding.wait(10)
    with pusher.push_lock(str(base)):  # a second pipeline's Pusher: waits for the first
        pruned = pusher.prune(str(base), keep_versions=3)
    pushing.join(10)
    assert pruned == [] and pusher.versions(str(base)) == [100, 101]
    assert (base / "101" / "saved_model.pb").read_bytes() == b"graph"


def test_what_the_push_adds_to_its_staged_copy_lands_with_the_version_or_not_at_all(tmp_path):
    base = str(tmp_path / "serving")

    def card(folder, version):
        os.makedirs(os.path.join(folder, "assets.extra"))
        with open(os.path.join(folder, "assets.extra", "model_card.json"), "w") as handle:
            handle.write(str(version))

    assert pusher.push(_model(tmp_path, "a", b"fa"), base, version=300, staged=card) == 300
    with open(os.path.join(base, "300", "assets.extra", "model_card.json")) as handle:
        assert handle.read() == "300"

    def broken(folder, version):
        raise OSError("no space left on device")

    with pytest.raises(OSError, match="no space"):
        pusher.push(_model(tmp_path, "b", b"fb"), base, version=400, staged=broken)
    assert sorted(os.listdir(base)) == ["300"]  # no version without its card, no staging folder left


def test_on_object_storage_a_version_is_copied_in_place_with_saved_model_pb_last(tmp_path, monkeypatch):
    """`ram://` stands for an object store here: no folder rename, so the copy goes to
    the version folder and `saved_model.pb` comes last, after what `staged` adds."""
    base = f"ram://{tmp_path.name}/serving"
    copied = []
    real_copy = tf.io.gfile.copy
    monkeypatch.setattr(tf.io.gfile, "copy", lambda src, dst, overwrite=False: (
        copied.append(dst[len(base) + 1:]), real_copy(src, dst, overwrite))[1])
    version = pusher.push(_model(tmp_path, "a", b"fa"), base, version=100,
                          staged=lambda folder, v: copied.append(f"staged {v}"))
    assert version == 100
    assert copied[-2:] == ["staged 100", "100/saved_model.pb"], copied
    assert sorted(copied[:-2]) == ["100/fingerprint.pb", "100/variables/variables.index"]
    assert pusher.versions(base) == [100]


def test_on_object_storage_a_version_without_saved_model_pb_is_not_one_and_is_removed(tmp_path):
    base = f"ram://{tmp_path.name}/serving"
    model = _model(tmp_path, "a", b"fa")
    pusher.push(model, base, version=100)
    # A push killed mid-copy: files of version 101, not its saved_model.pb.
    tf.io.gfile.makedirs(f"{base}/101/variables")
    with tf.io.gfile.GFile(f"{base}/101/variables/variables.index", "wb") as handle:
        handle.write(b"index")
    assert pusher.versions(base) == [100]
    assert pusher.already_pushed(model, base) == 100
    # The next push takes a version past the dead one's, then removes the dead one.
    assert pusher.push(_model(tmp_path, "b", b"fb"), base, version=50) == 102
    pusher.prune(base, keep_versions=5)
    assert sorted(name.rstrip("/") for name in tf.io.gfile.listdir(base)) == ["100", "102"]


@pytest.mark.parametrize("where", ["local", "object storage"])
def test_a_version_being_deleted_is_never_seen_in_part_and_what_a_cut_deletion_leaves_goes_next(
    tmp_path, monkeypatch, where
):
    """A deletion cut short after its first step (a kill, a failed request) leaves no
    version a reader would load: locally the folder was renamed out of sight, on object
    storage its `saved_model.pb` went first."""
    base = str(tmp_path / "serving") if where == "local" else f"ram://{tmp_path.name}/serving"
    for version, name in ((100, "a"), (101, "b")):
        pusher.push(_model(tmp_path, name, name.encode()), base, version=version)
    real_rmtree = tf.io.gfile.rmtree

    def cut(path):
        raise tf.errors.UnavailableError(None, None, f"cut short deleting {path}")

    monkeypatch.setattr(tf.io.gfile, "rmtree", cut)
    with pytest.raises(tf.errors.UnavailableError):
        pusher.prune(base, keep_versions=1)
    assert pusher.versions(base) == [101]
    monkeypatch.setattr(tf.io.gfile, "rmtree", real_rmtree)
    assert pusher.prune(base, keep_versions=1) == []
    assert sorted(name.rstrip("/") for name in tf.io.gfile.listdir(base)) == ["101"]


def test_a_push_that_lost_its_lock_does_not_make_its_version_whole(tmp_path):
    """On object storage the lock is a lease (components.support.object_lock): a pusher
    that held it too long and lost it stops before the file that makes its copy whole."""
    base = f"ram://{tmp_path.name}/serving"

    def lost():
        raise RuntimeError("the push lock is no longer this push's")

    with pytest.raises(RuntimeError, match="no longer"):
        pusher.push(_model(tmp_path, "a", b"fa"), base, version=100, confirm=lost)
    assert pusher.version_folders(base) == [100] and pusher.versions(base) == []


@pytest.mark.parametrize("checks_passed", [0, 1])
def test_a_publish_that_lost_its_lock_stops_before_its_next_deletion_or_config(tmp_path, monkeypatch, checks_passed):
    """The lock's check runs before each deletion of the prune and before `models.config`:
    lost after `checks_passed` checks, the publish stops there (the lost lock stands in for
    gs://'s here)."""
    base = tmp_path / "serving" / "big_tip"
    models = {name: _model(tmp_path, name, name.encode()) for name in "abc"}
    for version, name in ((100, "a"), (101, "b"), (102, "c")):
        pusher.push(models[name], str(base), version=version)
    pusher.serving_config.after_push(str(base.parent), "big_tip")
    config = (base.parent / "models.config").read_text()
    calls = []

    def confirm():
        calls.append(len(calls))
        if len(calls) > checks_passed:
            raise RuntimeError("lost")

    @contextlib.contextmanager
    def lock(base_directory):
        yield confirm

    monkeypatch.setattr(pusher, "push_lock", lock)
    with pytest.raises(RuntimeError, match="lost"):
        pusher.publish(models["c"], str(base), keep_versions=1)
    # Two checks stand before a change: the deletion of 100 (101 is loaded, so kept), then
    # models.config.
    assert calls == list(range(checks_passed + 1))
    assert pusher.versions(str(base)) == ([100, 101, 102] if checks_passed == 0 else [101, 102])
    assert (base.parent / "models.config").read_text() == config


def test_the_served_blessing_names_the_model_as_the_blessing_does_an_id_or_vertex_s_resource_name():
    from tfx.types import standard_artifacts

    model = standard_artifacts.Model()
    model.id = 7
    for value in (7, "projects/0/locations/l/metadataStores/default/artifacts/10"):
        blessing, served = standard_artifacts.ModelBlessing(), pusher.ServedModelBlessing()
        if isinstance(value, int):
            blessing.set_int_custom_property("current_model_id", value)
        else:  # what TFX's Vertex entry point leaves on the Evaluator's blessing
            blessing.set_string_custom_property("current_model_id", value)
        pusher._mark_served(served, blessing, model, serves=True, copied=True)
        assert served.get_custom_property("current_model_id") == value
        assert served.get_int_custom_property("blessed") == 1
    refused = pusher.ServedModelBlessing()
    pusher._mark_served(refused, blessing, model, serves=False, copied=False)
    assert refused.get_int_custom_property("blessed") == 0 and not refused.has_custom_property("current_model_id")
    # Awaiting approval: named, not blessed (`serving approve` blesses it).
    waiting = pusher.ServedModelBlessing()
    pusher._mark_served(waiting, blessing, model, serves=False, copied=True)
    assert waiting.get_int_custom_property("blessed") == 0 and waiting.has_custom_property("current_model_id")


def _candidate(fate="served"):
    from components.support import registry

    return registry.Candidate("inputs", [1, 2], registry.Fate(fate), run="run-1")


def test_a_version_is_recorded_before_it_is_whole_and_keeps_the_fate_a_person_gave_it(tmp_path, monkeypatch):
    from components.support import registry

    base = tmp_path / "serving" / "big_tip"
    model = _model(tmp_path, "a", b"fa")
    whole_when_recorded = []
    write = registry.write

    def recording(model_dir, record):
        whole_when_recorded.extend(os.path.exists(os.path.join(model_dir, str(c.version))) for c in record.candidates)
        write(model_dir, record)

    monkeypatch.setattr(registry, "write", recording)
    waiting = _candidate("awaiting approval")
    _, version, _, after = pusher.publish(model, str(base), keep_versions=3, candidate=waiting)
    assert whole_when_recorded == [False]  # staged, not yet renamed into place
    assert registry.read(str(base)).of_version(version).fate is registry.Fate.AWAITING_APPROVAL
    assert after.serving is None  # the only version awaits: nothing serves
    record = registry.read(str(base))
    record.of_version(version).fate = registry.Fate.REJECTED
    registry.write(str(base), record)
    again = _candidate("served")  # the same model pushed again, in auto mode
    _, same, _, after = pusher.publish(model, str(base), keep_versions=3, candidate=again)
    assert same == version and again.fate is registry.Fate.REJECTED and after.serving is None
    assert len(registry.read(str(base)).candidates) == 1


def test_a_push_cut_short_after_its_version_was_recorded_is_finished_by_the_next_run_not_repeated(
        tmp_path, monkeypatch):
    """Killed between the version's rename and `models.config` (what a lost machine or an
    OOM kill leaves): the record says the candidate served, the config does not serve it.
    A run with its inputs is not told "nothing to train": it pushes again, and that push
    serves the version. A version an operator rolled back from stays decided."""
    from components.support import serving_config

    class Killed(Exception):
        pass

    def killed(*_args):
        raise Killed

    base = str(tmp_path / "serving" / "big_tip")
    models = {"a": _model(tmp_path, "a", b"fa"), "b": _model(tmp_path, "b", b"fb")}
    pushed = {}
    for inputs in ("a", "b"):
        serving_before = serving_config.serving_version(base)
        with monkeypatch.context() as cut:
            cut.setattr(serving_config, "after_push", killed)
            with pytest.raises(Killed):
                pusher.publish(models[inputs], base, keep_versions=3, candidate=_candidate_of(inputs))
        assert serving_config.serving_version(base) == serving_before  # the first: no config at all
        assert serving_config.decide(base, inputs) is None
        _, pushed[inputs], _, after = pusher.publish(models[inputs], base, keep_versions=3,
                                                     candidate=_candidate_of(inputs))
        assert after.serving == pushed[inputs]
        assert serving_config.decide(base, inputs).says.endswith("serves, trained on these very inputs")
    serving_config.pin(*os.path.split(base), pushed["a"])  # a rollback
    assert serving_config.decide(base, "b").says == (
        f"version {pushed['b']} was trained on these very inputs and passed every check (served); version "
        f"{pushed['a']} serves now, as an operator set it (`taxi-pipeline serving unpin` serves version {pushed['b']})")


def _candidate_of(inputs):
    from components.support import registry

    return registry.Candidate(inputs, [1], registry.Fate.SERVED, run=f"run-{inputs}")


def test_a_candidate_judged_against_another_version_than_serves_at_its_push_awaits_approval(tmp_path):
    """Two runs on one serving folder: the second was evaluated against what served when
    it started, and another push changed that since. It is copied, not served, and says why."""
    from components.support import registry

    base = str(tmp_path / "serving" / "big_tip")
    models = {name: _model(tmp_path, name, f"f{name}".encode()) for name in "abc"}
    _, first, _, after = pusher.publish(models["a"], base, keep_versions=5, candidate=_candidate_of("a"),
                                        judged_against=registry.NOTHING_SERVES)
    assert after.serving == first
    late = _candidate_of("b")
    _, second, _, after = pusher.publish(models["b"], base, keep_versions=5, candidate=late,
                                         judged_against=registry.NOTHING_SERVES)
    assert after.serving == first and late.fate is registry.Fate.AWAITING_APPROVAL
    assert late.reason.startswith(f"judged against no version, but version {first} serves since the run started: "
                                  f"`taxi-pipeline serving approve {second}` serves it as it is")
    assert registry.read(base).of_version(second).fate is registry.Fate.AWAITING_APPROVAL
    again = _candidate_of("b")  # the same run's Pusher once more: the record's fate and reason stand
    pusher.publish(models["b"], base, keep_versions=5, candidate=again, judged_against=str(first))
    assert (again.fate, again.reason) == (registry.Fate.AWAITING_APPROVAL, late.reason)
    judged = _candidate_of("c")
    _, third, _, after = pusher.publish(models["c"], base, keep_versions=5, candidate=judged,
                                        judged_against=str(first))
    assert after.serving == third and judged.fate is registry.Fate.SERVED and judged.reason == ""


def test_a_refused_candidate_takes_the_reason_of_the_check_that_refused_it():
    from tfx.types import standard_artifacts

    from components.custom import recorded, serving_check
    from components.support import registry

    blessing = standard_artifacts.ModelBlessing()
    blessing.set_string_custom_property(serving_check.REASON_PROPERTY, "p99 0.3 ms within its budget")
    blessing.set_string_custom_property(recorded.SHADOW_CHECK_PROPERTY, "flip rate 0.035 over its threshold 0.0001")
    blessing.set_string_custom_property(serving_check.FATE_PROPERTY, registry.Fate.SHADOW_REFUSED.value)
    assert pusher.refusal(blessing) == (registry.Fate.SHADOW_REFUSED, "flip rate 0.035 over its threshold 0.0001")
    blessing.set_string_custom_property(serving_check.FATE_PROPERTY, registry.Fate.SERVING_CHECK_FAILED.value)
    assert pusher.refusal(blessing) == (registry.Fate.SERVING_CHECK_FAILED, "p99 0.3 ms within its budget")
    assert pusher.refusal(standard_artifacts.ModelBlessing()) == (registry.Fate.NOT_BLESSED, "")
