"""The taxi pipeline. At the top, its definition: the DAG (`pipeline.pipeline`), its config,
outcomes and failure messages, and Beam's options and services (`beam/`), which import only
`components`. Below it, by concern: `run/` (this machine), `inspect/` (what ran), `ops/`
(the served model), `cloud/` (Vertex AI), `data/` (making data); `cli.py` parses and
dispatches to them."""

import components  # noqa: F401  (sets the Keras switch before TensorFlow loads, see components.compat)
