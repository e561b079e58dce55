"""`predict` and `serving`: their options and bodies."""

from __future__ import annotations

import argparse
import os
import time

from pipeline import config, options
from pipeline.beam import options as beam_options
from pipeline.outcome import Ending, ExitCode


def add_predict(commands: argparse._SubParsersAction) -> None:
    predict = commands.add_parser("predict", help="score tf.Example TFRecords with a pushed model, with Beam")
    options.add_model_version(predict)
    predict.add_argument("--input", required=True, metavar="GLOB", help="GZIP TFRecords of tf.Example to score")
    predict.add_argument("--output", required=True, metavar="DIR", help="a new or empty folder for the scores")
    predict.add_argument("--csv", action="store_true", help="also write a CSV of probability and class")
    predict.add_argument("--key", default="", metavar="FEATURE", help="with --csv: a feature's value to join on")
    options.add_serving_location(predict)
    options.add_beam_options(predict, "Beam's in-memory engine in this process")
    predict.set_defaults(handler=predict_files, quiet=True)


def predict_files(args: argparse.Namespace, ending: Ending) -> int:
    # The paths first, TensorFlow and Beam after: a mistyped path is answered in a second.
    options.require_serving_dir(args)
    options.require_writable_folder(args.output, "--output")
    if not options.matching(args.input, "--input"):
        print(f"No files match --input {args.input}: nothing scored.")
        return ExitCode.OK
    from pipeline.ops import predict

    started = time.perf_counter()
    model = predict.run(predict.PredictConfig(
        model=args.model, input_glob=args.input, output_dir=args.output, serving_dir=args.serving_dir,
        model_name=args.model_name, csv=args.csv, key_feature=args.key,
        beam_args=options.beam_command_line(args, beam_options.local_beam_args()),
    ))
    print(f"Scored {args.input} with {model} into {args.output} ({time.perf_counter() - started:.1f} s)")
    return ExitCode.OK


def add_monitor(commands: argparse._SubParsersAction) -> None:
    monitor = commands.add_parser(
        "monitor", help="compare logged serving traffic with the training data of the version that served it"
    )
    monitor.add_argument("--requests", required=True, metavar="GLOB",
                         help="logged requests: TFRecords of tf.Example or PredictionLog (GZIP or not), or JSON "
                              "lines of TF Serving REST bodies or Vertex AI request-response log rows")
    monitor.add_argument("--format", default=config.AUTO_FORMAT, choices=(config.AUTO_FORMAT,) + config.REQUEST_FORMATS,
                         help="the files' format (default: told from each file's first record)")
    options.add_model_version(monitor)
    monitor.add_argument("--max-malformed", type=float, default=config.MONITOR_MAX_MALFORMED,
                         metavar="FRACTION",
                         help="above this fraction of malformed records the traffic is not judged (exit 1)")
    options.add_metadata_options(monitor)
    options.add_serving_location(monitor)
    options.add_notify(monitor)
    options.add_beam_options(monitor, "Beam's in-memory engine in this process")
    monitor.set_defaults(handler=monitor_traffic, quiet=True)


def monitor_traffic(args: argparse.Namespace, ending: Ending) -> int:
    from pipeline import alerts

    try:
        options.require_serving_dir(args)
        if not options.matching(args.requests, "--requests"):
            nothing = f"No files match --requests {args.requests}: no traffic to judge."
            print(nothing)
            if args.notify:  # a scheduled monitor whose request logging stopped is told so
                alerts.send(args.notify, {"text": f"taxi-pipeline monitor: {nothing}", "command": "monitor",
                                          "exit_code": int(ExitCode.OK), "requests": 0})
            return ExitCode.OK
        from pipeline.ops import monitor

        run_config = options.located(args)
        result = monitor.run(monitor.MonitorConfig(
            requests_glob=args.requests, run_config=run_config, model=args.model, file_format=args.format,
            max_malformed=args.max_malformed, beam_args=options.beam_command_line(args, beam_options.local_beam_args()),
        ))
    except Exception as err:
        if args.notify:
            alerts.send(args.notify, alerts.monitor_failed_payload(str(err).splitlines()[0] if str(err) else repr(err)))
        raise
    print(monitor.summary(result))
    if args.notify:
        alerts.send(args.notify, monitor.alert_payload(result))
    return int(result.exit_code)


def add_serving(commands: argparse._SubParsersAction) -> None:
    serving = commands.add_parser(
        "serving", help="list the pushed versions and their model cards, roll back, pin or unpin what TF Serving "
                   "serves, approve or reject a version awaiting approval"
    )
    serving.add_argument("action", choices=("list", "card", "rollback", "pin", "unpin", "approve", "reject"),
                         help="list: versions and labels; card [VERSION]: where a version's model card is "
                              "(default: the serving version's); rollback [VERSION]: serve VERSION (default: the one "
                              "before what serves now) and keep serving it; pin VERSION: serve only it; unpin: "
                              "serve the newest again; approve VERSION: serve a version awaiting approval; "
                              "reject VERSION --note WHY: it never serves")
    serving.add_argument("version", nargs="?", type=int, default=None, help="a version folder's number")
    serving.add_argument("--note", default="", help="approve, reject: why (required to reject)")
    serving.add_argument("--by", default="", help="approve, reject: who decides (default: this OS user)")
    options.add_metadata_options(serving, "approve, reject: also record the decision on the version's push in "
                                          "this output root's metadata store (or --metadata-mysql's)")
    options.add_serving_location(serving)
    serving.set_defaults(handler=serving_versions, quiet=True)


def serving_versions(args: argparse.Namespace, ending: Ending) -> int:
    from pipeline.ops import serving

    deciding = args.action in ("approve", "reject")
    verdict = serving.Verdict(args.action == "approve", args.note, args.by)
    if deciding:  # the command line first, then the paths it names
        serving.require_decision(args.version, verdict)
    options.require_serving_dir(args)
    if not deciding:
        print(serving.command(args.serving_dir, args.model_name, args.action, args.version))
        return ExitCode.OK
    metadata = None
    if args.output_root or args.metadata_mysql:  # checked before the decision is made
        has_store = options.require_output_root(args)
        if not has_store:
            raise ValueError(f"--output-root {args.output_root} holds no {config.METADATA_FILE}: name the output "
                             "root the run that pushed the version wrote to")
        metadata = config.MetadataConfig(
            os.path.join(os.path.abspath(args.output_root or config.OUTPUT_ROOT), config.METADATA_FILE),
            args.metadata_mysql)
    print(serving.decide(args.serving_dir, args.model_name, args.version, verdict, metadata))
    return ExitCode.OK
