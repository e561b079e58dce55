"""Reading back what ran, from the metadata store: run reports, run pages, history, the
served model's quality over time, `monitor`'s records, and lineage. Uses only the
definition (`pipeline.config`, `pipeline.outcome`)."""
