"""Beam's SDK worker for the worker processes of a local run's DirectRunner in its
`multi_processing` mode: Beam's own `sdk_worker_main`, run with the library patches that
act on the work done in the workers (`pipeline.patches.in_workers`). Beam's patches route
its worker command here (`pipeline.patches.beam`); with the patches off, Beam starts its own.

Once Beam's harness has returned (the runner closed the worker's control channel, every
bundle done), the process ends at once, as the run's own does (`process.exit_process`):
tearing down an interpreter with TensorFlow loaded printed `Exception ignored in:
<function AtomicFunction.__del__>` tracebacks on the run's console, from each worker of
the Evaluator, and the runner waits for its workers to end."""

import sys


def main() -> None:
    from apache_beam.runners.worker import sdk_worker_main

    from pipeline import patches
    from pipeline.run import process

    with patches.in_workers():
        sdk_worker_main.main(sys.argv)
    process.exit_process(0, on=True)


if __name__ == "__main__":
    main()
