"""Defaults (locations and run settings), importable without loading TensorFlow (the CLI reads them first)."""

DATA_ROOT = "data"
OUTPUT_ROOT = "tfx_pipeline_output"
SERVING_DIR = "serving_model"
# Pushed versions kept in the serving folder (the newest always among them).
KEEP_VERSIONS = 3
# Spans in the rolling window of `retrain` and of the compiled (scheduled) pipeline.
WINDOW_SIZE = 4
