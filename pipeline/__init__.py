"""The taxi pipeline. At the top, its definition: the DAG (`pipeline.pipeline`), its config,
Beam options, outcomes and failure messages, which import only `components`. Below it, by
concern: `run/` (this machine), `inspect/` (what ran), `ops/` (the served model), `cloud/`
(Vertex AI, Beam elsewhere), `data/` (making data); `cli.py` parses and dispatches to them."""

import components  # noqa: F401  (sets the Keras switch before TensorFlow loads, see components.compat)
