"""`report`, `history` and `lineage`: read the metadata store, change nothing."""

from __future__ import annotations

import argparse
from typing import Optional

from pipeline import config, failures, options
from pipeline.outcome import Ending, ExitCode


def add_report(commands: argparse._SubParsersAction) -> None:
    report = commands.add_parser("report", help="write a past run's HTML page again, from the metadata store")
    report.add_argument("run", nargs="?", default=None,
                        help="a run id, or its start (e.g. 20261123-0745); default: the newest run")
    options.add_metadata_options(report)
    report.set_defaults(handler=read_back, quiet=True)


def add_history(commands: argparse._SubParsersAction) -> None:
    history = commands.add_parser("history", help="the recent runs: when, spans, outcome, metrics, pushed version")
    history.add_argument("--limit", type=options.positive, default=20, help="runs shown, newest first")
    history.add_argument("--page", action="store_true",
                         help="also write <output root>/history.html: the served model's AUC on each new span, "
                              "run after run, overall and by slice, beside the candidate's")
    options.add_metadata_options(history)
    history.set_defaults(handler=read_back, quiet=True)


def add_lineage(commands: argparse._SubParsersAction) -> None:
    lineage = commands.add_parser(
        "lineage", help="the spans, files, executions and evaluation behind a pushed model version"
    )
    lineage.add_argument("version", type=int, help="a version folder's number under the serving folder")
    options.add_metadata_options(lineage)
    options.add_serving_location(lineage)
    lineage.set_defaults(handler=read_back, quiet=True)


def read_back(args: argparse.Namespace, ending: Ending) -> int:
    """`report`, `history` and `lineage`."""
    has_store = options.require_output_root(args)
    if args.command == "lineage":
        options.require_serving_dir(args)
    run_config = options.located(args)
    metadata, pipeline_name = run_config.metadata, run_config.settings.pipeline_name
    # A store missing from an output root that recorded runs is not an empty root.
    failures.check_store(metadata, run_config.output_root)
    if not (has_store and metadata.exists()):
        nothing = f"no run wrote to --output-root {args.output_root} yet (it holds no {config.METADATA_FILE})"
        if args.command == "lineage" or getattr(args, "run", None) is not None:
            raise ValueError(f"{nothing}: name the output root of the run you mean")
        print(f"No runs: {nothing}.")
        return ExitCode.OK
    from pipeline.inspect import lineage

    if args.command == "history":
        print(lineage.history(metadata, pipeline_name, args.limit))
        if args.page:
            from pipeline.inspect import quality

            page = quality.write_page(metadata, pipeline_name, run_config.output_root, run_config.settings.evaluation)
            print(f"Page: {page}")
    elif args.command == "lineage":
        print(lineage.lineage(metadata, run_config.model_serving_dir, args.version))
    else:
        page = _write_report(run_config.output_root, metadata, pipeline_name, args.run)
        print(f"Report: {page}" if page else f"No runs in {metadata} yet: no page to write.")
    return ExitCode.OK


def _write_report(output_root: str, metadata: config.MetadataConfig, pipeline_name: str,
                  run: Optional[str]) -> Optional[str]:
    """The page of `run` (default: the newest run) written again; None when no run is recorded."""
    from pipeline.inspect import lineage, report_page, run_details, run_report

    store = run_report.connect(metadata)
    known = lineage.run_ids(store)
    matching = [run_id for run_id in known if run is None or run_id.startswith(run)]
    if not matching and run is None:
        return None
    if not matching:
        raise LookupError(f"no run {run!r} in {metadata}")
    if run is not None and len(matching) > 1 and run not in matching:
        raise LookupError(f"{run!r} names {len(matching)} runs: {', '.join(matching[:5])}; give more of the id")
    run_id = run if run in matching else matching[0]
    context = store.get_context_by_type_and_name(run_report.PIPELINE_RUN_CONTEXT, run_id)
    removed = context.custom_properties.get(run_report.REMOVED_PROPERTY)
    if removed is not None:
        raise LookupError(f"run {run_id}'s files were removed by `gc` at {removed.string_value}: its page cannot be "
                          "made again (`history` still lists what it decided; keep more with --keep-runs)")
    details = run_details.read(metadata, pipeline_name, run_id)
    return report_page.write(output_root, details)
