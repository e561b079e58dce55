"""`make-data`: its options and body."""

from __future__ import annotations

import argparse
import errno
import os
import time

from components.support import files
from pipeline import config, options
from pipeline.outcome import Ending, ExitCode


def add_make_data(commands: argparse._SubParsersAction) -> None:
    data = commands.add_parser(
        "make-data", help="rebuild data/ from the CSV shipped in the tfx wheel, or write synthetic data of any size"
    )
    data.add_argument("--source-csv", default=None, metavar="PATH",
                      help="the CSV of trips to convert or draw from (default: the one in the tfx wheel)")
    data.add_argument("--out", default=None, help=f"output folder (default {config.DATA_ROOT}; required with --rows)")
    data.add_argument("--rows", type=options.positive, default=None,
                      help="write this many synthetic rows (drawn from the CSV with noise; for timing and memory, "
                           "see pipeline/data/synthetic.py) instead of converting the CSV as it is")
    data.add_argument("--spans", type=options.positive, default=8, help="with --rows: time-ordered spans to write")
    data.add_argument("--seed", type=int, default=0, help="with --rows: the same seed writes the same bytes")
    data.add_argument("--drift", type=float, default=0.0,
                      help="with --rows: a slow drift, the log of trip_miles growing linearly by this much "
                           "from the first span to the last")
    data.set_defaults(handler=make_data, quiet=True)


def make_data(args: argparse.Namespace, ending: Ending) -> int:
    if args.source_csv and not files.exists(args.source_csv):
        # Before TensorFlow's import below: a mistyped path is answered in a second.
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), args.source_csv)
    from pipeline.data import dataset, synthetic

    if args.rows is None:
        report = dataset.convert(args.source_csv or dataset.default_csv_path(), args.out or config.DATA_ROOT)
        print(report.summary())
        return ExitCode.OK
    if args.out is None:
        # Synthetic rows never replace the real data unless that folder is named.
        raise ValueError("--rows needs --out: the folder to write the synthetic spans to")
    started = time.perf_counter()
    counts = synthetic.write(synthetic.SyntheticConfig(
        rows=args.rows, out_dir=args.out, spans=args.spans, seed=args.seed, csv_path=args.source_csv or "",
        drift=args.drift,
    ))
    print(f"Wrote {sum(counts.values())} synthetic rows in {len(counts)} spans to {args.out} "
          f"({time.perf_counter() - started:.1f} s); see {os.path.join(args.out, synthetic.README_FILE)}")
    return ExitCode.OK
