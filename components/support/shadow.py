"""The shadow check's measures: the candidate and the serving model score the same newest
logged requests, and two numbers say how far apart they are.

- **flip rate**: the share of requests whose class flips at the serving threshold
  (`DECISION_THRESHOLD`): what the switch would change for the people behind the traffic;
- **score shift**: the Kolmogorov-Smirnov distance between the two models' score
  distributions, the largest gap between their cumulative distributions. It needs no
  bins, is bounded in [0, 1] whatever the scores' shape, and catches a shift of a part of
  the traffic that leaves the classes as they were (a recalibration, a slice moved below
  the threshold on both sides). docs/data-quality.md gives the thresholds and how they
  were measured.

The traffic is read as `monitor` reads it (`components.support.request_logs`: every
format, told from each file's first record), newest files first, up to a bounded sample.
It is not judged when more of the records read than `max_malformed` are malformed, or
when a request carries a feature of another type than the model reads (the model would
refuse the whole batch): `Sample.problem` says which.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

# Bins of the score histograms the run page draws side by side.
HISTOGRAM_BINS = 20


@dataclasses.dataclass
class Sample:
    """The newest requests of the traffic, serialized, and what reading them found."""

    examples: List[bytes]
    read: int = 0
    malformed: int = 0
    files: int = 0
    # Why the traffic is not judged, "" when it is.
    problem: str = ""


@dataclasses.dataclass(frozen=True)
class Measures:
    requests: int
    flip_rate: float
    score_shift: float
    candidate_histogram: List[int]
    serving_histogram: List[int]

    def to_json(self) -> Dict[str, object]:
        return dataclasses.asdict(self)


def judged(measures: Measures, max_flip_rate: float, max_score_shift: float, against: str) -> Tuple[str, bool]:
    """What the shadow check says of `measures` on `against` (the requests and the serving
    version), and whether it refuses the candidate: each threshold exceeded is named."""
    over = [f"{name} {value:.3f} over its threshold {limit}"
            for name, value, limit in (("flip rate", measures.flip_rate, max_flip_rate),
                                       ("score shift", measures.score_shift, max_score_shift)) if value > limit]
    if over:
        return f"{' and '.join(over)} on {against}", True
    return (f"passed: flip rate {measures.flip_rate:.3f} (threshold {max_flip_rate}), score shift "
            f"{measures.score_shift:.3f} (threshold {max_score_shift}) on {against}"), False


def ks_distance(a: Sequence[float], b: Sequence[float]) -> float:
    """The largest gap between the empirical cumulative distributions of `a` and `b`."""
    a, b = np.sort(np.asarray(a, dtype=float)), np.sort(np.asarray(b, dtype=float))
    grid = np.concatenate([a, b])
    gaps = np.searchsorted(a, grid, side="right") / len(a) - np.searchsorted(b, grid, side="right") / len(b)
    return float(np.max(np.abs(gaps)))


def measure(candidate: Sequence[float], serving: Sequence[float], threshold: float) -> Measures:
    """The measures of two models' scores of the same requests, in the same order."""
    candidate, serving = np.asarray(candidate, dtype=float), np.asarray(serving, dtype=float)
    if candidate.shape != serving.shape or not len(candidate):
        raise ValueError(f"two equal, non-empty sets of scores are needed, got {len(candidate)} and {len(serving)}")
    edges = np.linspace(0.0, 1.0, HISTOGRAM_BINS + 1)
    return Measures(
        requests=len(candidate),
        flip_rate=float(np.mean((candidate >= threshold) != (serving >= threshold))),
        score_shift=ks_distance(candidate, serving),
        candidate_histogram=np.histogram(np.clip(candidate, 0, 1), edges)[0].tolist(),
        serving_histogram=np.histogram(np.clip(serving, 0, 1), edges)[0].tolist(),
    )


def mistyped_feature(record: bytes) -> Optional[str]:
    """The first of the model's features `record` carries as another type than the model
    reads ("fare as bytes, where the model reads float"), None when there is none."""
    import tensorflow as tf

    from components.model import features

    kinds = {tf.float32: "float_list", tf.int64: "int64_list", tf.string: "bytes_list"}
    names = {"float_list": "float", "int64_list": "int", "bytes_list": "bytes"}
    example = tf.train.Example.FromString(record)
    for feature in features.FEATURES:
        if feature.name not in example.features.feature:
            continue
        sent = example.features.feature[feature.name].WhichOneof("kind")
        if sent is not None and sent != kinds[feature.dtype]:
            return f"{feature.name} as {names[sent]}, where the model reads {names[kinds[feature.dtype]]}"
    return None


def newest_first(paths: Sequence[str]) -> List[str]:
    """The files, the most recently written first (then by name, newest name first)."""
    import tensorflow as tf

    return sorted(paths, key=lambda path: (tf.io.gfile.stat(path).mtime_nsec, path), reverse=True)


def sample(pattern: str, size: int, max_malformed: float) -> Sample:
    """Up to `size` of the newest requests matching `pattern` (local or gs://): each file's
    last ones, newest file first."""
    import tensorflow as tf

    from components.support import request_logs

    paths = newest_first(tf.io.gfile.glob(pattern))
    found = Sample(examples=[])
    if not paths:
        found.problem = f"no files match {pattern}"
        return found
    for path in paths:
        if len(found.examples) >= size:
            break
        found.files += 1
        items = list(request_logs.read(path, request_logs.detect(path)))
        found.read += len(items)
        taken = []
        for item in reversed(items):
            if isinstance(item, request_logs.Malformed):
                found.malformed += 1
                continue
            if len(found.examples) + len(taken) < size:
                taken.append(item[1])
        found.examples.extend(taken)
    if found.read and found.malformed > max_malformed * found.read:
        found.problem = (f"{found.malformed} of the {found.read} records read are malformed, more than "
                         f"{max_malformed:.0%}")
        return found
    for record in found.examples:
        mistyped = mistyped_feature(record)
        if mistyped:
            found.problem = f"a request carries {mistyped}"
            return found
    if not found.examples:
        found.problem = f"the files matching {pattern} hold no requests"
    return found


def score(model_dir: str, examples: Sequence[bytes], batch: int = 512) -> np.ndarray:
    """The probability the model in `model_dir` (a SavedModel) gives each request."""
    import tensorflow as tf

    from components.model.trainer.settings import EXAMPLES_INPUT, PROBABILITY_KEY, SERVING_SIGNATURE

    signature = tf.saved_model.load(model_dir).signatures[SERVING_SIGNATURE]
    found = [signature(**{EXAMPLES_INPUT: tf.constant(list(examples[start:start + batch]))})[PROBABILITY_KEY]
             .numpy().reshape(-1) for start in range(0, len(examples), batch)]
    return np.concatenate(found)
