"""What an on-call engineer uses after a run: its page in a browser, history, lineage,
rollback and pins of what TF Serving serves, and run-end alerts."""

import json
import re
import shutil

import numpy as np
import pytest

from tests.helpers import SLICE_SPANS, served_models, without_heavy_libraries, write_records
from tests.pages import browser, rendered

pytestmark = pytest.mark.slow

SECTIONS = ("decision", "data", "timings", "checks", "features", "training", "evaluation", "serving")


def _page_path(result) -> str:
    last = result.stdout.splitlines()[-1]
    assert last.startswith("Report: "), result.stdout
    return last[len("Report: "):]


def test_each_run_writes_a_page_a_browser_renders_with_its_key_parts(finished_run, last_run, tmp_path):
    ws = finished_run.workspace
    path = _page_path(finished_run.result)
    record = last_run(ws.out)
    assert path == str(ws.out / "reports" / f"{record['run_id']}.html")
    text = open(path, encoding="utf-8").read()
    # Self-contained: nothing is fetched when it is opened.
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text)

    page = rendered(path)
    version = ws.versions()[0]
    decision = " ".join(page.text_by_id["decision"].split())
    assert decision.startswith(f"Pushed model version {version}") and "(exit 0)" in decision
    assert all(section in page.text_by_id for section in SECTIONS)
    assert page.text_by_id["blessed"] == "yes"
    assert "span-16/" in page.text_by_id["data"]  # the files read
    assert "Transform" in page.text_by_id["timings"]
    assert "Overall" in page.text_by_id["slices"]
    assert page.rows["drift"] > 1  # a header and a row per compared feature
    assert f"{record['eval_metrics']['auc']:.4f}" in page.text_by_id["slices"]
    # A plot per feature, plus timings, drift, training and slices; every one embedded.
    assert len(page.images) > 20 and all(src.startswith("data:image/svg+xml;base64,") for src in page.images)

    screenshot = tmp_path / "page.png"
    shot = browser("--window-size=1200,2400", f"--screenshot={screenshot}", f"file://{path}")
    assert shot.returncode == 0, shot.stderr
    from matplotlib import image

    pixels = image.imread(str(screenshot))
    assert pixels.shape[:2] == (2400, 1200)
    assert np.std(pixels[..., :3]) > 0.05  # drawn, not a blank page


def test_every_pushed_version_carries_its_model_card(copy_of_finished_run, last_run, taxi_pipeline):
    import tensorflow as tf

    from components.model import features

    ws = copy_of_finished_run
    record = last_run(ws.out)
    (version,) = ws.versions()
    folder = ws.model_dir / version / "assets.extra"
    card = json.loads((folder / "model_card.json").read_text())
    assert card["model"]["version"] == int(version) and card["model"]["name"] == "big_tip"
    assert card["training_data"]["spans"] == list(SLICE_SPANS)
    assert sum(card["training_data"]["rows"].values()) > 1000
    assert card["training_data"]["first_trip"] < card["training_data"]["last_trip"]
    assert card["evaluation"]["overall"]["candidate"]["auc"] == pytest.approx(record["eval_metrics"]["auc"], abs=1e-5)
    assert "AUC >= 0.8" in card["evaluation"]["thresholds"]
    assert card["serving_check"] == record["serving_check"] and " ms" in card["serving_check"]
    assert [row["feature"] for row in card["data_contract"]] == [f.name for f in features.FEATURES]
    assert any("too few to judge" in line for line in card["limitations"])
    # The version still loads and answers as TF Serving would load it.
    loaded = tf.saved_model.load(str(ws.model_dir / version))
    assert "serving_default" in loaded.signatures

    page = rendered(folder / "model_card.html")
    assert all(section in page.text_by_id for section in ("model", "data", "evaluation", "serving", "contract",
                                                          "limitations"))
    assert version in page.text_by_id["model"] and "payment_type" in page.text_by_id["contract"]

    (folder / "model_card.html").unlink()
    shown = taxi_pipeline("serving", "card", "--serving-dir", str(ws.serving))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[0] == f"Model card of version {version}: {folder / 'model_card.html'}"
    assert (folder / "model_card.html").read_text().startswith("<!DOCTYPE html>")  # written again from the JSON
    missing = taxi_pipeline("serving", "card", "12", "--serving-dir", str(ws.serving))
    assert missing.returncode == 1 and "no version 12 in" in missing.stderr


def test_a_past_runs_page_is_rendered_again_from_the_metadata_store(copy_of_finished_run, taxi_pipeline, last_run):
    ws = copy_of_finished_run
    run_id = last_run(ws.out)["run_id"]
    page = ws.out / "reports" / f"{run_id}.html"
    before = page.read_text()
    page.unlink()
    again = taxi_pipeline("report", run_id[:15], "--output-root", str(ws.out))
    assert again.returncode == 0, again.stderr
    assert _page_path(again) == str(page)
    rendered = page.read_text()
    decision = re.compile(r'<section id="decision".*?<div', re.S)  # the sentence
    assert decision.search(rendered).group(0) == decision.search(before).group(0)

    unknown = taxi_pipeline("report", "19990101", "--output-root", str(ws.out))
    assert unknown.returncode == 1 and "no run '19990101'" in unknown.stderr


def test_history_and_lineage_name_the_run_the_data_and_the_evaluation(copy_of_finished_run, taxi_pipeline, last_run,
                                                                     tmp_path):
    ws = copy_of_finished_run
    record = last_run(ws.out)
    version = ws.versions()[0]
    # Both read the metadata store alone: they answer where TensorFlow, TFX and the
    # libraries on them cannot be imported (the Evaluator recorded its metrics in the store).
    light = without_heavy_libraries(tmp_path / "light")
    history = taxi_pipeline("history", "--output-root", str(ws.out), env=light)
    assert history.returncode == 0, history.stderr
    (line,) = history.stdout.splitlines()
    assert record["run_id"] in line and "spans 12-16" in line and " pushed " in line
    assert f"auc {record['eval_metrics']['auc']:.4f}" in line and line.endswith(f"version {version}")

    lineage = taxi_pipeline("lineage", version, "--output-root", str(ws.out), "--serving-dir", str(ws.serving),
                            env=light)
    assert lineage.returncode == 0, lineage.stderr
    out = lineage.stdout
    assert f"Version {version} in {ws.model_dir}" in out
    assert "spans: span-12, span-13, span-14, span-15, span-16" in out
    for span in (12, 16):
        assert any(line.strip().startswith(f"span-{span}/") for line in out.splitlines())
    for made_by in ("trained by the Trainer, execution", "made by Transform, execution",
                    "Evaluation: blessed by the Evaluator, execution", "Serving check: 100 warmup request(s) answered",
                    "Shadow check: passed, not checked: no --shadow-requests given"):
        assert made_by in out
    assert f"auc {record['eval_metrics']['auc']:.4f}" in out
    assert f"of run {record['run_id']}" in out

    unknown = taxi_pipeline("lineage", "12345", "--output-root", str(ws.out), "--serving-dir", str(ws.serving))
    assert unknown.returncode == 1 and "no push of version 12345" in unknown.stderr


def test_a_rollback_pins_a_version_the_next_run_and_its_retention_keep(
    copy_of_finished_run, taxi_pipeline, webhook, tmp_path
):
    ws = copy_of_finished_run
    url, received = webhook
    (pushed,) = ws.versions()
    # An older version beside it, as an earlier push left it.
    older = str(int(pushed) - 100)
    shutil.copytree(ws.model_dir / pushed, ws.model_dir / older)
    serving = ("--serving-dir", str(ws.serving))

    rollback = taxi_pipeline("serving", "rollback", *serving)
    assert rollback.returncode == 0, rollback.stderr
    assert f"serving version {older} (was version {pushed})" in rollback.stdout
    (entry,) = served_models(ws.serving)
    assert list(entry.model_version_policy.specific.versions) == [int(older)]
    # TF Serving had not loaded the older version: labelling it would make it refuse the file.
    assert "stable" not in entry.version_labels
    assert ws.versions() == sorted([older, pushed])  # a rollback deletes nothing

    # A new output root, forced (the inputs are those of the version rolled back from, which
    # trains nothing), runs every component again, Pusher included, with retention 1.
    again = taxi_pipeline("run", "--data-root", str(ws.data), "--output-root", str(tmp_path / "out2"), *serving,
                          "--keep-versions", "1", "--force", "--notify", url)
    assert again.returncode == 0, again.stdout + again.stderr
    # The pinned version outlives retention, beside the newest (the same model again, or a
    # new version if training was not bit-identical).
    versions = ws.versions()
    assert len(versions) == 2 and versions[0] == older and int(versions[1]) >= int(pushed)
    newest = versions[1]
    (entry,) = served_models(ws.serving)
    assert list(entry.model_version_policy.specific.versions) == [int(older)]
    listing = taxi_pipeline("serving", "list", *serving)
    assert f"pinned to version {older}" in listing.stdout
    assert re.search(rf"^{older} .*SERVING pinned", listing.stdout, re.M)
    (alert,) = received
    assert alert["exit_code"] == 0 and alert["outcome"] == "pushed" and alert["version"] == newest
    assert alert["report"] == _page_path(again) and "taxi-pipeline run: pushed" in alert["text"]

    unpin = taxi_pipeline("serving", "unpin", *serving)
    assert unpin.returncode == 0, unpin.stderr
    (entry,) = served_models(ws.serving)
    assert list(entry.model_version_policy.specific.versions) == [int(older), int(newest)]
    assert dict(entry.version_labels) == {"stable": int(older)}  # what served before, and was loaded

    missing = taxi_pipeline("serving", "pin", "42", *serving)
    assert missing.returncode == 1 and "version 42 is not in" in missing.stderr


def test_a_failed_run_is_alerted_and_a_dead_webhook_changes_no_exit_status(
    copy_of_finished_run, taxi_pipeline, webhook, tmp_path
):
    ws = copy_of_finished_run
    url, received = webhook
    failed = taxi_pipeline("run", "--data-root", str(tmp_path / "nowhere"), "--output-root", str(ws.out),
                           "--serving-dir", str(ws.serving), "--notify", url)
    assert failed.returncode == 1
    (alert,) = received
    assert alert["outcome"] == "error" and alert["exit_code"] == 1 and "nowhere" in alert["error"]
    # A model the serving check refuses is alerted with exit 6: tests/test_decisions.py.

    # Nothing changed since the finished run: exit 0, whatever the webhook does.
    unchanged = taxi_pipeline("run", *ws.locations(), "--notify", "http://127.0.0.1:9/unreachable")
    assert unchanged.returncode == 0, unchanged.stdout + unchanged.stderr
    log = (ws.out / "logs").glob("run-*.log")
    assert any("could not notify http://127.0.0.1:9/…:" in path.read_text() for path in log)


def test_batch_scores_equal_the_saved_models_own(copy_of_finished_run, taxi_pipeline, examples_without_label, tmp_path):
    import tensorflow as tf

    from pipeline.ops import predict

    ws = copy_of_finished_run
    # A label-free copy of the run's spans of data/, as a client would score them.
    serialized = examples_without_label(ws.data, 100_000)
    assert serialized, ws.data  # the comparisons below are over every one of them
    inputs = tmp_path / "to-score"
    write_records(inputs / "part-0.tfrecord.gz", serialized)
    output = tmp_path / "scored"
    scored = taxi_pipeline("predict", "--model", "latest", "--input", str(inputs / "*"), "--output", str(output),
                           "--serving-dir", str(ws.serving), "--csv")
    assert scored.returncode == 0, scored.stdout + scored.stderr
    scores = predict.read_scores(str(output))
    assert set(scores) == set(serialized)
    model = tf.saved_model.load(str(ws.model_dir / ws.versions()[0]))
    expected = model.signatures["serving_default"](examples=tf.constant(serialized))["probability"].numpy()
    np.testing.assert_allclose([scores[s] for s in serialized], expected, rtol=1e-6, atol=1e-7)
    (csv,) = output.glob("scores-*.csv")
    lines = csv.read_text().splitlines()
    assert lines[0] == "probability,class_id" and len(lines) == len(serialized) + 1
    assert sorted(float(line.split(",")[0]) for line in lines[1:]) == pytest.approx(sorted(expected), abs=1e-6)

    again = taxi_pipeline("predict", "--model", "serving", "--input", str(inputs / "*"), "--output", str(output),
                          "--serving-dir", str(ws.serving))
    assert again.returncode == 1 and "is not empty" in again.stderr  # nothing overwritten
    unknown = taxi_pipeline("predict", "--model", "7", "--input", str(inputs / "*"), "--output",
                            str(tmp_path / "other"), "--serving-dir", str(ws.serving))
    assert unknown.returncode == 1 and "--model must be 'serving' or a version" in unknown.stderr
