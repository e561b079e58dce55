"""Scheduled retraining end to end: a window of spans, then a new span with warm start."""

import os

import pytest

from tests.helpers import assert_ignored_in_log, copy_padded_spans, write_leftovers

pytestmark = [pytest.mark.slow, pytest.mark.every_stack]


def test_retrain_trains_on_the_window_then_warm_starts_on_the_next_span(workspace, taxi_pipeline, last_run):
    ws = workspace
    copy_padded_spans(ws.data, (10, 11, 12, 13))
    # Leftovers beside and in the window's spans are listed as ignored and read by nothing.
    leftovers = write_leftovers(ws.data, "span-012", "span-013")
    temporary = ws.root / "tmp"
    temporary.mkdir(parents=True)

    def retrain():
        return taxi_pipeline("retrain", "--window", "3", *ws.locations(), env={"TMPDIR": str(temporary)})

    first = retrain()
    assert first.returncode == 0, first.stdout + first.stderr
    record = last_run(ws.out)
    assert (record["spans"], record["window_size"]) == ([11, 12, 13], 3)
    assert record["warm_start"] == "no: no model serves yet"
    assert "Spans: trained on 11, 12; evaluated on 13" in first.stdout
    assert_ignored_in_log(first, leftovers)

    again = retrain()
    assert again.returncode == 0
    assert "Nothing new: span 13 was already trained on with the same data, code and settings" in again.stdout
    assert last_run(ws.out)["run_id"] == record["run_id"]

    copy_padded_spans(ws.data, (14,))
    second = retrain()
    record = last_run(ws.out)
    assert record["spans"] == [12, 13, 14]
    assert record["warm_start"].startswith("yes: started from")
    assert second.returncode in (0, 3), second.stdout + second.stderr  # blessed or not, the old version stays
    assert len(ws.versions()) in (1, 2)
    assert (ws.out / "run.lock").read_text() == ""  # released, holder line cleared
    # The gate in window mode does not run the Beam pipeline TFX made for it: its folder goes.
    assert sorted(os.listdir(temporary)) == []
