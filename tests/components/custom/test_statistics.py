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
    context = executor_class.Context(beam_pipeline_args=["--runner=DirectRunner"], tmp_dir=f"{out}-tmp")
    executor = executor_class(context)
    executor.Do({standard_component_specs.EXAMPLES_KEY: [examples]},
                {standard_component_specs.STATISTICS_KEY: [result]},
                {standard_component_specs.EXCLUDE_SPLITS_KEY: "[]", **exec_properties})
    return result


def _sorted(statistics_list):
    """The one dataset of `statistics_list`, its features in the order of their paths."""
    (dataset,) = statistics_list.datasets
    features = sorted(dataset.features, key=lambda feature: tuple(feature.path.step))
    del dataset.features[:]
    dataset.features.extend(features)
    return dataset


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
        mine, tfx = (_sorted(tfdv.load_stats_binary(os.path.join(a.uri, f"Split-{split}", names[0][0])))
                     for a in (ours, theirs))
        # Every figure of every feature the same on these spans (categorical values are
        # counted exactly on both sides below the sketch's size); only the order differs.
        assert mine.num_examples > 0 and mine == tfx


@pytest.mark.parametrize("change", ["sample rate", "rows", "uncounted", "distinct values", "excluded split"])
def test_anything_but_the_pipeline_s_settings_runs_tfx_s_pass(repo, tmp_path, caplog, monkeypatch, change):
    examples = _examples(repo, tmp_path)
    caplog.set_level("INFO")
    settings = {}
    if change == "sample rate":
        settings[standard_component_specs.SAMPLE_RATE_BY_SPLIT_KEY] = '{"train": 0.5}'
    elif change == "rows":
        monkeypatch.setattr(statistics, "IN_PROCESS_ROWS", 10)
    elif change == "uncounted":
        os.remove(os.path.join(examples.uri, split_rows.FILE))
    elif change == "distinct values":  # more than the in-memory computation counts exactly
        monkeypatch.setattr(span_statistics, "EXACT_DISTINCT_VALUES", 1)
    else:
        settings[standard_component_specs.EXCLUDE_SPLITS_KEY] = '["eval"]'
    result = _run(statistics.Executor, examples, tmp_path / "out", **settings)
    assert "computed in this process" not in caplog.text
    written = sorted(os.listdir(result.uri))
    assert written == (["Split-train"] if change == "excluded split" else ["Split-eval", "Split-train"])
    assert os.listdir(os.path.join(result.uri, "Split-train")) == [tfx_statistics_gen.DEFAULT_FILE_NAME]


def test_beam_beyond_the_process_runs_tfx_s_pass(repo, tmp_path):
    examples = _examples(repo, tmp_path)
    context = statistics.Executor.Context(beam_pipeline_args=["--runner=PortableRunner", "--job_endpoint=x:1"],
                                          tmp_dir=str(tmp_path))
    executor = statistics.Executor(context)
    assert executor._in_process_splits({}, examples, {}) is None
    here = statistics.Executor(statistics.Executor.Context(beam_pipeline_args=[], tmp_dir=str(tmp_path)))
    assert here._in_process_splits({}, examples, {}) == ["train", "eval"]
