"""The Pusher on `gs://`, in the image, against the Cloud Storage emulator: a version is
whole or absent for every reader at every moment, a push killed midway leaves nothing a
reader loads and the next push works, and two pushes at once each get a whole version.

The pushes run `pusher.publish` (what the Pusher's executor runs under its lock) in
containers of the image, on small SavedModels made there; a reader runs beside them.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.image.vertex import MODEL

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

SERVING = "push-serving"
# Asset files in each model: enough objects that a copy takes seconds, to be caught midway.
ASSETS = 150

MAKE_MODELS = """
import os, sys
import tensorflow as tf
root, count, assets = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for index in range(count):
    module = tf.Module()
    module.weight = tf.Variable(float(index + 1))
    module.score = tf.function(lambda x: x * module.weight, input_signature=[tf.TensorSpec([None], tf.float32)])
    path = f"{root}/model-{index}"
    tf.saved_model.save(module, path, signatures={"serving_default": module.score})
    os.makedirs(f"{path}/assets", exist_ok=True)
    for asset in range(assets):
        with open(f"{path}/assets/part-{asset:04d}.txt", "w") as handle:
            handle.write(f"{index} {asset}\\n" * 50)
print("made", count)
"""

PUSH = """
import sys
from components.custom import pusher
from components.support import object_lock
if len(sys.argv) > 3:  # the lease of a holder that will be killed: how long is not what is tested
    object_lock.LEASE_SECONDS = float(sys.argv[3])
before, version, removed, after = pusher.publish(sys.argv[1], sys.argv[2], keep_versions=10)
print("pushed", version)
"""
# The lease of the push that is killed midway: the next push waits it out.
KILLED_LEASE_SECONDS = 10

# Loads every version a reader may load, as soon as it may: those `models.config` names
# (what TF Serving loads) and those `versions()` lists, until one whole round after the
# stop file appeared. A config that does not parse (`serving_config.read_config` has read
# it again already) is counted and that poll goes on with the listing, as TF Serving's
# config poll logs the error and keeps its config; only a named or listed version that
# does not load fails the test.
READER = """
import json, os, sys, time
import tensorflow as tf
from components.support import serving_config
serving_dir, model, stop, out = sys.argv[1:5]
model_dir = f"{serving_dir}/{model}"
loaded, failed, unread, rounds = set(), [], [], 0
print("reading", flush=True)
try:
    while True:
        stopping = os.path.exists(stop)
        rounds += 1
        named = []
        try:
            config = serving_config.read_config(serving_dir)
        except serving_config.ServingConfigError as err:
            unread.append(str(err)[:300])
            config = None
        if config is not None:
            for entry in config.model_config_list.config:
                named += list(entry.model_version_policy.specific.versions)
        for version in sorted((set(named) | set(serving_config.versions(model_dir))) - loaded):
            try:
                scored = tf.saved_model.load(f"{model_dir}/{version}").signatures["serving_default"](
                    tf.constant([1.0]))
                assert len(tf.io.gfile.listdir(f"{model_dir}/{version}/assets")) > 0
                loaded.add(version)
            except Exception as err:
                failed.append(f"{version}: {type(err).__name__}: {str(err)[:200]}")
        if stopping:
            break
        time.sleep(0.05)
finally:
    with open(out, "w") as handle:
        json.dump({"loaded": sorted(loaded), "failed": failed, "unread": unread, "rounds": rounds}, handle)
"""


@pytest.fixture(scope="module")
def models(bucket) -> str:
    bucket.run(["python", "-c", MAKE_MODELS, bucket.local("models"), "4", str(ASSETS)], bucket.root / "models.log")
    return bucket.local("models")


def _push(bucket, model: str, log: str, *lease_seconds: str):
    return bucket.image.start(["python", "-c", PUSH, model, bucket.inside(SERVING, MODEL), *lease_seconds],
                              str(bucket.root / log))


def _pushed(bucket, log: str) -> int:
    lines = [line for line in (bucket.root / log).read_text(errors="replace").splitlines() if line.startswith("pushed")]
    assert lines, (bucket.root / log).read_text(errors="replace")[-3000:]
    return int(lines[-1].split()[1])


def test_readers_never_load_a_partial_version_and_two_pushes_at_once_get_one_whole_version_each(bucket, models):
    stop = bucket.root / "reader.stop"
    reader = bucket.image.start(["python", "-c", READER, bucket.inside(SERVING), MODEL, bucket.local("reader.stop"),
                                 bucket.local("reader.json")], str(bucket.root / "reader.log"))
    try:
        deadline = time.monotonic() + 300
        while "reading" not in (bucket.root / "reader.log").read_text(errors="replace"):
            assert reader.process.poll() is None and time.monotonic() < deadline, \
                (bucket.root / "reader.log").read_text(errors="replace")[-3000:]
            time.sleep(0.5)
        assert _push(bucket, f"{models}/model-0", "push-0.log").wait() == 0
        # Two at once: the lock object serializes them.
        both = [_push(bucket, f"{models}/model-{index}", f"push-{index}.log") for index in (1, 2)]
        assert [push.wait() for push in both] == [0, 0], [
            (bucket.root / f"push-{index}.log").read_text(errors="replace")[-2000:] for index in (1, 2)]
    finally:
        stop.touch()
        stopped = reader.wait(300)
    assert stopped == 0, (bucket.root / "reader.log").read_text(errors="replace")[-3000:]
    pushed = [_pushed(bucket, f"push-{index}.log") for index in range(3)]
    assert len(set(pushed)) == 3, pushed
    seen = json.loads((bucket.root / "reader.json").read_text())
    assert seen["failed"] == [], seen
    # A config read short after every re-read is rare: most polls read it whole.
    assert all("is not a TF Serving model config" in error for error in seen["unread"]), seen
    assert len(seen["unread"]) < seen["rounds"] / 2, seen
    assert set(pushed) <= set(seen["loaded"]), seen
    # Every pushed version is whole in the bucket: its saved_model.pb and every asset.
    for version in pushed:
        names = bucket.objects(f"{SERVING}/{MODEL}/{version}")
        assert f"{SERVING}/{MODEL}/{version}/saved_model.pb" in names
        assert sum("/assets/" in name for name in names) == ASSETS
    assert not [name for name in bucket.objects(SERVING) if name.endswith(".push.lock")]


def test_a_push_killed_midway_leaves_nothing_a_reader_loads_and_the_next_push_works(bucket, models):
    before = bucket.versions(SERVING)
    requests = len(bucket.emulator.requests())
    push = _push(bucket, f"{models}/model-3", "push-killed.log", str(KILLED_LEASE_SECONDS))
    deadline = time.monotonic() + 300
    try:
        while True:  # kill it once it has copied part of the model's assets
            copied = [r.written for r in bucket.emulator.requests()[requests:]
                      if r.written and f"{SERVING}/{MODEL}/" in r.written and "/assets/" in r.written]
            if len(copied) >= ASSETS // 3:
                break
            assert push.process.poll() is None and time.monotonic() < deadline, \
                (bucket.root / "push-killed.log").read_text(errors="replace")[-3000:]
            time.sleep(0.05)
    finally:
        push.kill()
    partial = copied[0].split("/")[2]
    assert partial not in before
    assert any(name.startswith(f"{SERVING}/{MODEL}/{partial}/") for name in bucket.objects(SERVING))
    # Not a version to any reader: versions() skips it, models.config does not name it.
    assert int(partial) not in _readable(bucket)
    # (No config at all when this test runs first.)
    assert f"versions: {partial}" not in (bucket.read(bucket.inside(SERVING, "models.config")) or b"").decode()
    # The next push breaks the dead holder's lease, pushes a whole version, removes the partial one.
    assert _push(bucket, f"{models}/model-3", "push-after.log").wait() == 0
    version = _pushed(bucket, "push-after.log")
    assert version > int(partial)
    readable = _readable(bucket)
    assert version in readable and int(partial) not in readable
    assert not any(name.startswith(f"{SERVING}/{MODEL}/{partial}/") for name in bucket.objects(SERVING))


def _readable(bucket) -> list:
    output = bucket.run(["python", "-c", "import json, sys\nfrom components.support import serving_config\n"
                         "print(json.dumps(serving_config.versions(sys.argv[1])))", bucket.inside(SERVING, MODEL)],
                        bucket.root / "readable.log")
    return json.loads(output.strip().splitlines()[-1])


def test_the_emulator_refuses_a_delete_whose_generation_does_not_match_as_cloud_storage_does(bucket):
    """The push lock breaks a dead holder's lock and releases its own by a delete on the
    condition `ifGenerationMatch`; fake-gcs-server deletes whatever the condition, so the
    front in tests/image/gcs.py checks it, as Cloud Storage does (412)."""
    import http.client
    import ssl
    import urllib.parse

    emulator = bucket.emulator
    emulator.create_bucket("preconditions")
    emulator.upload("preconditions", "lock", b"held")
    generation = json.loads(emulator.api("GET", "/storage/v1/b/preconditions/o/lock").read())["generation"]
    context = ssl.create_default_context(cafile=str(emulator.certificates["ca"]))

    def delete(if_generation: str) -> int:
        connection = http.client.HTTPSConnection(emulator.address, 443, context=context, timeout=30)
        query = urllib.parse.urlencode({"ifGenerationMatch": if_generation})
        connection.request("DELETE", f"/storage/v1/b/preconditions/o/lock?{query}",
                           headers={"Host": "storage.googleapis.com"})
        status = connection.getresponse().status
        connection.close()
        return status

    assert delete(str(int(generation) + 1)) == 412
    assert emulator.read("preconditions", "lock") == b"held"  # still there
    assert delete(str(generation)) in (200, 204)
    assert emulator.read("preconditions", "lock") is None
