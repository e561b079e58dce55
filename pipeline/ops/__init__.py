"""Operating the served model: which version serves, batch scoring, and alerts. Uses the
definition, `pipeline.inspect` and `pipeline.run`."""
