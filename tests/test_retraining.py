"""Scheduled retraining end to end: a window of spans, then a new span with warm start."""

import json
import os
import shutil

import pytest

from pipeline import cli, retrain

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.slow


def _retrain(root):
    return cli.main(["retrain", "--window", "3", "--data-root", str(root / "data"),
                     "--output-root", str(root / "out"), "--serving-dir", str(root / "serving")])


def _add_span(root, span):
    shutil.copytree(os.path.join(REPO, "data", f"span-{span}"), root / "data" / f"span-{span}")


def test_retrain_trains_on_the_window_then_warm_starts_on_the_next_span(tmp_path, capsys):
    for span in (10, 11, 12, 13):
        _add_span(tmp_path, span)
    assert _retrain(tmp_path) == 0
    first = capsys.readouterr().out
    assert "Spans: trained on 11, 12; evaluated on 13" in first
    assert "Warm start: no: no blessed model yet" in first
    state = json.loads((tmp_path / "out" / retrain.STATE_FILE).read_text())
    assert state["trained_through_span"] == 13

    assert _retrain(tmp_path) == 0
    assert "span 13 was already trained on; nothing to do" in capsys.readouterr().out

    _add_span(tmp_path, 14)
    status = _retrain(tmp_path)
    second = capsys.readouterr().out
    assert "Spans: trained on 12, 13; evaluated on 14" in second
    assert "Warm start: yes: started from" in second
    assert status in (0, 3), second  # blessed or not, the previous version is still in place
    assert len(os.listdir(tmp_path / "serving" / "big_tip")) in (1, 2)
    assert not (tmp_path / "out" / retrain.LOCK_FILE).exists()
