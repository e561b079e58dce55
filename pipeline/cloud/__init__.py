"""Running it elsewhere: the compiled Kubeflow Pipelines v2 / Vertex AI pipeline, its
schedule and exit handler, and the `beam-services` command (`pipeline.beam.services`).
Uses the definition, `pipeline.run`, `pipeline.ops` and `pipeline.patches` (the tasks'
imports, `task`)."""
