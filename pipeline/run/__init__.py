"""Running the pipeline on this machine: `run` and `retrain`, their checks, lock, logs and
record of the last run. Uses the definition (`pipeline.config`, `pipeline.pipeline`) and
`pipeline.inspect`; nothing below imports it."""
