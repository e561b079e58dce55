"""`taxi-pipeline monitor` as an operator runs it, in a subprocess: logged traffic in each
format against the training data of the version that served it."""

import base64
import json
import re

import pytest
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

from components.model import features
from components.support import request_logs
from tests.helpers import edited, last_line, write_records
from tests.pages import rendered

pytestmark = pytest.mark.slow


def _values(example: tf.train.Example) -> dict:
    """An example's raw features as a REST instance of the raw-feature signature."""
    found = {}
    for name, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        values = list(getattr(feature, kind).value) if kind else []
        if values:
            found[name] = values[0].decode() if isinstance(values[0], bytes) else values[0]
    return found


def _write_prediction_logs(path, records):
    logs = []
    for record in records:
        request = predict_pb2.PredictRequest()
        request.inputs[request_logs.EXAMPLES_INPUT].CopyFrom(tf.make_tensor_proto([record]))
        logs.append(prediction_log_pb2.PredictionLog(
            predict_log=prediction_log_pb2.PredictLog(request=request)).SerializeToString())
    return write_records(path, logs, compression="")


def _write_json(path, records, batch=10, raw=False, garbage=()):
    """REST bodies of `batch` base64 examples each, or (raw) Vertex AI log rows of raw
    feature instances; `garbage` lines inserted at those line indexes."""
    lines = []
    for start in range(0, len(records), batch):
        chunk = records[start:start + batch]
        if raw:
            lines.append(json.dumps({"request_payload": [json.dumps(_values(tf.train.Example.FromString(r)))
                                                         for r in chunk], "response_payload": []}))
        else:
            lines.append(json.dumps({"instances": [{"b64": base64.b64encode(r).decode()} for r in chunk]}))
    for index in garbage:
        lines.insert(index, '{"instances": [{"b64": "not base64!"}]}' if index % 2 else "this is no JSON")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def traffic(copy_of_finished_run, examples_without_label):
    """(this test's copy of a finished run, its served version, the spans' examples without
    their label)."""
    ws = copy_of_finished_run
    return ws, ws.versions()[0], examples_without_label(ws.data, 100_000)


def _monitor(taxi_pipeline, ws, *args):
    return taxi_pipeline("monitor", "--output-root", str(ws.out), "--serving-dir", str(ws.serving), *args)


def test_clean_traffic_in_every_format_passes_and_is_recorded(traffic, taxi_pipeline, tmp_path):
    ws, version, records = traffic
    third = len(records) // 3
    logged = tmp_path / "logged"
    logged.mkdir()
    write_records(logged / "gateway.tfrecord.gz", records[:third])
    _write_prediction_logs(logged / "predictions-00000-of-00001", records[third:2 * third])
    half = (len(records) - 2 * third) // 2
    _write_json(logged / "rest.jsonl", records[2 * third:2 * third + half])
    _write_json(logged / "vertex-rows.json", records[2 * third + half:], raw=True)

    clean = _monitor(taxi_pipeline, ws, "--requests", str(logged / "*"))
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert f"Monitored {len(records)} requests against version {version}" in clean.stdout
    assert "no skew past the thresholds, no anomalies" in clean.stdout
    page = clean.stdout.splitlines()[-1].removeprefix("Page: ")
    text = open(page, encoding="utf-8").read()
    for name, kind in (("gateway.tfrecord.gz", "examples"), ("predictions-00000-of-00001", "prediction-logs"),
                       ("rest.jsonl", "json"), ("vertex-rows.json", "json")):
        assert re.search(rf"{re.escape(name)}</code></td><td>{kind}<", text), name

    history = taxi_pipeline("history", "--output-root", str(ws.out))
    assert history.returncode == 0, history.stderr
    (line,) = [line for line in history.stdout.splitlines() if " monitor-" in line]
    assert f"monitor of version {version}  {len(records)} requests  clean" in line
    assert " pushed " in history.stdout  # the pipeline's run is still listed beside it


def test_a_shifted_feature_fails_naming_it_on_the_page_and_in_the_alert(traffic, taxi_pipeline, webhook, tmp_path):
    ws, version, records = traffic
    url, received = webhook

    def quadruple_fare(example):
        fare = example.features.feature["fare"].float_list.value
        fare[0] = fare[0] * 4 + 20

    shifted = write_records(tmp_path / "shifted.tfrecord", edited(records, quadruple_fare), compression="")
    found = _monitor(taxi_pipeline, ws, "--requests", str(shifted), "--notify", url)
    assert found.returncode == 4, found.stdout + found.stderr
    (line,) = [line for line in found.stdout.splitlines() if line.startswith("feature 'fare'")]
    assert re.fullmatch(r"feature 'fare': skew JENSEN_SHANNON_DIVERGENCE 0\.\d{3} \(threshold 0\.550\)", line), line
    assert float(line.split()[4]) > 0.55
    (alert,) = received
    assert alert["exit_code"] == 4 and alert["version"] == int(version) and line in alert["findings"]

    page = found.stdout.splitlines()[-1].removeprefix("Page: ")
    shown = rendered(page)
    assert "finding(s)" in shown.text_by_id["decision"] and "(exit 4)" in shown.text_by_id["decision"]
    assert "feature 'fare'" in shown.text_by_id["findings"]
    assert "shifted.tfrecord" in shown.text_by_id["records"]
    # The skew plot and one plot per feature, every one embedded.
    assert len(shown.images) >= len(features.FEATURES) + 1
    assert all(src.startswith("data:image/svg+xml;base64,") for src in shown.images)


def test_a_flood_of_an_unseen_company_and_a_missing_required_feature_fail_naming_them(
    traffic, taxi_pipeline, tmp_path
):
    ws, _, records = traffic

    def unseen_company(example):
        example.features.feature["company"].bytes_list.value[:] = [b"Nobody's Cabs Ltd"]

    flood = _write_json(tmp_path / "flood.jsonl", edited(records, unseen_company, every=2), raw=True)
    found = _monitor(taxi_pipeline, ws, "--requests", str(flood))
    assert found.returncode == 4, found.stdout + found.stderr
    assert re.search(r"^feature 'company': skew L_INFTY 0\.\d{3} \(threshold 0\.240\)$", found.stdout, re.M)

    def without_trip_miles(example):
        del example.features.feature["trip_miles"]

    missing = _write_prediction_logs(tmp_path / "predictions.tfrecord", edited(records, without_trip_miles, every=10))
    found = _monitor(taxi_pipeline, ws, "--requests", str(missing))
    assert found.returncode == 4, found.stdout + found.stderr
    assert re.search(r"^feature 'trip_miles': .*(FEATURE_TYPE_LOW_FRACTION_PRESENT|missing|presence)", found.stdout,
                     re.M | re.I), found.stdout


def test_garbage_records_are_named_and_too_many_stop_the_judgement(traffic, taxi_pipeline, tmp_path):
    ws, _, records = traffic
    # 500 requests a line each, and 11 lines of garbage: 2.2% of the records.
    garbage = tuple(range(4, 510, 49))
    logged = _write_json(tmp_path / "rest.jsonl", records[:500], batch=1, garbage=garbage)
    stopped = _monitor(taxi_pipeline, ws, "--requests", str(logged))
    assert stopped.returncode == 1, stopped.stdout + stopped.stderr
    last = last_line(stopped)
    assert last.startswith("error: 11 of 511 logged records are malformed (more than --max-malformed 1%)"), last
    assert f"{logged}, line 5: " in last and "the traffic was not judged" in last

    judged = _monitor(taxi_pipeline, ws, "--requests", str(logged), "--max-malformed", "0.05")
    assert judged.returncode == 0, judged.stdout + judged.stderr
    assert "11 malformed records were left out" in judged.stdout
    assert f"{logged}, line 54: its b64 value is not base64" in judged.stdout
    assert "Monitored 500 requests" in judged.stdout

    # A TFRecord file cut short: the records after the cut are one malformed entry.
    whole = write_records(tmp_path / "cut.tfrecord", records[:300], compression="").read_bytes()
    (tmp_path / "cut.tfrecord").write_bytes(whole[:-150])
    cut = _monitor(taxi_pipeline, ws, "--requests", str(tmp_path / "cut.tfrecord"))
    assert cut.returncode == 0, cut.stdout + cut.stderr
    assert re.search(r"cut\.tfrecord, record 29\d: the file is damaged from here on", cut.stdout), cut.stdout

    # A folder that holds no requests is said to, and judges nothing (tests/test_paths.py).
    nothing = _monitor(taxi_pipeline, ws, "--requests", str(tmp_path / "none-*.jsonl"))
    assert nothing.returncode == 0 and "No files match --requests" in nothing.stdout


def test_an_output_root_without_the_store_is_named_and_nothing_is_written(traffic, taxi_pipeline, tmp_path):
    ws, version, records = traffic
    logged = write_records(tmp_path / "requests.tfrecord.gz", records[:100])
    elsewhere = tmp_path / "elsewhere"
    found = taxi_pipeline("monitor", "--requests", str(logged), "--output-root", str(elsewhere),
                          "--serving-dir", str(ws.serving))
    assert found.returncode == 1, found.stdout + found.stderr
    last = last_line(found)
    assert last == (f"error: no metadata store at {elsewhere / 'metadata.sqlite'}: give the --output-root (or "
                    f"--metadata-mysql) of the pipeline that pushed version {version}")
    assert not elsewhere.exists()
