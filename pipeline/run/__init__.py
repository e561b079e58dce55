"""Running the pipeline on this machine: `run` and `retrain`, their checks, lock, logs,
record of the last run, and retention (`gc`). Uses the definition (`pipeline.config`,
`pipeline.pipeline`) and `pipeline.inspect`; nothing below imports it."""
