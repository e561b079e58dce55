"""Training-loop and serving speed, on the outputs of a finished `taxi-pipeline run`.

    python benchmarks/trainer_and_serving.py [--output-root tfx_pipeline_output]
        [--serving-dir serving_model] [--batch-size 256] [--epochs 3]

Training (same model, data and batch size; the Transform graph applied once, cached):
- the custom `tf.function` loop of `components.model.trainer.steps` (as `loop.train` runs it);
- Keras `model.fit` on the same datasets;
- the custom loop with `tf.config.run_functions_eagerly(True)` (one epoch).
Each is timed after a warm-up epoch, so tracing and the dataset cache are excluded;
the best of several rounds is reported.

Serving, through the pushed model's `serving_default` on serialized eval examples:
latency p50/p99 of one example, and throughput on batches of 1000; for scale, the p50
of an empty signature (the fixed cost of any call from Python on this machine).

Also printed: the trace count of each step and the eval AUC of the pushed model.

With `--profile`: where a batch of 1000's time goes inside `serving_default` (and the
baseline's), by op type, from TensorFlow's profiler trace of its calls.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import tempfile
import time
from typing import Callable, Dict, List, Sequence, Tuple

# isort: off
import components  # noqa: F401  (the Keras switch, before TensorFlow loads, see components.compat)
import numpy as np
import tensorflow as tf
import tensorflow_transform as tft
# isort: on

from components import compat
from components.compat import keras
from components.model import features
from components.model.trainer import data, export
from components.model.trainer import model as model_lib
from components.model.trainer import steps as steps_lib
from components.model.trainer.settings import TrainConfig


def _latest(pattern: str) -> str:
    """The numbered folder matching `pattern` with the highest number (a model folder also
    holds its record and TF Serving's files, which are not versions)."""
    numbered = [path for path in glob.glob(pattern) if os.path.basename(path.rstrip("/")).isdigit()]
    found = sorted(numbered, key=lambda path: int(os.path.basename(path.rstrip("/"))))
    if not found:
        raise SystemExit(f"nothing matches {pattern}; run `make run` first")
    return found[-1]


def _examples_per_second(run_epoch: Callable[[], int], epochs: int, rounds: int = 3) -> float:
    """Best of `rounds` timings of `epochs` epochs, after one warm-up epoch (tracing,
    dataset cache). The best round is the least disturbed by other work on the machine."""
    run_epoch()
    best = 0.0
    for _ in range(rounds):
        started, examples = time.perf_counter(), 0
        for _ in range(epochs):
            examples += run_epoch()
        best = max(best, examples / (time.perf_counter() - started))
    return best


def _custom_loop_epoch(steps: steps_lib.Steps, dataset: tf.data.Dataset) -> Callable[[], int]:
    """One epoch exactly as the Trainer runs it (`Steps.run_epoch`)."""
    return lambda: steps.run_epoch(dataset, True, tf.distribute.get_strategy())


def benchmark_training(pipeline_root: str, config: TrainConfig, epochs: int) -> Dict[str, float]:
    transform_dir = _latest(os.path.join(pipeline_root, "Transform", "transform_graph", "*"))
    examples_dir = _latest(os.path.join(pipeline_root, "ImportExampleGen", "examples", "*"))
    tf_transform_output = tft.TFTransformOutput(transform_dir)
    signature = data.input_signature(tf_transform_output.transformed_feature_spec())
    dataset = data.make_dataset(
        [os.path.join(examples_dir, "Split-train", "*")],
        data.transform_fn(tf_transform_output),
        config.batch_size,
        shuffle_seed=1,
    )
    results: Dict[str, float] = {}

    model = model_lib.build_model()
    steps = steps_lib.make_steps(
        model,
        steps_lib.make_optimizer(model, config),
        signature,
        jit_compile=config.jit_compile,
        steps_per_call=config.steps_per_call,
    )
    results["custom loop"] = _examples_per_second(_custom_loop_epoch(steps, dataset), epochs)
    results["traces train_step"] = steps.train_step.experimental_get_tracing_count()

    keras_model = model_lib.build_model()
    keras_model.compile(
        optimizer=compat.adam(config.learning_rate),
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
    )

    count = sum(int(labels.shape[0]) for _, labels in dataset)

    def fit_epoch() -> int:
        keras_model.fit(dataset, epochs=1, verbose=0)
        return count

    results["keras fit"] = _examples_per_second(fit_epoch, epochs)

    eager_model = model_lib.build_model()
    eager_steps = steps_lib.make_steps(
        eager_model, steps_lib.make_optimizer(eager_model, config), signature, steps_per_call=config.steps_per_call
    )
    tf.config.run_functions_eagerly(True)
    try:
        results["eager loop"] = _examples_per_second(_custom_loop_epoch(eager_steps, dataset), 1, rounds=2)
    finally:
        tf.config.run_functions_eagerly(False)
    return results


def _records(files: Sequence[str], limit: int) -> List[bytes]:
    """The first `limit` serialized records of GZIP TFRecord `files`."""
    return [record.numpy() for record in tf.data.TFRecordDataset(list(files), compression_type="GZIP").take(limit)]


def _eval_examples(pipeline_root: str, limit: int) -> Tuple[np.ndarray, List[bytes]]:
    """Labels and label-free serialized examples of the eval split."""
    examples_dir = _latest(os.path.join(pipeline_root, "ImportExampleGen", "examples", "*"))
    examples = _records(sorted(glob.glob(os.path.join(examples_dir, "Split-eval", "*"))), limit)
    labels = np.array([
        tf.train.Example.FromString(e).features.feature[features.LABEL_KEY].int64_list.value[0] for e in examples
    ])
    return labels, [export.strip_label(e) for e in examples]


class _EmptySignature(tf.Module):
    """Does no work: its latency is what any call of a signature costs from Python here."""

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def serve(self, examples: tf.Tensor) -> Dict[str, tf.Tensor]:
        return {"length": tf.strings.length(examples)}


def _latencies_ms(calls: List[Callable[[], object]], warmup: int = 50) -> np.ndarray:
    """Milliseconds each call takes, after `warmup` of them ran once untimed."""
    for call in calls[:warmup]:
        call()
    latencies = []
    for call in calls:
        started = time.perf_counter()
        call()
        latencies.append(time.perf_counter() - started)
    return np.array(latencies) * 1000


def call_floor_ms() -> float:
    """p50 of one call of an empty SavedModel signature: the machine's fixed cost."""
    module = _EmptySignature()
    with tempfile.TemporaryDirectory() as work_dir:
        tf.saved_model.save(module, work_dir, signatures={"serving_default": module.serve})
        empty = tf.saved_model.load(work_dir).signatures["serving_default"]
    one = tf.constant([b"x"])
    return float(np.percentile(_latencies_ms([lambda: empty(examples=one)] * 1000), 50))


def benchmark_serving(serve: Callable[..., object], labels: np.ndarray, unlabeled: List[bytes]) -> Dict[str, float]:
    probabilities = serve(examples=tf.constant(unlabeled))[export.PROBABILITY_KEY].numpy()
    auc = keras.metrics.AUC(num_thresholds=10_000)
    auc.update_state(labels, probabilities)

    return {
        "eval AUC": float(auc.result()),
        "eval examples": float(len(labels)),
        **serving_speed(serve, unlabeled),
        "p50 ms of an empty signature": call_floor_ms(),
    }


def _batch_of_1000(unlabeled: List[bytes]) -> tf.Tensor:
    return tf.constant((unlabeled * (1000 // len(unlabeled) + 1))[:1000])


def serving_speed(serve: Callable[..., object], unlabeled: List[bytes]) -> Dict[str, float]:
    """Latency of single serialized examples and throughput on batches of 1000."""
    singles = [tf.constant([e]) for e in unlabeled[:1000]]
    latencies = _latencies_ms([lambda single=single: serve(examples=single) for single in singles])

    batch = _batch_of_1000(unlabeled)
    serve(examples=batch)
    rounds = 50
    started = time.perf_counter()
    for _ in range(rounds):
        serve(examples=batch)
    return {
        "p50 ms (1 example)": float(np.percentile(latencies, 50)),
        "p99 ms (1 example)": float(np.percentile(latencies, 99)),
        "examples/s (batches of 1000)": rounds * 1000 / (time.perf_counter() - started),
    }


def op_profile(
    serve: Callable[..., object], unlabeled: List[bytes], calls: int = 200
) -> List[Tuple[str, float, float]]:
    """Where a batch of 1000's time goes inside `serve`: per op type, the microseconds
    its kernels ran per call, summed over the threads that ran them, and how many ran
    per call; from TensorFlow's profiler trace of `calls` calls, after untimed ones.
    The last row is every kernel together."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    batch = _batch_of_1000(unlabeled)
    for _ in range(50):
        serve(examples=batch)
    with tempfile.TemporaryDirectory() as log_dir:
        # Level 3: every kernel, the cheap ones too (level 2 leaves out those the executor
        # has found inexpensive).
        tf.profiler.experimental.start(log_dir, tf.profiler.experimental.ProfilerOptions(host_tracer_level=3))
        for _ in range(calls):
            serve(examples=batch)
        tf.profiler.experimental.stop()
        (trace,) = glob.glob(os.path.join(log_dir, "plugins", "profile", "*", "*.xplane.pb"))
        with open(trace, "rb") as handle:
            space = xplane_pb2.XSpace.FromString(handle.read())
    micros: Dict[str, float] = {}
    counts: Dict[str, float] = {}
    for plane in space.planes:
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):  # the executor's threads
                continue
            for event in line.events:
                name = names.get(event.metadata_id, "")
                if ":" not in name or "::" in name:  # a kernel is "scope/op:OpType"
                    continue
                op_type = name.rpartition(":")[2]
                micros[op_type] = micros.get(op_type, 0.0) + event.duration_ps / 1e6 / calls
                counts[op_type] = counts.get(op_type, 0.0) + 1 / calls
    rows = sorted(((op, micros[op], counts[op]) for op in micros), key=lambda row: -row[1])
    return rows + [("all kernels", sum(micros.values()), sum(counts.values()))]


def example_model_auc(serve: Callable[..., object], records: List[bytes], label: str) -> Tuple[float, int]:
    """The eval AUC of TFX's taxi example model on its own eval examples, with its own
    label, as its preprocessing_fn computes it: a tip above 20% of the fare, in float32,
    a missing value read as 0 (`taxi_utils_native_keras._fill_in_missing`), a NaN fare
    as 0; the label feature removed before serving."""
    labels, unlabeled = [], []
    for record in records:
        feature = tf.train.Example.FromString(record).features.feature
        tips, fare = (np.float32((feature[key].float_list.value or [0.0])[0]) for key in (label, "fare"))
        labels.append(0 if np.isnan(fare) else int(tips > fare * np.float32(0.2)))
        unlabeled.append(export.strip_label(record, label))
    auc = keras.metrics.AUC(num_thresholds=10_000)
    for start in range(0, len(unlabeled), 1000):
        outputs = serve(examples=tf.constant(unlabeled[start:start + 1000]))
        auc.update_state(labels[start:start + 1000], tf.reshape(next(iter(outputs.values())), [-1]))
    return float(auc.result()), len(labels)


def compare_serving(
    serve: Callable[..., object],
    unlabeled: List[bytes],
    baseline_dir: str,
    baseline_examples: str,
    baseline_label: str,
    rounds: int = 3,
) -> Dict[str, List[Dict[str, float]]]:
    """This model and another exported model (e.g. TFX's taxi example), measured in
    alternating rounds in one process, each on its own eval examples without the label."""
    files = sorted(glob.glob(baseline_examples))
    if not files:
        raise SystemExit(f"nothing matches {baseline_examples}")
    contenders = {
        "this model": (serve, unlabeled[:1000]),
        "baseline": (
            tf.saved_model.load(baseline_dir).signatures["serving_default"],
            [export.strip_label(record, baseline_label) for record in _records(files, 1000)],
        ),
    }
    results: Dict[str, List[Dict[str, float]]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, (serve, examples) in contenders.items():
            results[name].append(serving_speed(serve, examples))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-root", default="tfx_pipeline_output")
    parser.add_argument("--serving-dir", default="serving_model")
    parser.add_argument("--model-name", default="big_tip")
    parser.add_argument("--batch-size", type=int, default=TrainConfig().batch_size)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--jit-compile", action="store_true", help="the custom loop's steps with XLA")
    parser.add_argument("--baseline-model", help="another exported model to compare serving with")
    parser.add_argument("--baseline-examples", help="glob of its GZIP eval TFRecords")
    parser.add_argument("--baseline-label", default="tips", help="its label feature, removed before serving")
    parser.add_argument("--profile", action="store_true", help="where a batch's time goes, by op type")
    args = parser.parse_args()
    pipeline_root = os.path.join(args.output_root, "pipeline_root")

    print(f"Stack {compat.describe()}")
    config = TrainConfig(batch_size=args.batch_size, jit_compile=args.jit_compile)
    training = benchmark_training(pipeline_root, config, args.epochs)
    print(f"training, batch {args.batch_size}, XLA {args.jit_compile} "
          "(examples/s, best of 3 rounds after a warm-up epoch):")
    for name in ("custom loop", "keras fit", "eager loop"):
        print(f"  {name:12s} {training[name]:10,.0f}")
    print(f"  custom loop / fit   {training['custom loop'] / training['keras fit']:.2f}x")
    print(f"  custom loop / eager {training['custom loop'] / training['eager loop']:.1f}x")
    print(f"  train_step traces   {training['traces train_step']:.0f}")

    model_dir = _latest(os.path.join(args.serving_dir, args.model_name, "*"))
    serve = tf.saved_model.load(model_dir).signatures[export.SERVING_SIGNATURE]
    labels, unlabeled = _eval_examples(pipeline_root, limit=100_000)
    serving = benchmark_serving(serve, labels, unlabeled)
    print(f"serving {model_dir} (serving_default, serialized tf.Examples):")
    for name, value in serving.items():
        print(f"  {name:30s} {value:,.4f}" if value < 100 else f"  {name:30s} {value:,.0f}")
    if args.baseline_model:
        baseline_auc, scored = example_model_auc(
            tf.saved_model.load(args.baseline_model).signatures["serving_default"],
            _records(sorted(glob.glob(args.baseline_examples)), 100_000), args.baseline_label)
        print(f"{args.baseline_model}: eval AUC {baseline_auc:.4f} on its {scored} eval examples "
              f"(this model: {serving['eval AUC']:.4f}, difference {serving['eval AUC'] - baseline_auc:+.4f})")
        print(f"serving, alternating rounds: this model vs {args.baseline_model}")
        compared = compare_serving(
            serve,
            unlabeled,
            args.baseline_model,
            args.baseline_examples,
            args.baseline_label,
        )
        for name, rounds in compared.items():
            for measured in rounds:
                print(f"  {name:10s} p50 {measured['p50 ms (1 example)']:.3f} ms, "
                      f"p99 {measured['p99 ms (1 example)']:.3f} ms, "
                      f"{measured['examples/s (batches of 1000)']:,.0f} ex/s in batches of 1000")
        p50, throughput = (
            {name: statistics.median(measured[key] for measured in rounds) for name, rounds in compared.items()}
            for key in ("p50 ms (1 example)", "examples/s (batches of 1000)")
        )
        print(f"  medians, this model / baseline: p50 {p50['this model'] / p50['baseline']:.2f}x, "
              f"throughput {throughput['this model'] / throughput['baseline']:.2f}x")
    if args.profile:
        contenders = {model_dir: (serve, unlabeled)}
        if args.baseline_model:
            contenders[args.baseline_model] = (
                tf.saved_model.load(args.baseline_model).signatures["serving_default"],
                [export.strip_label(record, args.baseline_label)
                 for record in _records(sorted(glob.glob(args.baseline_examples)), 1000)])
        for name, (signature, examples) in contenders.items():
            print(f"{name}: microseconds of kernels per batch of 1000, summed over threads, by op type:")
            rows = op_profile(signature, examples)
            for op_type, micros, count in rows[:12] + rows[-1:]:
                print(f"  {op_type:30s} {micros:8.0f} us  ({count:.0f} per call)")


if __name__ == "__main__":
    main()
