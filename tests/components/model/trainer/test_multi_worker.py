"""Two worker processes on 127.0.0.1 (`TF_CONFIG`, MultiWorkerMirroredStrategy) train the
model one process trains with the same global batch; only the chief writes outputs."""

import json
import os
import subprocess
import sys

import pytest

from components.model.trainer import run, settings
from tests.helpers import free_ports

pytestmark = [pytest.mark.slow, pytest.mark.every_stack, pytest.mark.timeout(300)]

MAIN = os.path.join(os.path.dirname(__file__), "run_fn_main.py")
CUSTOM_CONFIG = {"train": {"epochs": 3, "early_stopping_patience": 0}, "export": {"warmup_requests": 5}}
# float32 sums in another order (each replica's half, then the all-reduce) differ from one
# process's in the last bits; after a few Adam steps the losses agree to about 1e-6.
RELATIVE_TOLERANCE = 1e-4


def _fn_args(root, examples_file, transform_output_dir):
    return {
        "train_files": [examples_file], "eval_files": [examples_file], "transform_output": transform_output_dir,
        "serving_model_dir": str(root / "serving"), "model_run_dir": str(root / "model_run"),
        "custom_config": CUSTOM_CONFIG,
    }


def _start(fn_args, tf_config=None):
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    if tf_config:
        env["TF_CONFIG"] = json.dumps(tf_config)
    return subprocess.Popen([sys.executable, MAIN, json.dumps(fn_args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(process, timeout=240):
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        pytest.fail(f"a training process did not finish in {timeout} s:\n{output[-3000:]}")
    assert process.returncode == 0, output[-3000:]
    return output


def _history(fn_args):
    with open(os.path.join(fn_args["model_run_dir"], settings.TRAINING_SUMMARY_FILE)) as handle:
        return json.load(handle)


def test_two_workers_train_the_model_one_process_trains(tmp_path, examples_file, transform_output_dir):
    single = _fn_args(tmp_path / "single", examples_file, transform_output_dir)
    alone = _start(single)
    shared = _fn_args(tmp_path / "cluster", examples_file, transform_output_dir)
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    workers = [_start(shared, {"cluster": cluster, "task": {"type": "worker", "index": i}}) for i in range(2)]
    outputs = [_finish(worker) for worker in workers]
    _finish(alone)

    one, two = _history(single), _history(shared)
    assert "on 2 replica(s)" in outputs[0]
    assert two["steps"] == one["steps"] == 3 * 2  # the same global batches: 32 + 8 of 40 rows
    assert len(one["history"]) == CUSTOM_CONFIG["train"]["epochs"]  # the losses below compared epoch by epoch
    for epoch_one, epoch_two in zip(one["history"], two["history"], strict=True):
        for key in ("train_loss", "eval_loss"):
            assert epoch_two[key] == pytest.approx(epoch_one[key], rel=RELATIVE_TOLERANCE)
    # Only the chief (worker 0) wrote: one model, one summary, no checkpoint left behind.
    assert os.path.exists(os.path.join(shared["serving_model_dir"], "saved_model.pb"))
    assert sorted(os.listdir(shared["model_run_dir"])) == sorted(os.listdir(single["model_run_dir"]))
    assert not os.listdir(os.path.join(shared["model_run_dir"], run.CHECKPOINTS_FOLDER))
