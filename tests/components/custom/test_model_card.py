"""The model card: the data contract from the curated schema, the limitations it names,
and a page that escapes what it shows."""

import json

import tensorflow_data_validation as tfdv

from components.custom import model_card
from components.model import features
from pipeline import config


def test_the_data_contract_is_the_curated_schema_for_every_model_feature():
    contract = model_card.data_contract(tfdv.load_schema_text(config.schema_file()))
    assert [row["feature"] for row in contract] == [f.name for f in features.FEATURES]
    rows = {row["feature"]: row for row in contract}
    assert all(rows[f.name]["required"] == f.required for f in features.FEATURES)
    assert rows["trip_start_hour"]["domain"] == "0..23"
    assert rows["fare"]["domain"] == ">= 0 finite"
    assert "Credit Card" in rows["payment_type"]["domain"].split(", ")
    assert rows["fare"]["skew_threshold"] and not rows["trip_miles"]["skew_threshold"]


def _card(slices, contract):
    return {"evaluation": {"overall": {}, "slices": slices, "thresholds": []}, "data_contract": contract}


def test_limitations_name_small_slices_and_unchecked_features():
    slices = {"payment_type=Prcard": {"candidate": {"example_count": 1.0, "auc": 1.0}, "baseline": {}},
              "payment_type=Cash": {"candidate": {"example_count": 900.0, "auc": 0.93}, "baseline": {}}}
    contract = [{"feature": "fare", "drift_threshold": True, "skew_threshold": True},
                {"feature": "trip_miles", "drift_threshold": False, "skew_threshold": False},
                {"feature": "trip_start_day", "drift_threshold": False, "skew_threshold": True},
                {"feature": "pickup_latitude", "drift_threshold": True, "skew_threshold": False}]
    found = model_card.limitations(_card(slices, contract), ["feature 'company' drifted ..."])
    assert found == [
        "slice payment_type=Prcard: 1 eval example, too few to judge its metrics",
        "feature 'trip_miles' has no drift or skew threshold: its shifts go unchecked",
        "feature 'pickup_latitude' has no skew threshold: `monitor` does not judge it",
        "feature 'company' drifted ...",
    ]


def test_the_page_shows_each_part_and_escapes_what_it_shows(tmp_path):
    card = {
        "model": {"name": "big_tip", "version": 7, "pushed_at": "2026-11-25T10:00:00+00:00", "stack": "tfx-1.16",
                  "code_version": "abc", "saved_model_sha256": "0123", "label": "big_tip",
                  "label_meaning": "the tip exceeds 20% of the fare"},
        "training_data": {"spans": [3, 4], "files": ["span-3/a.gz"], "rows": {"train": 10, "eval": 5},
                          "first_trip": "2015-01-01", "last_trip": "2015-06-30"},
        "evaluation": {"overall": {"candidate": {"auc": 0.91}, "baseline": {"auc": 0.9}}, "slices": {},
                       "thresholds": ["AUC >= 0.8"]},
        "serving_check": "p99 <script>alert(1)</script> 0.5 ms",
        "data_contract": [],
        "limitations": ["slice x: 2 eval examples"],
    }
    model_card.write(str(tmp_path), card)
    page = (tmp_path / "assets.extra" / model_card.HTML_FILE).read_text()
    assert "<script>" not in page and "&lt;script&gt;" in page
    for section in ("model", "data", "evaluation", "serving", "contract", "limitations"):
        assert f'<section id="{section}">' in page
    assert "0.91" in page and "AUC &gt;= 0.8" in page and "2015-01-01 to 2015-06-30" in page
    assert json.loads((tmp_path / "assets.extra" / model_card.JSON_FILE).read_text()) == card
