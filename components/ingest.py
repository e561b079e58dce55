"""The two imports at the root of the DAG, cached by content rather than by name.

- `ImportExampleGen` is TFX's, with a driver that fingerprints the input files by their
  bytes. TFX's own fingerprint is the files' sizes and mtimes: a `make-data` or a copy
  that rewrites identical bytes would ingest the data again and retrain, and an edit that
  keeps size and mtime-second would be missed. (A compiled pipeline runs TFX's own driver
  image on Kubeflow Pipelines / Vertex AI, which keeps the mtime fingerprint.)
- `ImportSchema` imports the curated schema with its SHA-256 as a parameter. TFX's
  `ImportSchemaGen` is cached by the file's path: an edited schema was never imported
  again, and ExampleValidator, the data gate and Transform kept the old contract. The
  digest is computed when the pipeline is built; the component checks that the file it
  reads still has it, so a run never mixes two versions of the contract.
"""

import hashlib
import os

import tensorflow as tf
from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx import v1 as tfx
from tfx.components.example_gen import driver, input_processor
from tfx.types import standard_artifacts

from components import SCHEMA_FILE, spans


class _ContentInputProcessor(input_processor.FileBasedInputProcessor):
    def get_input_fingerprint(self, span: int, version) -> str:
        parts = []
        for split in self._splits:
            matched = tf.io.gfile.glob(spans.join(self._input_base_uri, split.pattern))
            parts.append(f"split:{split.name},files:{len(matched)},sha256:{spans.files_digest(matched)}")
        return "\n".join(parts)


class _ContentDriver(driver.FileBasedDriver):
    def get_input_processor(self, splits, range_config=None, input_base_uri=None):
        return _ContentInputProcessor(input_base_uri, splits, range_config)


class ImportExampleGen(tfx.components.ImportExampleGen):
    """TFX's ImportExampleGen, its cache keyed by the bytes of the files it ingests."""

    DRIVER_CLASS = _ContentDriver


@tfx.dsl.components.component
def ImportSchema(  # a component is named like a class
    schema_file: tfx.dsl.components.Parameter[str],
    digest: tfx.dsl.components.Parameter[str],
    schema: tfx.dsl.components.OutputArtifact[standard_artifacts.Schema],
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
    with tf.io.gfile.GFile(os.path.join(schema.uri, SCHEMA_FILE), "wb") as handle:
        handle.write(content)
