"""StatisticsGen's statistics computed in its process for small data: TFX's artifact,
file for file and property for property, and TFX's own pass for anything else."""

import glob
import os

import pytest
import tensorflow as tf
import tensorflow_data_validation as tfdv
from tfx.components.statistics_gen import executor as tfx_statistics_gen
from tfx.types import artifact_utils, standard_artifacts, standard_component_specs

from components.custom import span_statistics, statistics
from components.model import split_rows

pytestmark = [pytest.mark.slow, pytest.mark.every_stack]  # TFX's Beam pass, to compare with


def _examples(repo, tmp_path, spans=(15, 16)) -> standard_artifacts.Examples:
    """An Examples artifact as ImportExampleGen writes one: a split per span, rows recorded."""
    examples = standard_artifacts.Examples()
    examples.uri = str(tmp_path / "examples")
    examples.split_names = artifact_utils.encode_split_names(["train", "eval"])
    examples.span = 16
    rows = {}
    for split, span in zip(("train", "eval"), spans):
        folder = tmp_path / "examples" / f"Split-{split}"
        folder.mkdir(parents=True)
        records = [r.numpy() for r in tf.data.TFRecordDataset(glob.glob(str(repo / "data" / f"span-{span}" / "*")),
                                                               "GZIP")]
        with tf.io.TFRecordWriter(str(folder / "data_tfrecord-00000-of-00001.gz"), "GZIP") as out:
            for record in records:
                out.write(record)
        rows[split] = len(records)
    split_rows.write(examples.uri, rows)
    return examples


def _run(executor_class, examples, out, **exec_properties):
    result = standard_artifacts.ExampleStatistics()
    result.uri = str(out)
    executor = executor_class(executor_class.Context(beam_pipeline_args=["--runner=DirectRunner"], tmp_dir=str(out)))
    executor.Do({standard_component_specs.EXAMPLES_KEY: [examples]},
                {standard_component_specs.STATISTICS_KEY: [result]},
                {standard_component_specs.EXCLUDE_SPLITS_KEY: "[]", **exec_properties})
    return result


def _features(statistics_list):
    (dataset,) = statistics_list.datasets
    return dataset.num_examples, {tuple(f.path.step): f for f in dataset.features}


def test_in_process_statistics_are_tfx_s_artifact_for_artifact(repo, tmp_path, caplog):
    examples = _examples(repo, tmp_path)
    caplog.set_level("INFO")
    ours = _run(statistics.Executor, examples, tmp_path / "ours")
    assert "computed in this process" in caplog.text
    theirs = _run(tfx_statistics_gen.Executor, examples, tmp_path / "tfx")
    assert (ours.split_names, ours.span) == (theirs.split_names, theirs.span)
    assert {k: ours.get_custom_property(k) for k in ours.mlmd_artifact.custom_properties} == {
        k: theirs.get_custom_property(k) for k in theirs.mlmd_artifact.custom_properties}
    for split in ("train", "eval"):
        names = [sorted(os.listdir(os.path.join(a.uri, f"Split-{split}"))) for a in (ours, theirs)]
        assert names[0] == names[1] == [tfx_statistics_gen.DEFAULT_FILE_NAME]
        (count, mine), (their_count, tfx_features) = (
            _features(tfdv.load_stats_binary(os.path.join(a.uri, f"Split-{split}", names[0][0])))
            for a in (ours, theirs))
        # Every figure of every feature the same (categorical values are counted exactly
        # on both sides below the sketch's size); only the order of the features differs.
        assert count == their_count > 0 and mine == tfx_features


def test_anything_but_the_pipeline_s_settings_runs_tfx_s_pass(repo, tmp_path, caplog, monkeypatch):
    examples = _examples(repo, tmp_path)
    caplog.set_level("INFO")
    _run(statistics.Executor, examples, tmp_path / "rate", sample_rate_by_split='{"train": 0.5}')
    assert "computed in this process" not in caplog.text
    monkeypatch.setattr(span_statistics, "IN_PROCESS_ROWS", 10)
    _run(statistics.Executor, examples, tmp_path / "big")
    assert "computed in this process" not in caplog.text
    os.remove(os.path.join(examples.uri, split_rows.FILE))
    monkeypatch.undo()
    _run(statistics.Executor, examples, tmp_path / "uncounted")
    assert "computed in this process" not in caplog.text
