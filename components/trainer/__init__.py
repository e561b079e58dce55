"""The Trainer's user code: model builder, training loop, exporter and `run_fn`."""
