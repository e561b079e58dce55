"""The imports at the root of the DAG are keyed by content, not by names or mtimes."""

import glob
import os

import pytest
import tensorflow as tf
from tfx.proto import example_gen_pb2
from tfx.types import standard_artifacts

from components.custom import ingest
from components.model import split_rows
from components.support import spans


def _fingerprint(data_root, splits=None):
    """What the driver records as the input's fingerprint (all spans as one split unless
    `splits` are given)."""
    splits = splits or [example_gen_pb2.Input.Split(name="all", pattern=spans.ALL_SPANS_PATTERN)]
    processor = ingest._ContentDriver(None).get_input_processor(splits=splits, input_base_uri=str(data_root))
    processor.resolve_span_and_version()
    return processor.get_input_fingerprint(0, None)


def test_example_gen_fingerprint_follows_the_bytes_not_the_mtime_or_the_name(tmp_path):
    (tmp_path / "span-1").mkdir()
    data = tmp_path / "span-1" / "a.gz"
    data.write_bytes(b"first bytes")
    (tmp_path / "span-1" / "_SUCCESS").write_bytes(b"")
    before = _fingerprint(tmp_path)
    data.unlink()
    data.write_bytes(b"first bytes")
    os.utime(data, (1, 1))
    assert _fingerprint(tmp_path) == before
    data.rename(tmp_path / "span-1" / "renamed.gz")
    assert _fingerprint(tmp_path) == before
    (tmp_path / "span-1" / "renamed.gz").write_bytes(b"other bytes")
    assert _fingerprint(tmp_path) != before
    (tmp_path / "span-1" / "renamed.gz").write_bytes(b"first bytes")
    assert _fingerprint(tmp_path) == before
    (tmp_path / "span-2").mkdir()
    (tmp_path / "span-1" / "renamed.gz").rename(tmp_path / "span-2" / "renamed.gz")
    assert _fingerprint(tmp_path) != before  # the same bytes in another span
    (tmp_path / "span-2" / "renamed.gz").rename(tmp_path / "span-1" / "renamed.gz")
    (tmp_path / "span-1" / "b.gz").write_bytes(b"more")
    assert _fingerprint(tmp_path) != before


def _run_example_gen(executor_class, data_root, output_dir, output_config, input_config, beam_args=(), made=None):
    """Runs an ImportExampleGen executor as TFX does, with no driver before it; returns
    {split: sorted records}, and appends the Examples artifact to `made`."""
    import json

    import tensorflow as tf
    from google.protobuf import json_format
    from tfx.dsl.components.base import base_beam_executor
    from tfx.types import standard_artifacts, standard_component_specs

    from pipeline.beam import options as beam_options

    examples = standard_artifacts.Examples()
    examples.uri = str(output_dir)
    exec_properties = {
        standard_component_specs.INPUT_BASE_KEY: str(data_root),
        standard_component_specs.INPUT_CONFIG_KEY: json_format.MessageToJson(input_config),
        standard_component_specs.OUTPUT_CONFIG_KEY: json_format.MessageToJson(output_config),
        standard_component_specs.OUTPUT_DATA_FORMAT_KEY: example_gen_pb2.FORMAT_TF_EXAMPLE,
        standard_component_specs.OUTPUT_FILE_FORMAT_KEY: example_gen_pb2.FORMAT_TFRECORDS_GZIP,
    }
    context = base_beam_executor.BaseBeamExecutor.Context(
        beam_pipeline_args=list(beam_options.local_beam_args()) + list(beam_args)
    )
    executor_class(context).Do({}, {standard_component_specs.EXAMPLES_KEY: [examples]}, exec_properties)
    if made is not None:
        made.append(examples)
    result = {}
    for split in json.loads(examples.split_names):
        files = tf.io.gfile.glob(os.path.join(examples.uri, f"Split-{split}", "*"))
        result[split] = sorted(r.numpy() for r in tf.data.TFRecordDataset(files, "GZIP"))
    return result


def _split_configs():
    input_config = example_gen_pb2.Input(splits=[example_gen_pb2.Input.Split(name="all", pattern="span-*/*.gz")])
    output_config = example_gen_pb2.Output(split_config=example_gen_pb2.SplitConfig(splits=[
        example_gen_pb2.SplitConfig.Split(name="train", hash_buckets=4),
        example_gen_pb2.SplitConfig.Split(name="eval", hash_buckets=1),
    ]))
    return input_config, output_config


@pytest.mark.slow
@pytest.mark.every_stack
@pytest.mark.parametrize("mode", ["multi_threading", "multi_processing"])
def test_the_file_executor_splits_every_record_as_tfx_does(repo, tmp_path, copy_spans, mode):
    """The same records in the same splits as TFX's own executor, on spans of data/ in
    several files each; each record's bytes unchanged."""
    from tfx.components.example_gen.import_example_gen import executor as tfx_executor

    data_root = copy_spans(tmp_path / "data", (14, 15, 16))
    input_config, output_config = _split_configs()
    # On a thread per core, as a run of many rows does (pipeline.beam.options.threaded_beam_args), or in
    # worker processes, as a user may ask.
    workers = (f"--direct_running_mode={mode}", "--direct_num_workers=2")
    ours = _run_example_gen(ingest.FileExecutor, data_root, tmp_path / "ours", output_config, input_config, workers)
    theirs = _run_example_gen(tfx_executor.Executor, data_root, tmp_path / "tfx", output_config, input_config)

    def canonical(records):  # TFX writes each record re-serialized, its map order the library's
        return sorted(tf.train.Example.FromString(r).SerializeToString(deterministic=True) for r in records)

    assert {split: canonical(records) for split, records in ours.items()} == {
        split: canonical(records) for split, records in theirs.items()}
    inputs = [r.numpy() for r in tf.data.TFRecordDataset(sorted(glob.glob(str(data_root / "span-*" / "*"))), "GZIP")]
    assert sorted(ours["train"] + ours["eval"]) == sorted(inputs)  # the bytes as they came
    assert len(inputs) == 207 + 203 + 201
    assert 0.1 < len(ours["eval"]) / (len(ours["train"]) + len(ours["eval"])) < 0.3
    # The rows written to each split, counted while splitting, for the Trainer.
    assert split_rows.read(str(tmp_path / "ours")) == {"eval": len(ours["eval"]), "train": len(ours["train"])}
    assert split_rows.rows_in([str(tmp_path / "ours" / "Split-train" / "*")]) == len(ours["train"])


@pytest.mark.slow
@pytest.mark.every_stack
def test_the_file_executor_copies_input_splits_unchanged(repo, tmp_path, copy_spans):
    data_root = copy_spans(tmp_path / "data", (15, 16))
    input_config = example_gen_pb2.Input(splits=[
        example_gen_pb2.Input.Split(name="train_1", pattern="span-15/*.gz"),
        example_gen_pb2.Input.Split(name="eval", pattern="span-16/*.gz"),
    ])
    made = []
    ours = _run_example_gen(ingest.FileExecutor, data_root, tmp_path / "ours", example_gen_pb2.Output(), input_config,
                            made=made)
    # No driver ran (as on Kubeflow Pipelines' backend): the executor records the
    # fingerprint the driver would have.
    assert made[0].get_string_custom_property("input_fingerprint") == _fingerprint(data_root, input_config.splits)
    copied = sorted(os.path.basename(p) for p in os.listdir(tmp_path / "ours" / "Split-eval"))
    assert copied == ["data_tfrecord-00000-of-00001.gz"]
    assert (tmp_path / "ours" / "Split-eval" / copied[0]).read_bytes() == next(
        (data_root / "span-16").iterdir()).read_bytes()
    assert len(ours["train_1"]) == 203 and len(ours["eval"]) == 201
    # Copied, not read: no record of the rows; the Trainer counts them itself.
    assert split_rows.read(str(tmp_path / "ours")) is None


def test_the_file_executor_refuses_other_payload_formats(tmp_path):
    from tfx.types import standard_artifacts, standard_component_specs

    examples = standard_artifacts.Examples()
    examples.uri = str(tmp_path)
    with pytest.raises(ValueError, match="GZIP TFRecords of tf.Example"):
        ingest.FileExecutor().Do({}, {standard_component_specs.EXAMPLES_KEY: [examples]}, {
            standard_component_specs.OUTPUT_DATA_FORMAT_KEY: example_gen_pb2.FORMAT_PARQUET,
        })


def test_import_schema_makes_its_artifact_folder_as_vertex_leaves_it_unmade(repo, tmp_path):
    """LocalDagRunner makes each output artifact's folder; Vertex AI does not, and on its
    Cloud Storage FUSE mount (/gcs/...) a file cannot be written into a missing folder."""
    schema_file = repo / "components" / "model" / "schema" / "schema.pbtxt"
    artifact = standard_artifacts.Schema()
    artifact.uri = str(tmp_path / "ImportSchemaGen_1" / "schema")
    run = ingest.ImportSchema.EXECUTOR_SPEC.executor_class._FUNCTION
    run(schema_file=str(schema_file), digest=spans.sha256(str(schema_file)), schema=artifact)
    assert (tmp_path / "ImportSchemaGen_1" / "schema" / ingest.SCHEMA_FILE).read_bytes() == schema_file.read_bytes()
