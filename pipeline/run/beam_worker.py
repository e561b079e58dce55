"""Beam's SDK worker for the worker processes of a local run's DirectRunner in its
`multi_processing` mode: Beam's own `sdk_worker_main`, run with the speed-ups that act on
the work done in the workers (`speedups.worker_patches`). The speed-ups route Beam's
worker command here (`speedups.beam_patches`); with them off, Beam starts its own."""

import sys


def main() -> None:
    from apache_beam.runners.worker import sdk_worker_main

    from pipeline.run import speedups

    with speedups.in_workers():
        sdk_worker_main.main(sys.argv)


if __name__ == "__main__":
    main()
