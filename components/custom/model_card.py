"""The model card of a pushed version: what a reviewer reads beside the SavedModel.

The Pusher writes `assets.extra/model_card.json` (for programs) and
`assets.extra/model_card.html` (self-contained, for people) into the version folder it
stages, so a version is never on disk without its card. TF Serving reads nothing of
`assets.extra` but its warmup file. The card holds:

- the model: name, version, when it was pushed, the stack, the code version and the
  SavedModel's fingerprint;
- the training data: spans, files, rows per split and the trips' time range (from the
  run's ImportExampleGen examples and StatisticsGen statistics);
- the evaluation: AUC and the other metrics, overall and per slice, the candidate's and
  the served model's on the same data, and the blessing thresholds;
- the serving check: what it found (p99 latency against its budget);
- the data contract: each feature, its kind and type, whether it is required, its domain;
- limitations: slices too small to judge, features without a drift or skew threshold,
  features whose drift from the previous span came near its threshold.
"""

from __future__ import annotations

import datetime
import hashlib
import html
import json
import os
from typing import Any, Dict, List, Optional

import tensorflow as tf
from tensorflow_metadata.proto.v0 import anomalies_pb2, schema_pb2, statistics_pb2

from components import compat
from components.custom import gate, span_statistics
from components.model import SCHEMA_FILE, features
from components.support import evaluation as evaluation_output

CARD_DIR = "assets.extra"
JSON_FILE, HTML_FILE = "model_card.json", "model_card.html"
# Slices with fewer eval examples are named as too small to judge.
MIN_SLICE_EXAMPLES = 30
# A feature whose drift reached this fraction of its threshold is named as drifting.
NEAR_THRESHOLD = 0.5
TIMESTAMP_FEATURE = "trip_start_timestamp"


def _schema_text_domain(feature: schema_pb2.Feature, schema: schema_pb2.Schema) -> str:
    kind = feature.WhichOneof("domain_info")
    if kind == "int_domain":
        return f"{feature.int_domain.min}..{feature.int_domain.max}"
    if kind == "float_domain":
        domain = feature.float_domain
        low = f">= {domain.min:g}" if domain.HasField("min") else ""
        return " ".join(filter(None, [low, "finite" if domain.disallow_nan and domain.disallow_inf else ""]))
    if kind == "domain":
        values = next((list(d.value) for d in schema.string_domain if d.name == feature.domain), [])
        return ", ".join(values)
    if kind == "bool_domain":
        return "0 or 1"
    return ""


def data_contract(schema: schema_pb2.Schema) -> List[Dict[str, Any]]:
    """Each model feature as the curated schema constrains it."""
    by_name = {f.name: f for f in schema.feature}
    rows = []
    for spec in features.FEATURES:
        feature = by_name.get(spec.name)
        rows.append({
            "feature": spec.name, "kind": spec.kind.value, "dtype": spec.dtype.name, "required": spec.required,
            "domain": _schema_text_domain(feature, schema) if feature is not None else "",
            "drift_threshold": feature is not None and feature.HasField("drift_comparator"),
            "skew_threshold": feature is not None and feature.HasField("skew_comparator"),
        })
    return rows


def training_data(source_files: Dict[str, List[str]], split_names: List[str], statistics_uri: str) -> Dict[str, Any]:
    """Spans, files, rows per split and the trips' time range."""
    from tensorflow_data_validation import load_stats_binary

    files = sorted(path for paths in source_files.values() for path in paths)
    spans = sorted({int(path.split("/", 1)[0].split("-", 1)[1]) for path in files if path.startswith("span-")})
    rows, low, high = {}, None, None
    for split in split_names:
        path = os.path.join(statistics_uri, f"Split-{split}", span_statistics.STATS_FILE)
        if not tf.io.gfile.exists(path):
            continue
        stats: statistics_pb2.DatasetFeatureStatisticsList = load_stats_binary(path)
        for dataset in stats.datasets:
            rows[split] = int(dataset.num_examples)
            for feature in dataset.features:
                if tuple(feature.path.step) == (TIMESTAMP_FEATURE,) and feature.HasField("num_stats"):
                    low = min(low, feature.num_stats.min) if low is not None else feature.num_stats.min
                    high = max(high, feature.num_stats.max) if high is not None else feature.num_stats.max

    def when(seconds: Optional[float]) -> Optional[str]:
        if seconds is None:
            return None
        return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).date().isoformat()

    return {"spans": spans, "files": files, "rows": rows, "first_trip": when(low), "last_trip": when(high)}


def evaluation(evaluation_uri: str) -> Dict[str, Any]:
    """The metrics by slice (candidate and baseline) and the thresholds the Evaluator applied."""
    found = {entry.slice: {"candidate": {k: round(v, 6) for k, v in entry.candidate.items()},
                           "baseline": {k: round(v, 6) for k, v in entry.baseline.items()}}
             for entry in evaluation_output.slices(evaluation_uri)}
    thresholds = [f"{t.metric} - the served model's >= {t.value:g}" if t.change else f"{t.metric} >= {t.value:g}"
                  for t in evaluation_output.thresholds(evaluation_uri)]
    overall = found.pop(evaluation_output.OVERALL, {"candidate": {}, "baseline": {}})
    return {"overall": overall, "slices": found, "thresholds": thresholds}


def drift_near_thresholds(verdict_uri: str) -> List[str]:
    """Features whose drift from the previous span reached `NEAR_THRESHOLD` of their threshold."""
    path = os.path.join(verdict_uri, gate.ANOMALIES_FILE)
    if not tf.io.gfile.exists(path):
        return []
    with tf.io.gfile.GFile(path, "rb") as handle:
        found = anomalies_pb2.Anomalies.FromString(handle.read())
    lines = []
    for info in found.drift_skew_info:
        for m in info.drift_measurements:
            if m.threshold and m.value >= NEAR_THRESHOLD * m.threshold:
                lines.append(f"feature {info.path.step[0]!r} drifted from the previous span: "
                             f"{anomalies_pb2.DriftSkewInfo.Measurement.Type.Name(m.type)} {m.value:.3f} of "
                             f"threshold {m.threshold:.3f}")
    return sorted(lines)


def limitations(card: Dict[str, Any], drifting: List[str]) -> List[str]:
    lines = []
    for name, entry in card["evaluation"]["slices"].items():
        count = entry["candidate"].get("example_count", 0)
        if count < MIN_SLICE_EXAMPLES:
            lines.append(f"slice {name}: {int(count)} eval example{'' if int(count) == 1 else 's'}, too few to judge "
                         "its metrics")
    for row in card["data_contract"]:
        if not row["drift_threshold"] and not row["skew_threshold"]:
            lines.append(f"feature {row['feature']!r} has no drift or skew threshold: its shifts go unchecked")
        elif not row["skew_threshold"]:
            lines.append(f"feature {row['feature']!r} has no skew threshold: `monitor` does not judge it")
    return lines + drifting


def fingerprint(model_path: str) -> str:
    path = os.path.join(model_path, "saved_model.pb")
    if not tf.io.gfile.exists(path):
        return ""
    with tf.io.gfile.GFile(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()[:16]


def build(*, model_name: str, version: int, model_path: str, code_version: str, source_files: Dict[str, List[str]],
          split_names: List[str], statistics_uri: str, evaluation_uri: str, verdict_uri: str,
          serving_check: str, schema_dir: str) -> Dict[str, Any]:
    """The card of `version` (see the module doc); the URIs of inputs the run lacks are ""."""
    schema = schema_pb2.Schema()
    from google.protobuf import text_format

    with tf.io.gfile.GFile(os.path.join(schema_dir, SCHEMA_FILE)) as handle:
        text_format.Parse(handle.read(), schema)
    card: Dict[str, Any] = {
        "model": {
            "name": model_name, "version": version,
            "pushed_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "stack": compat.describe(), "code_version": code_version,
            "saved_model_sha256": fingerprint(model_path), "label": features.LABEL_KEY,
            "label_meaning": f"the tip exceeds {features.BIG_TIP_FRACTION:.0%} of the fare",
        },
        "training_data": training_data(source_files, split_names, statistics_uri) if statistics_uri else {},
        "evaluation": evaluation(evaluation_uri) if evaluation_uri else {"overall": {}, "slices": {},
                                                                         "thresholds": []},
        "serving_check": serving_check,
        "data_contract": data_contract(schema),
    }
    card["limitations"] = limitations(card, drift_near_thresholds(verdict_uri) if verdict_uri else [])
    return card


def _cell(value: Any) -> str:
    return html.escape(f"{value:.4f}" if isinstance(value, float) else str(value))


def _table(header: List[str], rows: List[List[Any]]) -> str:
    head = "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>" if header else ""
    body = "".join("<tr>" + "".join(f"<td>{_cell(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table>{head}{body}</table>"


def render_html(card: Dict[str, Any]) -> str:
    """The card as one self-contained HTML page."""
    model, data, evaluated = card["model"], card["training_data"], card["evaluation"]
    metrics = sorted(set(evaluated["overall"].get("candidate", {})) | set(evaluated["overall"].get("baseline", {})))
    def shown(side: str, metric: str) -> Any:
        value = evaluated["overall"].get(side, {}).get(metric, "–")
        return int(value) if metric == "example_count" and isinstance(value, float) else value

    overall = [[m, shown("candidate", m), shown("baseline", m)] for m in metrics]
    slices = [[name, int(e["candidate"].get("example_count", 0)), e["candidate"].get("auc", "–"),
               e["baseline"].get("auc", "–")] for name, e in evaluated["slices"].items()]
    contract = [[r["feature"], r["kind"], r["dtype"], "yes" if r["required"] else "no", r["domain"]]
                for r in card["data_contract"]]
    rows = ", ".join(f"{split} {count}" for split, count in data.get("rows", {}).items())
    sections = [
        ("model", "Model", _table([], [
            ["name", model["name"]], ["version", model["version"]], ["pushed", model["pushed_at"]],
            ["label", f"{model['label']}: {model['label_meaning']}"], ["stack", model["stack"]],
            ["code version", model["code_version"]], ["saved_model.pb sha256", model["saved_model_sha256"]]])),
        ("data", "Training data", _table([], [
            ["spans", ", ".join(map(str, data.get("spans", [])))], ["files", len(data.get("files", []))],
            ["rows", rows], ["trips", f"{data.get('first_trip')} to {data.get('last_trip')}"]])),
        ("evaluation", "Evaluation", _table(["metric", "this model", "the served model, same data"], overall)
         + "<p>Blessed when: " + html.escape("; ".join(evaluated["thresholds"]) or "–") + "</p>"
         + _table(["slice", "eval examples", "AUC", "served model's AUC"], slices)),
        ("serving", "Serving check", f"<p>{html.escape(card['serving_check'] or '–')}</p>"),
        ("contract", "Data contract", _table(["feature", "kind", "type", "required", "domain"], contract)),
        ("limitations", "Limitations",
         "<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in card["limitations"]) + "</ul>"),
    ]
    body = "".join(f'<section id="{key}"><h2>{title}</h2>{content}</section>' for key, title, content in sections)
    style = ("body{font:14px/1.45 system-ui,sans-serif;color:#1f2328;max-width:1000px;margin:0 auto;"
             "padding:16px 24px}table{border-collapse:collapse;width:100%;font-size:13px}"
             "th,td{text-align:left;padding:3px 8px;border-bottom:1px solid #eaeef2}th{background:#f6f8fa}"
             "section{border:1px solid #d0d7de;border-radius:6px;padding:8px 16px;margin-top:12px}")
    title = f"Model card: {model['name']} version {model['version']}"
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>{body}</body></html>\n")


def write(folder: str, card: Dict[str, Any]) -> None:
    """Writes the card's JSON and HTML into `<folder>/assets.extra/`."""
    target = os.path.join(folder, CARD_DIR)
    tf.io.gfile.makedirs(target)
    with tf.io.gfile.GFile(os.path.join(target, JSON_FILE), "w") as handle:
        handle.write(json.dumps(card, indent=1))
    with tf.io.gfile.GFile(os.path.join(target, HTML_FILE), "w") as handle:
        handle.write(render_html(card))


def read(version_folder: str) -> Optional[Dict[str, Any]]:
    """The card a push wrote into a version folder, or None when it has none."""
    path = os.path.join(version_folder, CARD_DIR, JSON_FILE)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as handle:
        return json.loads(handle.read())
