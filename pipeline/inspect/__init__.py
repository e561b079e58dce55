"""Reading back what ran, from the metadata store: run reports, run pages, history and
lineage. Uses only the definition (`pipeline.config`, `pipeline.outcome`)."""
