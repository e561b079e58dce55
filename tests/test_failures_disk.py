"""The failure catalogue (docs/operations.md, "When a command fails"), its rows about
disks and data: a full serving folder or output root, read-only folders, a full temporary
folder, a data root gone mid-run, truncated files. Each through the command line in a
subprocess: the exit status, the last line, and nothing already good changed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from components.support import serving_config
from tests.helpers import assert_one_clear_line, full_log, run_until, tmpfs

pytestmark = pytest.mark.slow


def test_a_full_serving_folder_keeps_every_served_version_whole_and_no_run_needs_the_temporary_folder(
    copy_of_finished_run, taxi_pipeline, tmp_path
):
    """The run trains and fails only at the copy into the full serving folder: every
    temporary file of a run and of `predict` lives under the output root or beside the
    output folder, not in TMPDIR, which is full all along."""
    ws = copy_of_finished_run
    used_kb = sum(p.stat().st_size for p in ws.serving.rglob("*") if p.is_file()) // 1024
    with tmpfs(tmp_path / "small-disk", used_kb + 256, fill_from=ws.serving) as serving, \
            tmpfs(tmp_path / "tmp", 64) as tmp:
        (tmp / "filler").write_bytes(b"\0" * (64 * 1024 - 4096))
        env = {"TMPDIR": str(tmp)}
        scored = taxi_pipeline("predict", "--input", str(ws.data / "span-16" / "*"), "--output",
                               str(tmp_path / "scores"), "--serving-dir", str(serving), env=env)
        assert scored.returncode == 0, scored.stderr
        locations = ["--data-root", str(ws.data), "--output-root", str(ws.out), "--serving-dir", str(serving)]
        # The serving folder was copied here: its models.config is made to name this
        # folder (as the run's first step would, pipeline.run.relocation) before the snapshot.
        serving_config.rebase(str(serving), "big_tip")
        served = {str(p.relative_to(serving)): p.read_bytes() for p in serving.rglob("*") if p.is_file()}
        # Nothing changed but --force: the run trains and blesses again; the copy cannot fit.
        result = taxi_pipeline("run", *locations, "--force", env=env)
        line = assert_one_clear_line(result, 1, f"no space left on the device writing {serving}/big_tip/.staging-")
        assert "free space under the output root, the serving folder and the temporary folder" in line
        assert {str(p.relative_to(serving)): p.read_bytes() for p in serving.rglob("*") if p.is_file()} == served
        assert not list((serving / "big_tip").glob(".staging-*"))  # the partial copy is gone


def test_a_read_only_output_root_or_serving_folder_is_named(copy_of_finished_run, taxi_pipeline, tmp_path):
    ws = copy_of_finished_run
    with tmpfs(tmp_path / "read-only", 64 * 1024, read_only=True, fill_from=ws.out) as out:
        before = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}
        result = taxi_pipeline("run", "--data-root", str(ws.data), "--output-root", str(out),
                               "--serving-dir", str(ws.serving), env={"XDG_STATE_HOME": str(tmp_path / "state")})
        # Checked before the work, as the serving folder is (tests/pipeline/test_options.py).
        assert_one_clear_line(result, 1, f"--output-root {out} is on a read-only file system: mount it writable or "
                                         "point --output-root at another folder, then run again")
        assert {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    with tmpfs(tmp_path / "read-only-serving", 64 * 1024, read_only=True, fill_from=ws.serving) as serving:
        before = {str(p.relative_to(serving)): p.read_bytes() for p in serving.rglob("*") if p.is_file()}
        pinned = taxi_pipeline("serving", "pin", ws.versions()[0], "--serving-dir", str(serving))
        assert_one_clear_line(pinned, 1, f"{serving}/big_tip/.push.lock is on a read-only file system")
        assert {str(p.relative_to(serving)): p.read_bytes() for p in serving.rglob("*") if p.is_file()} == before


def test_a_full_output_root_is_named_and_nothing_is_pushed(copy_of_finished_run, taxi_pipeline, tmp_path):
    ws = copy_of_finished_run
    shutil.copytree(ws.data / "span-16", ws.data / "span-17")  # new data: the run trains
    served = ws.good_state()
    used_kb = sum(p.stat().st_size for p in ws.out.rglob("*") if p.is_file()) // 1024
    with tmpfs(tmp_path / "small-disk", used_kb + 1024, fill_from=ws.out) as out:
        result = taxi_pipeline("run", "--data-root", str(ws.data), "--output-root", str(out),
                               "--serving-dir", str(ws.serving))
        line = assert_one_clear_line(result, 1, f"no space left on the device writing {out}/pipeline_root/")
        assert "free space under the output root" in line and "Traceback" in full_log(result)
    assert {k: v for k, v in ws.good_state().items() if k.startswith("serving")} == {
        k: v for k, v in served.items() if k.startswith("serving")}


def test_a_data_root_that_disappears_mid_run_is_named(copy_of_finished_run, cli_argv, tmp_path):
    ws = copy_of_finished_run
    shutil.copytree(ws.data / "span-16", ws.data / "span-17")  # new data: the run ingests it
    before = ws.good_state()
    # Once ImportExampleGen ingested: later steps read the data root again.
    result = run_until(cli_argv("run", *ws.locations()), "ImportExampleGen", lambda: shutil.rmtree(ws.data))
    assert_one_clear_line(result, 1, f"data root {ws.data} does not exist or is not a folder (moved, deleted")
    assert "Traceback" in full_log(result)
    after = ws.good_state()
    assert {k: v for k, v in after.items() if "metadata" not in k and "last_run" not in k} == {
        k: v for k, v in before.items() if "metadata" not in k and "last_run" not in k}
    assert after[str((ws.out / "last_run.json").relative_to(ws.root))] == before[
        str((ws.out / "last_run.json").relative_to(ws.root))]


def _truncated_copy(source_dir: Path, target: Path) -> None:
    (source,) = list(source_dir.iterdir())
    target.write_bytes(source.read_bytes()[:3000])  # cut between records: readers stop there silently


def test_predict_names_the_truncated_input_and_writes_nothing(copy_of_finished_run, taxi_pipeline, tmp_path):
    ws = copy_of_finished_run
    inputs = tmp_path / "in"
    inputs.mkdir()
    shutil.copy(next((ws.data / "span-15").iterdir()), inputs / "a.tfrecord.gz")
    _truncated_copy(ws.data / "span-16", inputs / "b.tfrecord.gz")
    before = ws.good_state()
    result = taxi_pipeline("predict", "--input", str(inputs / "*"), "--output", str(tmp_path / "scores"),
                           "--serving-dir", str(ws.serving))
    assert_one_clear_line(result, 1, f"input file {inputs / 'b.tfrecord.gz'} is truncated: its GZIP stream ends "
                                     "before its end marker (after 50 whole records): copy it again")
    assert not (tmp_path / "scores").exists() and not list(tmp_path.glob("scores*"))
    assert ws.good_state() == before


def test_a_truncated_span_file_is_rejected_naming_it(copy_of_finished_run, taxi_pipeline):
    ws = copy_of_finished_run
    (ws.data / "span-17").mkdir()
    _truncated_copy(ws.data / "span-16", ws.data / "span-17" / "trips.tfrecord.gz")
    served = {k: v for k, v in ws.good_state().items() if k.startswith("serving")}
    result = taxi_pipeline("run", *ws.locations())
    assert_one_clear_line(result, 4, f"data rejected: {ws.data / 'span-17' / 'trips.tfrecord.gz'} is truncated")
    assert {k: v for k, v in ws.good_state().items() if k.startswith("serving")} == served


