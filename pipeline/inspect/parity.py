"""Two runs of the pipeline on the same data, compared artifact by artifact: every
decision must be the same, every number within `TOLERANCES`.

Used to hold the local run (with its speed-ups) to the compiled pipeline's tasks, which
run the libraries as they are: `benchmarks/speedups_parity.py` compares the two at a
million rows (docs/speedups-parity.md), tests/test_orchestrators.py on the test data.

Numbers may differ at all because TFDV, TFMA and tfx_bsl combine partial results in the
order the examples were batched, and the speed-ups batch them otherwise (records a file
at a time, 4,096 to a batch, where Beam's source starts with batches of one): a float
sum then differs in its last bits, and a merge of quantile sketches or a top-k cut at a
tie can differ in the values it keeps. Decisions (the gate's verdict, the anomalies, the
blessing, the pushed outcome) and every text are compared for equality; a feature listed
in another order is the same feature (each statistic is named by its feature's path).
"""

from __future__ import annotations

import dataclasses
import glob
import json
import math
import os
import re
from typing import Dict, List, Sequence, Tuple

from google.protobuf import descriptor, message, text_format
from tensorflow_metadata.proto.v0 import schema_pb2, statistics_pb2
from tfx.types import standard_component_specs

from components.custom import gate, span_statistics
from components.custom.recorded import NodeId
from pipeline import config
from pipeline.inspect import run_details, run_report


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """|a - b| <= absolute + relative * max(|a|, |b|) + of_scale * scale, where a number's
    scale is what its error is relative to (`RunNumbers.scales`)."""

    relative: float
    absolute: float
    of_scale: float = 0.0

    def allowed(self, a: float, b: float, scale: float = 0.0) -> float:
        """How far apart a and b may be."""
        return self.absolute + self.relative * max(abs(a), abs(b)) + self.of_scale * scale

    def holds(self, a: float, b: float, scale: float = 0.0) -> bool:
        if math.isnan(a) or math.isnan(b):  # undefined in both (a slice without positives) is the same
            return math.isnan(a) and math.isnan(b)
        return abs(a - b) <= self.allowed(a, b, scale)

    def __str__(self) -> str:
        parts = [f"{self.relative:g} relative"] if self.relative else []
        parts += [f"{self.absolute:g}"] if self.absolute else []
        parts += [f"{self.of_scale:g} of the scale"] if self.of_scale else []
        return " + ".join(parts)


# TFDV's quantile sketch answers each quantile within this fraction of the rows (its
# StatsOptions' default epsilon, which the pipeline keeps).
SKETCH_EPSILON = 0.01


# Measured at a million rows (docs/speedups-parity.md) with a margin; the kinds are
# RunNumbers' keys.
TOLERANCES: Dict[str, Tolerance] = {
    # Every number of StatisticsGen's and the data gate's feature statistics but those
    # below: counts, means and deviations (float sums), top values, ranks.
    "statistics": Tolerance(relative=1e-9, absolute=1e-9),
    # The numbers TFDV reads off its quantile sketch, whose merges follow the batches: the
    # quantile histograms' boundaries and counts, the equi-width histograms' counts, the
    # median. Two sketches each within epsilon of the true ranks are within 2 epsilon of
    # each other: of the feature's rows for a count, of its range (max - min) for a value.
    "sketches": Tolerance(relative=0.0, absolute=1e-9, of_scale=2 * SKETCH_EPSILON),
    # The data gate's drift distances (Jensen-Shannon divergence, L-infinity), from those
    # statistics' histograms.
    "drift": Tolerance(relative=1e-6, absolute=1e-9),
    # Every metric of every slice, the candidate's and the baseline's.
    "metrics": Tolerance(relative=1e-6, absolute=1e-9),
    # The pushed model's `serving_default` probability for each example given.
    "scores": Tolerance(relative=0.0, absolute=1e-6),
}


@dataclasses.dataclass
class RunNumbers:
    """What one run decided (texts that must be equal) and measured (numbers by kind),
    with the scale of each number whose tolerance is relative to one."""

    decisions: Dict[str, str]
    numbers: Dict[str, Dict[str, float]]
    scales: Dict[str, float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class KindSummary:
    kind: str
    compared: int
    equal: int
    max_absolute: float
    max_relative: float
    worst: str  # the number that uses the largest share of its tolerance
    largest_share: float  # that share: above 1 is outside
    outside: List[str]


@dataclasses.dataclass
class Comparison:
    decisions: List[Tuple[str, str, str]]  # name, first run's, second run's: the ones that differ
    kinds: List[KindSummary]
    missing: List[str]  # numbers one run has and the other has not

    @property
    def same(self) -> bool:
        return not self.decisions and not self.missing and not any(k.outside for k in self.kinds)

    def problems(self) -> List[str]:
        lines = [f"{name}: {a!r} against {b!r}" for name, a, b in self.decisions]
        lines += [f"only in one run: {name}" for name in self.missing]
        for kind in self.kinds:
            lines += [f"{kind.kind} outside {TOLERANCES[kind.kind]}: {name}" for name in kind.outside]
        return lines


def schema_in_name_order(path: str) -> str:
    """A schema's text with its features and string domains in name order: a schema-less
    StatisticsGen lists features in the order its statistics first met them, which follows
    how the examples were batched."""
    with open(path) as handle:
        schema = text_format.Parse(handle.read(), schema_pb2.Schema())
    for field in ("feature", "string_domain"):
        items = [type(item).FromString(item.SerializeToString())
                 for item in sorted(getattr(schema, field), key=lambda item: item.name)]
        del getattr(schema, field)[:]
        getattr(schema, field).extend(items)
    return text_format.MessageToString(schema)


def inferred_schema(output_root: str) -> str:
    """The schema InferredSchemaGen wrote under `output_root`, in name order ("" if none)."""
    found = glob.glob(os.path.join(output_root, "pipeline_root", "InferredSchemaGen", "schema", "*", "schema.pbtxt"))
    return schema_in_name_order(found[0]) if found else ""


def _item_key(item: message.Message, index: int) -> str:
    """A repeated message's name in a flattened path: what identifies it (a feature's
    path, a dataset's or histogram's name, a top value, a rank bucket's label), else its
    position."""
    fields = item.DESCRIPTOR.fields_by_name
    if "path" in fields and item.HasField("path"):
        return ".".join(item.path.step)
    for name in ("name", "label", "value"):
        if name in fields and fields[name].type in (descriptor.FieldDescriptor.TYPE_STRING,
                                                    descriptor.FieldDescriptor.TYPE_BYTES):
            value = getattr(item, name)
            if value:
                return value.decode(errors="replace") if isinstance(value, bytes) else value
    if "type" in fields and fields["type"].enum_type is not None:
        return fields["type"].enum_type.values_by_number[item.type].name
    return str(index)


def flatten(found: message.Message, prefix: str, numbers: Dict[str, float], texts: Dict[str, str]) -> None:
    """Every number and text of a message, named by its path of fields: zeros too (a proto3
    zero is not set, and one run's 0.0 against another's 1e-17 is a difference, not a
    number only one run has); messages and oneof members only when set."""
    for field in found.DESCRIPTOR.fields:
        name = f"{prefix}.{field.name}"
        repeated = field.label == descriptor.FieldDescriptor.LABEL_REPEATED
        oneof = field.containing_oneof
        if not repeated and ((field.type == descriptor.FieldDescriptor.TYPE_MESSAGE and not found.HasField(field.name))
                             or (oneof is not None and found.WhichOneof(oneof.name) != field.name)):
            continue
        value = getattr(found, field.name)
        if field.type == descriptor.FieldDescriptor.TYPE_MESSAGE:
            items = list(value) if repeated else [value]
            for index, item in enumerate(items):
                flatten(item, f"{name}[{_item_key(item, index)}]" if repeated else name, numbers, texts)
        elif field.type in (descriptor.FieldDescriptor.TYPE_STRING, descriptor.FieldDescriptor.TYPE_BYTES,
                            descriptor.FieldDescriptor.TYPE_ENUM, descriptor.FieldDescriptor.TYPE_BOOL):
            texts[name] = str(list(value) if repeated else value)
        elif repeated:
            numbers.update({f"{name}[{index}]": float(item) for index, item in enumerate(value)})
        else:
            numbers[name] = float(value)


def _statistics(uri: str, label: str, numbers: Dict[str, float], texts: Dict[str, str]) -> None:
    for path in sorted(glob.glob(os.path.join(uri, "**", f"*{span_statistics.STATS_FILE}"), recursive=True)):
        with open(path, "rb") as handle:
            found = statistics_pb2.DatasetFeatureStatisticsList.FromString(handle.read())
        flatten(found, f"{label}/{os.path.relpath(path, uri)}", numbers, texts)


_SKETCHED = re.compile(r"^(?P<stats>.*\.num_stats\.)(?:median$|histograms\[QUANTILES\]\.buckets\[|"
                       r"histograms\[STANDARD\]\.buckets\[\d+\]\.sample_count$)")


def split_sketches(statistics: Dict[str, float]) -> Tuple[Dict[str, float], Dict[str, float], Dict[str, float]]:
    """The statistics read off TFDV's quantile sketch, apart from the others, and the scale
    of each: the feature's rows for a count, its range for a value."""
    exact, sketched, scales = {}, {}, {}
    for name, value in statistics.items():
        match = _SKETCHED.match(name)
        if not match:
            exact[name] = value
            continue
        sketched[name] = value
        stats = match.group("stats")
        if name.endswith("sample_count"):
            scales[name] = statistics.get(f"{stats}common_stats.num_non_missing", 0.0)
        else:
            scales[name] = statistics.get(f"{stats}max", 0.0) - statistics.get(f"{stats}min", 0.0)
    return exact, sketched, scales


def scores(model_dir: str, examples: Sequence[bytes]) -> Dict[str, float]:
    """The model's `serving_default` probability of each serialized example."""
    import tensorflow as tf

    serve = tf.saved_model.load(model_dir).signatures["serving_default"]
    found = serve(examples=tf.constant(list(examples)))["probability"].numpy().reshape(-1)
    return {f"example {index}": float(value) for index, value in enumerate(found)}


def read(output_root: str, examples: Sequence[bytes] = ()) -> RunNumbers:
    """The last finished run under `output_root` (its SQLite store and run record), with
    the scores its pushed model gives `examples`."""
    with open(os.path.join(output_root, config.LAST_RUN_FILE)) as handle:
        run_id = json.load(handle)["report"]["run_id"]
    metadata = config.RunConfig(output_root=output_root).metadata
    details = run_details.read(metadata, config.PIPELINE_NAME, run_id)
    records = run_report.run_records(run_report.connect(metadata), config.PIPELINE_NAME, run_id)
    report = details.report
    decisions = {
        "outcome": report.outcome.value,
        "spans": str(report.spans),
        "anomalies": str(report.anomalies),
        "span checks": json.dumps(report.span_checks, sort_keys=True),
        "blessed": str(details.blessed),
        "validation failures": str(details.validation_failures),
        "drift over its threshold": str(sorted(m.feature for m in details.drift if m.over)),
        "pushed": str(details.pushed_version is not None),
    }
    decisions["inferred schema"] = inferred_schema(output_root)
    statistics: Dict[str, float] = {}
    for node, key in ((NodeId.STATISTICS_GEN, standard_component_specs.STATISTICS_KEY),
                      (NodeId.DATA_GATE, gate.VERDICT_KEY)):
        artifact = records.output(node, key)
        if artifact is not None:
            texts: Dict[str, str] = {}
            _statistics(artifact.uri, node, statistics, texts)
            decisions.update({f"text {name}": value for name, value in texts.items()})
    drift_distances = {f"{m.feature} {m.measure}": m.value for m in details.drift}
    metrics = {f"{which} {s.slice} {name}": value
               for s in details.slices
               for which, values in (("candidate", s.candidate), ("baseline", s.baseline))
               for name, value in values.items()}
    pushed = report.pushed_version_dir
    scored = scores(pushed, examples) if examples and pushed else {}
    exact, sketched, scales = split_sketches(statistics)
    return RunNumbers(decisions, {"statistics": exact, "sketches": sketched, "drift": drift_distances,
                                  "metrics": metrics, "scores": scored}, scales)


def _difference(a: float, b: float) -> float:
    """|a - b|, with NaN the same as NaN and infinitely far from any number."""
    if math.isnan(a) or math.isnan(b):
        return 0.0 if math.isnan(a) and math.isnan(b) else math.inf
    return abs(a - b)


def _relative(a: float, b: float) -> float:
    scale = max(abs(a), abs(b))
    return _difference(a, b) / scale if scale else _difference(a, b)


def _share(tolerance: Tolerance, a: float, b: float, scale: float) -> float:
    """The share of its tolerance a difference uses: above 1 is outside."""
    return _difference(a, b) / max(tolerance.allowed(a, b, scale), 1e-300)


def _summary(kind: str, first: RunNumbers, second: RunNumbers) -> KindSummary:
    tolerance = TOLERANCES[kind]
    a, b = first.numbers.get(kind, {}), second.numbers.get(kind, {})
    shared = sorted(set(a) & set(b))
    # The smaller run's scale: the stricter.
    scales = {n: min(first.scales.get(n, 0.0), second.scales.get(n, 0.0)) for n in shared}
    shares = {n: _share(tolerance, a[n], b[n], scales[n]) for n in shared}
    worst = max(shared, key=lambda n: shares[n], default="")
    return KindSummary(
        kind=kind, compared=len(shared), equal=sum(_difference(a[n], b[n]) == 0.0 for n in shared),
        max_absolute=max((_difference(a[n], b[n]) for n in shared), default=0.0),
        max_relative=max((_relative(a[n], b[n]) for n in shared), default=0.0),
        worst=f"{worst}: {a[worst]!r} against {b[worst]!r}" if worst else "",
        largest_share=shares[worst] if worst else 0.0,
        outside=[f"{n}: {a[n]!r} against {b[n]!r}" for n in shared if not tolerance.holds(a[n], b[n], scales[n])])


def compare(first: RunNumbers, second: RunNumbers) -> Comparison:
    decisions = [(name, first.decisions.get(name, "(none)"), second.decisions.get(name, "(none)"))
                 for name in sorted(set(first.decisions) | set(second.decisions))
                 if first.decisions.get(name) != second.decisions.get(name)]
    missing = [f"{kind} {name}" for kind in TOLERANCES
               for name in sorted(set(first.numbers.get(kind, {})) ^ set(second.numbers.get(kind, {})))]
    return Comparison(decisions, [_summary(kind, first, second) for kind in TOLERANCES], missing)
