"""`components.support.files`: a folder that is not there lists as empty only when the
caller says that is fine (a run's artifact removed by hand, a node's folder `gc` took)."""

import pytest

from components.support import files


def test_a_missing_folder_lists_as_empty_only_when_asked(tmp_path):
    (tmp_path / "there").mkdir()
    (tmp_path / "there" / "entry").write_text("")
    assert files.listdir(str(tmp_path / "there")) == ["entry"]
    assert files.listdir(str(tmp_path / "there"), missing_ok=True) == ["entry"]
    assert files.listdir(str(tmp_path / "gone"), missing_ok=True) == []
    with pytest.raises(FileNotFoundError):
        files.listdir(str(tmp_path / "gone"))
