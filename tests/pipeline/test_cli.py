"""Bad data roots fail fast, before anything heavy is loaded, with a clear message."""

import os

import pytest


@pytest.mark.parametrize("command", ["run", "retrain"])
def test_missing_data_root_exits_1_naming_it(workspace, taxi_pipeline, command):
    result = taxi_pipeline(command, *workspace.locations(workspace.root / "nowhere"))
    assert result.returncode == 1
    assert "nowhere does not exist" in result.stderr
    assert not workspace.serving.exists()


def test_data_root_without_spans_exits_1(workspace, taxi_pipeline):
    (workspace.root / "empty" / "notes").mkdir(parents=True)
    result = taxi_pipeline("run", *workspace.locations(workspace.root / "empty"))
    assert result.returncode == 1
    assert "holds no span files" in result.stderr


def test_empty_span_file_is_rejected_with_exit_4_naming_the_file(workspace, taxi_pipeline):
    (workspace.data / "span-1").mkdir(parents=True)
    (workspace.data / "span-1" / "trips.tfrecord.gz").write_bytes(b"")
    result = taxi_pipeline("run", *workspace.locations())
    assert result.returncode == 4
    assert "trips.tfrecord.gz" in result.stderr
    assert not workspace.metadata.exists()


def test_every_subcommand_is_named_in_the_module_doc_and_the_help(taxi_pipeline):
    from pipeline import cli

    result = taxi_pipeline("--help")
    assert result.returncode == 0
    for command in ("run", "retrain", "compile", "schedule", "make-data"):
        assert f"taxi-pipeline {command} " in cli.__doc__
        assert command in result.stdout


def test_a_remote_output_root_is_refused_naming_why(workspace, copy_spans, taxi_pipeline):
    copy_spans(workspace.data, (16,))
    result = taxi_pipeline("run", "--data-root", str(workspace.data), "--output-root", "gs://bucket/out",
                           "--serving-dir", str(workspace.serving))
    assert result.returncode == 1
    assert "output root must be a local folder" in result.stderr


@pytest.mark.parametrize("where", ["data", "out"])
def test_a_path_with_glob_characters_is_refused_before_anything_is_written(workspace, copy_spans, taxi_pipeline, where):
    data, out = workspace.data, workspace.out
    if where == "data":
        data = workspace.root / "taxi [prod]"
    else:
        out = workspace.root / "out [run 2]"
    copy_spans(data, (15, 16))
    result = taxi_pipeline("run", "--data-root", str(data), "--output-root", str(out),
                           "--serving-dir", str(workspace.serving))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "[ ] in its path" in result.stderr and "glob" in result.stderr
    assert not (out / "metadata.sqlite").exists() and not (workspace.root / "out [run 2]").exists()


def test_a_folder_named_like_a_span_that_is_not_one_is_refused(workspace, copy_spans, taxi_pipeline):
    copy_spans(workspace.data, (16,))
    (workspace.data / "span-old").mkdir()
    result = taxi_pipeline("run", *workspace.locations())
    assert result.returncode == 4
    assert "span-old" in result.stderr and "Rename or move it" in result.stderr


def test_synthetic_rows_are_never_written_to_data_unless_named(taxi_pipeline, repo):
    before = sorted(os.listdir(repo / "data"))
    result = taxi_pipeline("make-data", "--rows", "100")
    assert result.returncode == 1
    assert "--rows needs --out" in result.stderr
    assert sorted(os.listdir(repo / "data")) == before


def test_running_out_of_memory_or_disk_names_the_limit(monkeypatch, capsys):
    import errno

    from pipeline import cli
    from pipeline.data import commands

    def out_of_disk(args, ending):
        raise OSError(errno.ENOSPC, "No space left on device", "/out/pipeline_root/Trainer")

    monkeypatch.setattr(commands, "make_data", out_of_disk)
    assert cli.main(["make-data"]) == 1
    assert "no space left on the device writing /out/pipeline_root/Trainer" in capsys.readouterr().err

    def out_of_memory(args, ending):
        raise MemoryError()

    monkeypatch.setattr(commands, "make_data", out_of_memory)
    assert cli.main(["make-data"]) == 1
    assert "out of memory" in capsys.readouterr().err
