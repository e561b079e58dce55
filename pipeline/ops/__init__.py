"""Operating the served model: which version serves and its card, batch scoring, alerts,
and `monitor` (logged serving traffic against the training data). Uses the definition,
`pipeline.inspect` and `pipeline.run`."""
