"""Bad data roots fail fast with a clear message and exit status 1."""

from pipeline import cli


def _run(tmp_path, data_root):
    return cli.main(["run", "--data-root", str(data_root), "--output-root", str(tmp_path / "out"),
                     "--serving-dir", str(tmp_path / "serving")])


def test_missing_data_root_exits_1_naming_it(tmp_path, capsys):
    assert _run(tmp_path, tmp_path / "nowhere") == 1
    assert "nowhere does not exist" in capsys.readouterr().err
    assert not (tmp_path / "serving").exists()


def test_data_root_without_spans_exits_1(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert _run(tmp_path, tmp_path / "empty") == 1
    assert "holds no span files" in capsys.readouterr().err


def test_empty_span_file_is_rejected_with_exit_4_naming_the_file(tmp_path, capsys):
    span = tmp_path / "data" / "span-1"
    span.mkdir(parents=True)
    (span / "trips.tfrecord.gz").write_bytes(b"")
    assert _run(tmp_path, tmp_path / "data") == 4
    assert "trips.tfrecord.gz" in capsys.readouterr().err
