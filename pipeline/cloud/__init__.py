"""Running it elsewhere: the compiled Kubeflow Pipelines v2 / Vertex AI pipeline, its
schedule and exit handler, and Beam's services for work beyond this process. Uses the
definition, `pipeline.run` and `pipeline.ops`."""
