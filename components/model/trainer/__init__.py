"""The Trainer's user code: input pipeline (data), traced steps (steps), epoch loop (loop),
model, warm start, exporter and the `run_fn` that wires them (run)."""
