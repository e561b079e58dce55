"""What `history` adds to a run whose model awaited approval: what a person decided since."""

import types

from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2 as mlmd

from components.custom import recorded
from components.support import registry
from components.support.registry import Candidate, Fate
from pipeline import config
from pipeline.inspect import lineage, run_report
from pipeline.outcome import Outcome, RunReport
from tests.mlmd_builder import PIPELINE, MetadataBuilder


def test_a_run_that_awaited_approval_shows_what_became_of_its_version_since(tmp_path):
    model_dir = tmp_path / "serving" / "big_tip"
    model_dir.mkdir(parents=True)
    record = registry.Record()
    record.add(Candidate("a", [1], Fate.AWAITING_APPROVAL, version=300))
    registry.write(str(model_dir), record)
    waited = RunReport(Outcome.AWAITING_APPROVAL, pushed_version_dir=f"{model_dir}/300/")
    assert lineage.decided_since(waited) == ""  # it still awaits

    record.candidates[0].fate, record.candidates[0].by, record.candidates[0].at = Fate.REJECTED, "ana", "2026-11-30"
    record.candidates[0].reason = "slice drift"
    registry.write(str(model_dir), record)
    assert lineage.decided_since(waited) == "then rejected by ana at 2026-11-30: slice drift"
    # Superseded by a newer candidate while it awaited: no person decided, the reason says why.
    record = registry.Record()
    record.add(Candidate("a", [1], Fate.AWAITING_APPROVAL, version=300))
    record.add(Candidate("c", [3], Fate.SERVED, version=500, at="2026-12-01"))
    registry.write(str(model_dir), record)
    assert lineage.decided_since(waited) == "then superseded: version 500 passed every check after it"

    # Not a run that awaited, or a version the record does not know (the folder moved): nothing.
    assert lineage.decided_since(RunReport(Outcome.PUSHED, pushed_version_dir=f"{model_dir}/300")) == ""
    assert lineage.decided_since(RunReport(Outcome.AWAITING_APPROVAL, pushed_version_dir=f"{tmp_path}/gone/9")) == ""


def test_a_record_that_cannot_be_read_or_is_in_a_bucket_leaves_the_line_as_it_was(tmp_path, caplog):
    model_dir = tmp_path / "big_tip"
    model_dir.mkdir()
    (model_dir / "record.json").write_text("{not json")
    waited = RunReport(Outcome.AWAITING_APPROVAL, pushed_version_dir=f"{model_dir}/300")
    records = {}
    assert lineage.decided_since(waited, records) == "" and records == {str(model_dir): None}
    assert "what became of version 300 is not shown: " in caplog.text and "is not a record this pipeline" in caplog.text
    # Read once per model folder: a record repaired since is not read again within one listing.
    record = registry.Record()
    record.add(Candidate("a", [1], Fate.REJECTED, version=300, by="ana", at="2026-11-30", reason="why"))
    registry.write(str(model_dir), record)
    assert lineage.decided_since(waited, records) == ""
    assert lineage.decided_since(waited) == "then rejected by ana at 2026-11-30: why"
    # Not read from Cloud Storage at all.
    assert lineage.decided_since(RunReport(Outcome.AWAITING_APPROVAL, pushed_version_dir="gs://b/big_tip/300")) == ""


def test_history_says_under_its_listing_which_record_it_could_not_read(tmp_path, monkeypatch):
    connection = mlmd.ConnectionConfig()
    connection.fake_database.SetInParent()
    run_config = config.RunConfig(output_root=str(tmp_path / "out"), serving_dir=str(tmp_path / "serving"))
    builder = MetadataBuilder(metadata_store.MetadataStore(connection), run_config)
    made = builder.train("20261130-000000-000000-1-k", push_version=300)
    pushed = builder.artifact(made["Pusher", "pushed_model"])
    pushed.custom_properties[recorded.PUSHED_PROPERTY].int_value = 1
    pushed.custom_properties[recorded.FATE_PROPERTY].string_value = Fate.AWAITING_APPROVAL.value
    builder.store.put_artifacts([pushed])
    monkeypatch.setattr(run_report, "connect", lambda _metadata: builder.store)
    record = registry.Record()
    record.add(Candidate("a", [1], Fate.APPROVED, version=300, by="ana", at="2026-11-30", reason="fine"))
    registry.write(run_config.model_serving_dir, record)

    listing = lineage.history(run_config.metadata, PIPELINE, limit=5).splitlines()
    assert len(listing) == 1 and "then approved by ana at 2026-11-30: fine" in listing[0]

    (tmp_path / "serving" / "big_tip" / "record.json").write_text("{not json")
    run, note = lineage.history(run_config.metadata, PIPELINE, limit=5).splitlines()
    assert "awaiting approval" in run and "then " not in run
    assert note.startswith(f"Not shown: what became of the versions above that awaited approval in "
                           f"{run_config.model_serving_dir}")
    assert f"serving list --serving-dir {tmp_path / 'serving'} --model-name big_tip" in note
    # A newer monitor run takes the only line of --limit 1: no run above awaited, no note.
    newer = types.SimpleNamespace(recorded=4102444800000, monitor_id="monitor-1")
    monkeypatch.setattr(lineage.monitor_records, "read_all", lambda _store: [newer])
    monkeypatch.setattr(lineage.monitor_records, "describe", lambda found: "version 300  1000 requests")
    assert lineage.history(run_config.metadata, PIPELINE, limit=1).splitlines() == [
        f"{lineage._time(4102444800000)}  monitor-1  version 300  1000 requests"]
