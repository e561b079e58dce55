"""The serving check's probe (`components.custom.serving_check`), run in a fresh process:

    python -m components.support.serving_probe MODEL_DIR BUDGET_MS

loads the SavedModel as TF Serving does (the `serve` tag, a session, signatures run by
their SignatureDef tensor names), replays its warmup requests, times single-example
requests, and prints its findings as one line of JSON. It imports TensorFlow and TF
Serving's protos only: nothing of TFX or of the pipeline's process.

    python -m components.support.serving_probe --wait

is the same probe started ahead of its model: it imports TensorFlow, then reads from its
standard input one line, `{"model_dir": MODEL_DIR}`, loads that model and replays its
warmup requests, then a second line, `{"budget_ms": BUDGET_MS}`, and times its requests.
The two lines may come apart: a run hands the model over as soon as the Trainer wrote it,
so that loading and replaying happen beside the Evaluator, and the budget when the check
runs, so that the requests are timed with the machine as quiet as a check alone finds
it. It ends without a word when its input closes first (its parent ended or had no
model to check). A model that loads but fails a check of the replay is answered at
once; one that does not load ends the probe with an error, and the check starts a
fresh probe, which names it.
"""

import json
import os
import sys
import time
from typing import Dict, List, Optional, Union

from components.model.trainer.settings import EXAMPLES_INPUT, PROBABILITY_KEY, SERVING_SIGNATURE, WARMUP_FILE

# The p99 latency budget of one single-example request, in milliseconds. Measured on a
# 2-core machine, three runs on each stack: p50 0.7-1.1 ms and p99 1.3-2.2 ms idle, p99
# up to 7 ms with the test suite running beside it (docs/operations.md). 50 ms leaves room
# for a busy or smaller serving host and still stops a model twenty times slower.
DEFAULT_BUDGET_MS = 50.0
# Single-example requests timed; the first few warm the session and are not counted.
TIMED_REQUESTS = 200
WARM_UP_REQUESTS = 20
# Passes over those requests: each request's latency is its fastest pass. Other processes
# taking the host's cores hold up a few requests of any one pass (a pass's p99 of 60-68 ms
# against a p50 of 1.3-1.7 ms, seen beside two training runs and an image build), and
# seldom the same request in every pass; a model slow by itself is slow in every pass.
PASSES = 3
# The argument of a probe started ahead of its model (see the module doc).
WAIT_FLAG = "--wait"
# The fields of the lines a probe started ahead reads.
MODEL_FIELD, BUDGET_FIELD = "model_dir", "budget_ms"


class Loaded:
    """A model loaded as TF Serving loads it, its warmup requests replayed: what the timed
    requests run on (`time_requests`). `close` ends its session."""

    def __init__(self, session, fetch: str, feed: str, singles: List[bytes], replayed: int):
        self.session, self.fetch, self.feed, self.singles, self.replayed = session, fetch, feed, singles, replayed

    def close(self) -> None:
        self.session.close()


def load_and_warm(model_dir: str) -> Union[Loaded, Dict[str, object]]:
    """Loads the model and replays its warmup requests, checking each answer: the loaded
    model, or the findings of what failed."""
    import numpy as np
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    session = tf.compat.v1.Session(graph=tf.Graph())
    loaded = None
    try:
        with session.graph.as_default():
            meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], model_dir)
        if SERVING_SIGNATURE not in meta_graph.signature_def:
            return {"ok": False, "reason": f"the model has no {SERVING_SIGNATURE!r} signature "
                                           f"(it has {sorted(meta_graph.signature_def)})"}
        signature = meta_graph.signature_def[SERVING_SIGNATURE]
        if PROBABILITY_KEY not in signature.outputs:
            return {"ok": False, "reason": f"{SERVING_SIGNATURE!r} has no {PROBABILITY_KEY!r} output"}

        def run(signature_def, inputs: Dict[str, object]) -> Dict[str, np.ndarray]:
            feeds = {signature_def.inputs[key].name: value for key, value in inputs.items()}
            names = {key: tensor.name for key, tensor in signature_def.outputs.items()}
            return dict(zip(names, session.run(list(names.values()), feed_dict=feeds)))

        warmup_path = os.path.join(model_dir, WARMUP_FILE)
        if not tf.io.gfile.exists(warmup_path):
            return {"ok": False, "reason": f"the model has no warmup requests ({WARMUP_FILE})"}
        singles: List[bytes] = []
        replayed = 0
        for record in tf.compat.v1.io.tf_record_iterator(warmup_path):
            request = prediction_log_pb2.PredictionLog.FromString(record).predict_log.request
            name = request.model_spec.signature_name or SERVING_SIGNATURE
            if name not in meta_graph.signature_def:
                return {"ok": False, "reason": f"warmup request {replayed + 1} asks for signature {name!r}, "
                                               "which the model does not have"}
            inputs = {key: tf.make_ndarray(proto) for key, proto in request.inputs.items()}
            outputs = run(meta_graph.signature_def[name], inputs)
            examples = len(next(iter(inputs.values())))
            probability = np.asarray(outputs.get(PROBABILITY_KEY, []), dtype=np.float64).reshape(-1)
            if probability.size != examples or not np.all(np.isfinite(probability)) or not np.all(
                (probability >= 0) & (probability <= 1)
            ):
                return {"ok": False, "reason": f"warmup request {replayed + 1} ({examples} example(s)) got "
                                               f"{probability.tolist()[:5]} as probabilities: not one finite "
                                               "probability in [0, 1] per example"}
            singles += [bytes(value) for value in inputs.get(EXAMPLES_INPUT, [])]
            replayed += 1
        if not singles:
            return {"ok": False, "reason": "no warmup request holds an example to time"}
        fetch, feed = signature.outputs[PROBABILITY_KEY].name, signature.inputs[EXAMPLES_INPUT].name
        failed = _prepare_timed_requests(session, fetch, feed, singles[0])
        if failed:
            return {"ok": False, "reason": failed}
        loaded = Loaded(session, fetch, feed, singles, replayed)
        return loaded
    finally:
        if loaded is None:
            session.close()


def _prepare_timed_requests(session, fetch: str, feed: str, single: bytes) -> str:
    """One request of the timed requests' feed and fetch; what failed, "" if nothing.

    The session prunes and optimizes its graph for each new set of feeds and fetches, at
    the first request that asks for it: for the timed requests' set, about 0.2 s. Made
    with the loading (ahead of the check when the model is handed over early), not on the
    check's path; that request was never timed."""
    import tensorflow as tf

    try:
        session.run(fetch, feed_dict={feed: [single]})
    except tf.errors.OpError as err:
        first_line = err.message.splitlines()[0] if err.message else type(err).__name__
        return f"a single-example request of {SERVING_SIGNATURE!r} failed: {first_line}"
    return ""


def time_requests(loaded: Loaded, budget_ms: float, timed: int = TIMED_REQUESTS) -> Dict[str, object]:
    """Times `timed` single-example requests of `serving_default` in `PASSES` passes, each
    request's latency its fastest pass, against `budget_ms` (p99): the findings `ok`,
    `reason`, `requests`, `p50_ms`, `p99_ms`, `slowest_pass_p99_ms`."""
    import numpy as np

    passes = np.zeros((PASSES, timed))
    for row in passes:
        for index in range(WARM_UP_REQUESTS + timed):
            started = time.perf_counter()
            loaded.session.run(loaded.fetch, feed_dict={loaded.feed: [loaded.singles[index % len(loaded.singles)]]})
            if index >= WARM_UP_REQUESTS:
                row[index - WARM_UP_REQUESTS] = time.perf_counter() - started
    fastest = passes.min(axis=0) * 1000
    p50, p99 = (float(np.percentile(fastest, q)) for q in (50, 99))
    replayed = loaded.replayed
    findings = {"ok": p99 <= budget_ms, "requests": replayed, "p50_ms": p50, "p99_ms": p99, "budget_ms": budget_ms,
                "slowest_pass_p99_ms": float(np.percentile(passes, 99, axis=1).max() * 1000)}
    findings["reason"] = (
        f"{replayed} warmup request(s) answered with probabilities; p99 of {timed} single-example requests "
        f"{p99:.2f} ms (p50 {p50:.2f} ms; each request's fastest of {PASSES} passes), budget {budget_ms:g} ms"
    )
    if not findings["ok"]:
        findings["reason"] = f"too slow: {findings['reason']}"
    return findings


def check_model(model_dir: str, budget_ms: float, timed: int = TIMED_REQUESTS) -> Dict[str, object]:
    """The whole check in this process: call it in a fresh one (`main`)."""
    loaded = load_and_warm(model_dir)
    if not isinstance(loaded, Loaded):
        return loaded
    try:
        return time_requests(loaded, budget_ms, timed)
    finally:
        loaded.close()


def _waiting() -> Optional[Dict[str, object]]:
    """The probe started ahead (`--wait`): the model's line, then the budget's; None when
    the input closes before either."""
    import tensorflow  # noqa: F401  (what a check spends most of its time on)
    from tensorflow_serving.apis import prediction_log_pb2  # noqa: F401

    line = sys.stdin.readline()
    if not line.strip():
        return None
    loaded = load_and_warm(json.loads(line)[MODEL_FIELD])
    if not isinstance(loaded, Loaded):
        return loaded
    line = sys.stdin.readline()
    if not line.strip():
        return None
    return time_requests(loaded, float(json.loads(line)[BUDGET_FIELD]))


def main(argv: List[str]) -> int:
    """`python -m components.support.serving_probe MODEL_DIR BUDGET_MS`: the findings as
    JSON; with `--wait` instead, the model and budget come later, on standard input.

    The process ends with `os._exit` once its answer is out: tearing down an interpreter
    with TensorFlow loaded takes longer than the check (0.7 s)."""
    findings = _waiting() if argv == [WAIT_FLAG] else check_model(argv[0], float(argv[1]))
    if findings is not None:
        print(json.dumps(findings))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
