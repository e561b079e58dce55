"""Measures the training-serving skew that clean traffic shows, to set the curated
schema's `skew_comparator` thresholds (docs/data-quality.md).

A model `retrain` pushes after span k was trained on the window's training spans k-3..k-1
and then serves span k+1's trips. For every such k in data/, this computes TFDV's skew
distance of each feature between the two, with `monitor`'s own statistics and comparison
(`pipeline.ops.monitor`), and prints the largest per feature with the threshold it
suggests (1.3x the largest, as for the drift thresholds). It also measures the same
traffic cut to 200 and 1,000 requests, since a small sample of clean traffic is noisier, and
suggests 1.3x the largest distance of all, rounded up to the hundredth (the drift
thresholds' rule).

    python benchmarks/skew_thresholds.py [--data-root data] [--json docs/skew.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import tempfile

import tensorflow as tf
import tensorflow_data_validation as tfdv

from components.model import features
from components.support import spans
from pipeline import config
from pipeline.ops import monitor, request_logs

TRAIN_SPANS = 3
MARGIN = 1.3
SAMPLE_SIZES = (200, 1000)


def _measuring_schema():
    """The curated schema with a skew comparator of threshold 0 on every model feature, so
    that every distance is reported."""
    schema = tfdv.load_schema_text(config.schema_file())
    for feature in schema.feature:
        if feature.name not in features.FEATURES_BY_NAME:
            continue
        feature.ClearField("skew_comparator")
        if features.FEATURES_BY_NAME[feature.name].dtype == tf.string:
            feature.skew_comparator.infinity_norm.threshold = 0.0
        else:
            feature.skew_comparator.jensen_shannon_divergence.threshold = 0.0
    return schema


def _sample(files, size: int, out: str) -> str:
    records = [r.numpy() for f in files for r in tf.data.TFRecordDataset(f, "GZIP")]
    random.Random(size).shuffle(records)
    with tf.io.TFRecordWriter(out) as writer:
        for record in records[:size]:
            writer.write(record)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--json", default="", help="also write the measurements here")
    args = parser.parse_args()
    found = {span.number: [path for path, _ in span.files] for span in spans.list_spans(args.data_root)}
    numbers = sorted(found)
    pairs = [(k, numbers[i - TRAIN_SPANS:i], numbers[i + 1]) for i, k in enumerate(numbers)
             if i >= TRAIN_SPANS and i + 1 < len(numbers)]
    work = tempfile.mkdtemp(prefix="skew-")
    groups = {f"train{k}": [(f, request_logs.EXAMPLES) for s in train for f in found[s]] for k, train, _ in pairs}
    for k, _, served in pairs:
        groups[f"served{k}"] = [(f, request_logs.EXAMPLES) for f in found[served]]
        for size in SAMPLE_SIZES:
            groups[f"served{k}n{size}"] = [(_sample(found[served], size, os.path.join(work, f"{k}-{size}.tfr")),
                                            request_logs.EXAMPLES)]
    schema = _measuring_schema()
    monitor.compute_statistics(groups, schema, work, ())
    stats = {name: tfdv.load_stats_binary(os.path.join(work, f"{name}-{monitor.STATS}")) for name in groups}
    largest, by_size = {}, {size: {} for size in SAMPLE_SIZES}
    rows = []
    for k, train, served in pairs:
        for suffix, table in [("", largest)] + [(f"n{size}", by_size[size]) for size in SAMPLE_SIZES]:
            measures, _ = monitor.compare(stats[f"served{k}{suffix}"], stats[f"train{k}"], schema)
            for m in measures:
                table[m.feature] = max(table.get(m.feature, (0.0, ""))[0], m.value), m.measure
                rows.append({"pushed_after_span": k, "trained_on": train, "served": served,
                             "requests": suffix or "all", "feature": m.feature, "measure": m.measure,
                             "distance": round(m.value, 4)})
    print(f"{len(pairs)} pushes: trained on {TRAIN_SPANS} spans, served the next span after the eval span")
    print(f"{'feature':24} {'measure':28} {'max (span)':>10} " + " ".join(f"{'max n=' + str(s):>10}" for s in
                                                                       SAMPLE_SIZES) + f" {'threshold':>10}")
    for feature, (value, measure) in sorted(largest.items()):
        small = [by_size[s][feature][0] for s in SAMPLE_SIZES]
        threshold = min(1.0, math.ceil(MARGIN * max([value] + small) * 100) / 100)
        print(f"{feature:24} {measure:28} {value:10.3f} " + " ".join(f"{v:10.3f}" for v in small)
              + f" {threshold:10.2f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(rows, handle, indent=1)


if __name__ == "__main__":
    main()
