"""`serving approve` and `serving reject`, on a serving folder of empty version folders."""

import os

import pytest

from components.support import registry, serving_config
from components.support.registry import Candidate, Fate
from pipeline.ops import serving
from pipeline.options import UsageError
from pipeline.outcome import ExitCode

MODEL = "big_tip"


def _folder(tmp_path):
    serving_dir = tmp_path / "serving"
    for version in (100, 200, 300):
        (serving_dir / MODEL / str(version)).mkdir(parents=True)
    record = registry.Record()
    for candidate in (Candidate("a", [1], Fate.SERVED, version=100), Candidate("b", [2], Fate.SERVED, version=200),
                      Candidate("c", [3], Fate.AWAITING_APPROVAL, version=300)):
        record.add(candidate)
    registry.write(str(serving_dir / MODEL), record)
    serving_config.follow(str(serving_dir), MODEL)
    return str(serving_dir)


def test_a_rejected_version_never_serves_and_cannot_be_approved_after(tmp_path):
    serving_dir = _folder(tmp_path)
    with pytest.raises(UsageError, match="serving reject needs --note saying why"):
        serving.decide(serving_dir, MODEL, 300, serving.Verdict(approve=False))
    said = serving.decide(serving_dir, MODEL, 300, serving.Verdict(False, note="slice drift", by="ana"))
    assert said.startswith("reject: version 300 rejected by ana; serving version 200")
    (line,) = [line for line in said.splitlines() if line.startswith("300  pushed ")]
    assert "rejected by ana at " in line and line.endswith(": slice drift")
    assert serving_config.state(serving_dir, MODEL).loaded == [100, 200]
    with pytest.raises(ValueError, match="version 300 is rejected; no version awaits approval"):
        serving.decide(serving_dir, MODEL, 300, serving.Verdict(approve=True))
    serving_config.follow(serving_dir, MODEL)  # unpin: still not it
    assert serving_config.state(serving_dir, MODEL).serving == 200
    # A model name nothing was pushed under: said so, and no folder is made for it.
    with pytest.raises(ValueError, match="no serving folder .*/big_tipp: nothing was pushed there yet"):
        serving.decide(serving_dir, "big_tipp", 300, serving.Verdict(approve=True))
    assert not os.path.exists(os.path.join(serving_dir, "big_tipp"))


def test_a_decision_or_pin_that_lacks_what_it_needs_is_a_usage_error_and_changes_nothing(tmp_path, taxi_pipeline):
    serving_dir = _folder(tmp_path)
    before = serving_config.state(serving_dir, MODEL)
    for command, said in ((("reject", "300"), "serving reject needs --note saying why"),
                          # Said before any path it names is checked.
                          (("reject", "300", "--output-root", str(tmp_path / "missing")),
                           "serving reject needs --note saying why"),
                          (("approve",), "serving approve needs the VERSION awaiting approval"),
                          (("pin",), "serving pin needs the VERSION to serve"),
                          (("unpin", "200"), "serving unpin takes no VERSION")):
        result = taxi_pipeline("serving", *command, "--serving-dir", serving_dir)
        assert result.returncode == ExitCode.USAGE, result.stderr
        assert result.stderr.strip().splitlines()[-1] == f"taxi-pipeline serving: error: {said}"
    assert serving_config.state(serving_dir, MODEL) == before
    assert registry.read(str(tmp_path / "serving" / MODEL)).of_version(300).fate is Fate.AWAITING_APPROVAL


def test_approving_serves_it_and_an_unknown_version_names_what_awaits(tmp_path):
    serving_dir = _folder(tmp_path)
    with pytest.raises(ValueError, match="version 7 is not a candidate this record knows; awaiting approval: "
                                         "version 300"):
        serving.decide(serving_dir, MODEL, 7, serving.Verdict(approve=True))
    serving.decide(serving_dir, MODEL, 300, serving.Verdict(True, by="ana"))
    assert serving_config.state(serving_dir, MODEL).loaded == [200, 300]
    first = registry.read(f"{serving_dir}/{MODEL}").of_version(300)
    # Again (an approval cut short before it served is finished so): nothing changes, and
    # the record keeps who approved it, when and why.
    said = serving.decide(serving_dir, MODEL, 300, serving.Verdict(True, note="looks fine", by="bo"))
    assert said.startswith(f"approve: version 300 approved by ana already, at {first.at} (the record keeps the "
                           "first decision); serving version 300")
    again = registry.read(f"{serving_dir}/{MODEL}")
    assert again.serving == 300 and again.of_version(300).to_json() == first.to_json()


def test_a_decision_given_the_store_is_recorded_on_the_versions_push(tmp_path):
    from ml_metadata.proto import metadata_store_pb2 as mlmd

    from components.custom import pusher
    from pipeline import config
    from pipeline.inspect import lineage, run_report

    serving_dir = _folder(tmp_path)
    metadata = config.MetadataConfig(str(tmp_path / "metadata.sqlite"))
    store = run_report.connect(metadata, writable=True)
    kind = store.put_artifact_type(mlmd.ArtifactType(name=lineage.PUSHED_MODEL_TYPE))
    for version in (200, 300):  # pushed from a serving folder since moved: found by model name and version
        artifact = mlmd.Artifact(type_id=kind, uri=str(tmp_path / f"push-{version}"))
        artifact.custom_properties[pusher.VERSION_PROPERTY].string_value = str(version)
        artifact.custom_properties[pusher.DESTINATION_PROPERTY].string_value = f"/elsewhere/{MODEL}/{version}"
        store.put_artifacts([artifact])
    said = serving.decide(serving_dir, MODEL, 300, serving.Verdict(True, note="reviewed", by="ana"), metadata)
    assert f"recorded on its push in {metadata} (PushedModel artifact " in said
    decided = {run_report.string_property(a, pusher.VERSION_PROPERTY): a for a in store.get_artifacts()}
    assert [run_report.string_property(decided["300"], key) for key in serving.DECISION_PROPERTIES] == [
        "approved", "ana", registry.read(f"{serving_dir}/{MODEL}").of_version(300).at, "reviewed"]
    assert not run_report.string_property(decided["200"], "decision")


def test_list_rollback_pin_and_unpin_of_a_local_folder_import_no_tensorflow(tmp_path):
    """The operator's everyday answers cost no TensorFlow import (seconds) on a local folder."""
    import subprocess
    import sys

    serving_dir = _folder(tmp_path)
    program = f"""
import sys
from pipeline.ops import serving
from pipeline.options import UsageError
from pipeline.outcome import ExitCode
said = [serving.command({serving_dir!r}, {MODEL!r}, action, version)
        for action, version in (("list", None), ("rollback", None), ("unpin", None), ("pin", 100))]
print(said[-1].splitlines()[0])
print(sorted(name for name in ("tensorflow", "tfx", "apache_beam") if name in sys.modules))
"""
    ran = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    said, imported = ran.stdout.splitlines()
    assert said.startswith("pin: serving version 100 (was version 200)")
    assert imported == "[]"
    assert serving_config.state(serving_dir, MODEL).pinned == 100


def test_list_names_a_loaded_version_that_is_gone_and_marks_what_serves_instead(tmp_path):
    serving_dir = _folder(tmp_path)  # following: loads 100 and 200
    (tmp_path / "serving" / MODEL / "200").rmdir()
    said = serving.command(serving_dir, MODEL, "list", None).splitlines()
    assert said[1].startswith("300 ") and said[2].startswith("100 ") and said[2].endswith("SERVING")
    assert said[-1].startswith(f"models.config loads version 200 of {serving_dir}/{MODEL}, which is not there")


def test_a_decision_that_took_effect_says_so_when_the_metadata_store_fails_after_it(tmp_path):
    from pipeline import config

    serving_dir = _folder(tmp_path)
    unreachable = config.MetadataConfig(str(tmp_path / "no-such-folder" / "metadata.sqlite"))
    said = serving.decide(serving_dir, MODEL, 300, serving.Verdict(True, note="reviewed", by="ana"), unreachable)
    assert said.startswith("approve: version 300 approved by ana; serving version 300\nnote: not recorded in ")
    assert "the record and the model card hold the decision: the same command again records it there" in said
    assert registry.read(f"{serving_dir}/{MODEL}").of_version(300).fate is Fate.APPROVED
    assert serving_config.state(serving_dir, MODEL).serving == 300
    # A damaged store: its error is said, not the SQL it was running.
    damaged = tmp_path / "damaged.sqlite"
    damaged.write_bytes(b"\x00garbage" * 4096)
    said = serving.decide(serving_dir, MODEL, 300, serving.Verdict(True, note="again", by="ana"),
                          config.MetadataConfig(str(damaged)))
    assert "note: not recorded in " in said and "file is not a database" in said and "CREATE" not in said, said


def test_a_card_of_a_folder_without_a_version_that_serves_says_what_to_give(tmp_path):
    model_dir = tmp_path / "big_tip"
    with pytest.raises(ValueError, match="no serving folder .*: nothing was pushed there yet"):
        serving.card(str(model_dir), None)
    model_dir.mkdir()
    with pytest.raises(ValueError, match="no version in .*big_tip: nothing was pushed there yet"):
        serving.card(str(model_dir), None)
