"""A moved or copied output root: its records made to point where it sits now, on small
stores and folders made here (the whole run moved: tests/test_end_to_end.py)."""

import json
import shutil

import pytest
from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2 as mlmd

from components.custom import pusher
from components.support import serving_config
from pipeline import config
from pipeline.inspect import run_report
from pipeline.run import relocation


def _config(root, serving=None, mysql=None):
    return config.RunConfig(data_root=str(root / "data"), output_root=str(root / "out"),
                            serving_dir=str(serving or root / "serving"), metadata_mysql=mysql).resolved()


def _store(run_config):
    return metadata_store.MetadataStore(run_report.connection_config(run_config.metadata))


def _made(root):
    """An output root that ran once at `root`: a model under its pipeline root, a pushed
    version in its serving folder, its run record and `models.config`."""
    made = _config(root)
    (root / "out").mkdir(parents=True)
    store = _store(made)
    model_type = store.put_artifact_type(mlmd.ArtifactType(name="Model"))
    pushed_type = store.put_artifact_type(mlmd.ArtifactType(name="PushedModel"))
    version_dir = f"{made.model_serving_dir}/1700000000"
    pushed = mlmd.Artifact(type_id=pushed_type, uri=f"{made.pipeline_root}/Pusher/pushed_model/9")
    pushed.custom_properties[pusher.DESTINATION_PROPERTY].string_value = version_dir
    pushed.custom_properties["name"].string_value = "not a path"
    store.put_artifacts([mlmd.Artifact(type_id=model_type, uri=f"{made.pipeline_root}/Trainer/model/7"), pushed,
                         mlmd.Artifact(type_id=model_type, uri="gs://elsewhere/model")])
    (root / "serving" / "big_tip" / "1700000000").mkdir(parents=True)
    (root / "serving" / "big_tip" / "1700000000" / "saved_model.pb").write_bytes(b"graph")
    serving_config.follow(made.serving_dir, "big_tip")
    report = {"outcome": "pushed", "pushed_version_dir": version_dir, "page": f"{made.output_root}/reports/r.html"}
    (root / "out" / config.LAST_RUN_FILE).write_text(json.dumps({"report": report, "window_report": None}))
    return made


def _paths(run_config):
    found = []
    for artifact in _store(run_config).get_artifacts():
        found.append(artifact.uri)
        found.extend(value.string_value for value in artifact.custom_properties.values())
    return sorted(found)


def test_a_root_copied_with_its_serving_folder_points_at_the_copy_and_says_so_once(tmp_path):
    original = _made(tmp_path / "a")
    # A root of before `location.json`: where it was is read from its run record.
    assert relocation.recorded(original.output_root) == relocation.Location(original.output_root,
                                                                            original.serving_dir)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    copy = _config(tmp_path / "b")

    said = relocation.relocate(copy)

    assert said == [
        f"models.config named {original.model_serving_dir} for big_tip, a folder this serving folder was copied or "
        f"moved from: it now names {copy.model_serving_dir}",
        f"Moved or copied output root: 2 artifact location(s) in its metadata store and its run record now point "
        f"here ({original.output_root} -> {copy.output_root}; {original.serving_dir} -> {copy.serving_dir})",
    ]
    assert _paths(copy) == sorted([
        f"{copy.pipeline_root}/Trainer/model/7", f"{copy.pipeline_root}/Pusher/pushed_model/9",
        f"{copy.model_serving_dir}/1700000000", "gs://elsewhere/model", "not a path"])
    assert _paths(original)[0].startswith(original.output_root)  # the original's store is not touched
    record = json.loads((tmp_path / "b" / "out" / config.LAST_RUN_FILE).read_text())["report"]
    assert record["pushed_version_dir"] == f"{copy.model_serving_dir}/1700000000"
    assert record["page"] == f"{copy.output_root}/reports/r.html"
    (entry,) = serving_config.read_config(copy.serving_dir).model_config_list.config
    assert entry.base_path == copy.model_serving_dir
    assert list(entry.model_version_policy.specific.versions) == [1700000000]
    assert relocation.recorded(copy.output_root) == relocation.Location(copy.output_root, copy.serving_dir)
    assert relocation.relocate(copy) == []


def test_a_root_moved_without_its_serving_folder_keeps_naming_the_versions_where_they_are(tmp_path):
    original = _made(tmp_path / "a")
    relocation.relocate(original)  # writes where it is
    shutil.move(tmp_path / "a" / "out", tmp_path / "out-moved")
    moved = config.RunConfig(data_root=original.data_root, output_root=str(tmp_path / "out-moved"),
                             serving_dir=str(tmp_path / "new-serving")).resolved()

    (line,) = relocation.relocate(moved)

    assert line.endswith(f"({original.output_root} -> {moved.output_root})")
    assert f"{original.model_serving_dir}/1700000000" in _paths(moved)
    assert f"{moved.pipeline_root}/Trainer/model/7" in _paths(moved)


def test_a_root_that_did_not_move_is_not_rewritten(tmp_path):
    made = _made(tmp_path / "a")
    assert relocation.relocate(made) == []
    before = _paths(made)
    assert relocation.relocate(made) == [] and _paths(made) == before


def test_a_moved_root_whose_runs_are_in_a_shared_mysql_store_is_refused_naming_both_places(tmp_path):
    _made(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    mysql = config.MySqlAddress("127.0.0.1", 3306, "mlmd")
    with pytest.raises(relocation.MovedSharedStoreError, match=r"moved or copied from .*/a/out, and its runs' "
                                                               r"artifacts in the shared metadata store mysql://"):
        relocation.relocate(_config(tmp_path / "b", mysql=mysql))


def test_a_folder_reached_by_another_name_or_with_characters_outside_ascii_is_not_a_move(tmp_path):
    """A symlink (cron `cd`s through it, a person types it) is the same folder; a path that
    text format escapes (`zoë` as `zo\\303\\253`) is compared as the path it is."""
    made = _made(tmp_path / "zoë")
    assert relocation.relocate(made) == []
    before = _paths(made)
    (tmp_path / "link").symlink_to(tmp_path / "zoë")
    linked = config.RunConfig(data_root=str(tmp_path / "link" / "data"), output_root=str(tmp_path / "link" / "out"),
                              serving_dir=made.serving_dir)
    assert relocation.relocate(linked) == [] and relocation.relocate(made) == []
    assert _paths(made) == before


def test_gc_s_serving_folder_is_not_remembered_as_the_one_runs_push_to(tmp_path):
    made = _made(tmp_path / "a")
    relocation.relocate(made)
    elsewhere = config.RunConfig(output_root=made.output_root, serving_dir=str(tmp_path / "gc-default")).resolved()
    assert relocation.relocate(elsewhere, pushes=False) == []
    assert relocation.recorded(made.output_root) == relocation.Location(made.output_root, made.serving_dir)
