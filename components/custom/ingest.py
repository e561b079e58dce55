"""The two imports at the root of the DAG, cached by content rather than by name.

- `ImportExampleGen` is TFX's, with a driver that fingerprints the input files by their
  bytes. TFX's own fingerprint is the files' sizes and mtimes: a `make-data` or a copy
  that rewrites identical bytes would ingest the data again and retrain, and an edit that
  keeps size and mtime-second would be missed. (A compiled pipeline runs TFX's own driver
  image on Kubeflow Pipelines / Vertex AI, which keeps the mtime fingerprint.)
  Its executor passes the records through as bytes, a file at a time (`FileExecutor`).
- `ImportSchema` imports the curated schema with its SHA-256 as a parameter. TFX's
  `ImportSchemaGen` is cached by the file's path: an edited schema was never imported
  again, and ExampleValidator, the data gate and Transform kept the old contract. The
  digest is computed when the pipeline is built; the component checks that the file it
  reads still has it, so a run never mixes two versions of the contract.
"""

import hashlib
import itertools
import json
import os
from typing import Dict, List, Tuple

import apache_beam as beam
import tensorflow as tf
from google.protobuf import text_format, wrappers_pb2
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx.components.example_gen import driver, input_processor, utils
from tfx.components.example_gen.import_example_gen import component as import_component
from tfx.components.example_gen.import_example_gen import executor as import_executor
from tfx.components.util import examples_utils
from tfx.dsl.component.experimental.annotations import OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.dsl.components.base import executor_spec
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils, standard_artifacts, standard_component_specs
from tfx.utils import proto_utils

from components.custom import beam_fns, recorded
from components.model import SCHEMA_FILE
from components.support import files, spans

# The Examples artifact's record of the files read: JSON, input split -> paths under input_base.
SOURCE_FILES_PROPERTY = recorded.SOURCE_FILES_PROPERTY


def content_fingerprint(matched: Dict[str, List[str]]) -> str:
    """The input's fingerprint by the bytes of its files: input split -> the files matched."""
    return "\n".join(f"split:{split},files:{len(paths)},sha256:{spans.files_digest(paths)}"
                     for split, paths in matched.items())


class _ContentInputProcessor(input_processor.FileBasedInputProcessor):
    def get_input_fingerprint(self, span: int, version) -> str:
        return content_fingerprint({split.name: tf.io.gfile.glob(files.join(self._input_base_uri, split.pattern))
                                    for split in self._splits})


class _ContentDriver(driver.FileBasedDriver):
    def get_input_processor(self, splits, range_config=None, input_base_uri=None):
        return _ContentInputProcessor(input_base_uri, splits, range_config)


class FileExecutor(import_executor.Executor):
    """ImportExampleGen's executor, one input file at a time, the records as the bytes
    they are.

    TFX's parses every record into a `tf.train.Example`, serializes it again to hash it
    for the split and once more to write it, passes each record through several Beam
    transforms, and reshuffles all records through a GroupByKey before writing. On one
    machine that is most of ExampleGen's time, and the reshuffle holds every record in
    memory at once. Here the unit of Beam work is an input file:

    - hash-split output (train/eval buckets): each file's records are read and written
      to one file per split by the same SHA-256 of their bytes TFX uses, so a
      deterministically serialized record lands in the split TFX would put it in; the
      rows written to each split are recorded (`components.model.split_rows`);
    - input splits kept as they are (a window's spans): each file is copied unchanged.

    Memory does not grow with the data, and any Beam runner spreads the files over its
    workers. The records were checked to be tf.Examples before the run
    (`pipeline.run.preflight`); the output is the same payload, GZIP TFRecords of tf.Example.
    """

    def Do(self, input_dict, output_dict, exec_properties) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        payload = exec_properties.get(standard_component_specs.OUTPUT_DATA_FORMAT_KEY)
        file_format = exec_properties.get(standard_component_specs.OUTPUT_FILE_FORMAT_KEY)
        if payload != example_gen_pb2.FORMAT_TF_EXAMPLE or file_format not in (
            None, example_gen_pb2.FILE_FORMAT_UNSPECIFIED, example_gen_pb2.FORMAT_TFRECORDS_GZIP
        ):
            raise ValueError(
                f"{type(self).__name__} passes GZIP TFRecords of tf.Example through; got payload format "
                f"{payload} and file format {file_format}: use TFX's ImportExampleGen for other formats"
            )
        input_config = proto_utils.json_to_proto(
            exec_properties[standard_component_specs.INPUT_CONFIG_KEY], example_gen_pb2.Input()
        )
        output_config = proto_utils.json_to_proto(
            exec_properties[standard_component_specs.OUTPUT_CONFIG_KEY], example_gen_pb2.Output()
        )
        outputs = output_dict[standard_component_specs.EXAMPLES_KEY]
        examples = artifact_utils.get_single_instance(outputs)
        split_names = utils.generate_output_split_names(input_config, output_config)
        examples.split_names = artifact_utils.encode_split_names(split_names)
        input_base = exec_properties[standard_component_specs.INPUT_BASE_KEY]
        for name in split_names:
            tf.io.gfile.makedirs(artifact_utils.get_split_uri(outputs, name))

        read: Dict[str, List[str]] = {}

        def files(pattern: str, split: str) -> List[Tuple[int, str]]:
            matched = sorted(tf.io.gfile.glob(os.path.join(input_base, pattern)))
            if not matched:
                raise ValueError(f"no input files match {os.path.join(input_base, pattern)}")
            read[split] = matched
            return list(enumerate(matched))

        with self._make_beam_pipeline() as pipeline:
            if output_config.split_config.splits:
                buckets = list(itertools.accumulate(s.hash_buckets for s in output_config.split_config.splits))
                uris = [artifact_utils.get_split_uri(outputs, name) for name in split_names]
                found = files(input_config.splits[0].pattern, input_config.splits[0].name)
                _ = (
                    pipeline
                    | "Files" >> beam.Create(found)
                    | "Spread" >> beam.Reshuffle()
                    | "SplitFiles" >> beam.ParDo(beam_fns.SplitFile(uris, buckets, len(found)))
                    | "AllSplits" >> beam.combiners.ToList()
                    | "WriteRows" >> beam.Map(beam_fns.write_split_rows, examples.uri, split_names)
                )
            else:
                for split in input_config.splits:
                    found = files(split.pattern, split.name)
                    _ = (
                        pipeline
                        | f"Files[{split.name}]" >> beam.Create(found)
                        | f"Spread[{split.name}]" >> beam.Reshuffle()
                        | f"CopyFiles[{split.name}]" >> beam.ParDo(
                            beam_fns.CopyFile(artifact_utils.get_split_uri(outputs, split.name), len(found))
                        )
                    )
        examples_utils.set_payload_format(examples, payload)
        _record_inputs(examples, input_base, read, exec_properties)


def _record_inputs(examples, input_base: str, read: Dict[str, List[str]], exec_properties) -> None:
    """The files read (input split -> paths), on the Examples artifact: their paths under
    the input base, and, when no driver ran (Kubeflow Pipelines' backend runs no pre-cache
    hook), the fingerprint the driver would have recorded."""
    sources = {split: [os.path.relpath(path, input_base) for path in paths] for split, paths in read.items()}
    examples.set_string_custom_property(SOURCE_FILES_PROPERTY, json.dumps(sources))
    if not exec_properties.get(utils.FINGERPRINT_PROPERTY_NAME):
        examples.set_string_custom_property(utils.FINGERPRINT_PROPERTY_NAME, content_fingerprint(read))


class ImportExampleGen(import_component.ImportExampleGen):
    """TFX's ImportExampleGen, its cache keyed by the bytes of the files it ingests and
    by `code_version` (this package's code: an edit of `FileExecutor` re-runs it), its
    records passed through as bytes, a file at a time (`FileExecutor`)."""

    DRIVER_CLASS = _ContentDriver
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(FileExecutor)

    def __init__(self, code_version: str = "", **kwargs):
        super().__init__(**kwargs)
        if code_version:
            # TFX's ImportExampleGen takes no custom_config, which its spec has and its
            # executor ignores: the version is read by the cache key alone.
            config = example_gen_pb2.CustomConfig()
            config.custom_config.Pack(wrappers_pb2.StringValue(value=code_version))
            self.exec_properties[standard_component_specs.CUSTOM_CONFIG_KEY] = config


@component
def ImportSchema(  # a component is named like a class
    schema_file: Parameter[str],
    digest: Parameter[str],
    schema: OutputArtifact[standard_artifacts.Schema],
    code_version: Parameter[str] = "",  # read by the cache key alone: an edit here re-runs it
) -> None:
    """Copies the curated schema into the pipeline, checked to parse and to be the
    version the pipeline was built with (`digest`, also its cache key)."""
    with tf.io.gfile.GFile(schema_file, "rb") as handle:
        content = handle.read()
    found = hashlib.sha256(content).hexdigest()
    if found != digest:
        raise ValueError(
            f"{schema_file} is not the schema this pipeline was built with (sha256 {found[:12]}, built with "
            f"{digest[:12]}): it changed after the run was planned (run again), or the image was built from "
            "other sources than the compiled pipeline (rebuild it from the same commit)"
        )
    try:
        text_format.Parse(content.decode(), schema_pb2.Schema())
    except text_format.ParseError as err:
        raise ValueError(f"{schema_file} is not a valid schema: {err}") from err
    # The artifact's folder may not exist: LocalDagRunner makes it, Vertex AI does not (on
    # gs:// no folder is needed; on its Cloud Storage FUSE mount, /gcs/..., one is).
    tf.io.gfile.makedirs(schema.uri)
    with tf.io.gfile.GFile(os.path.join(schema.uri, SCHEMA_FILE), "wb") as handle:
        handle.write(content)
