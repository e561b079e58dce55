"""`compile`, `schedule` and `beam-services`: their options and bodies."""

from __future__ import annotations

import argparse
import os

from pipeline import config, options
from pipeline.beam import options as beam_options
from pipeline.outcome import Ending, ExitCode

# Where `compile` writes, for each target.
OUTPUTS = {config.VERTEX: "pipeline.json", config.KUBEFLOW: "pipeline.yaml"}


def add_compile(commands: argparse._SubParsersAction) -> None:
    kfp = commands.add_parser("compile", help="write the pipeline for Vertex AI (a PipelineJob JSON) or Kubeflow "
                                               "Pipelines (a pipeline spec YAML)")
    kfp.add_argument("--target", choices=config.COMPILE_TARGETS, default=config.VERTEX,
                     help="what runs it: vertex (Vertex AI Pipelines: a PipelineJob JSON) or kubeflow (Kubeflow "
                          "Pipelines 2.x on a cluster: the pipeline spec its upload takes, with the platform spec "
                          "as a second YAML document when one is needed; docs/beyond-one-machine.md)")
    kfp.add_argument("--image", required=True, help="the pipeline image (see Dockerfile)")
    kfp.add_argument("--pipeline-root", required=True,
                     help="gs:// root for component outputs")
    options.add_data_root(kfp, remote=True)
    options.add_serving_dir(kfp, remote=True)
    options.add_window(kfp, every_span=True)
    kfp.add_argument("--output", default=None,
                     help=f"where to write it (default: {OUTPUTS[config.VERTEX]} for vertex, "
                          f"{OUTPUTS[config.KUBEFLOW]} for kubeflow)")
    kfp.add_argument("--notify-secret", default="", metavar="NAME",
                     help="where the exit handler reads the URL of the Slack-compatible webhook it tells how each "
                          "job ended, even when a component failed: a Secret Manager secret, "
                          "projects/PROJECT/secrets/SECRET[/versions/VERSION]; with --target kubeflow, key KEY of "
                          "the Kubernetes Secret SECRET in the run's namespace, k8s:SECRET/KEY; or env:VARIABLE of "
                          "the task's environment. What is compiled holds only this name")
    options.add_notify(kfp, refused=True)
    options.add_settings(kfp)
    options.add_beam_options(kfp, "Beam's in-memory engine inside each component's container")
    kfp.set_defaults(handler=compile_pipeline, quiet=True)


def compile_pipeline(args: argparse.Namespace, ending: Ending) -> int:
    if args.notify is not None:
        raise ValueError("compile writes no webhook URL into the job's JSON (a bucket and Vertex AI's console show "
                         "it): store the URL in Secret Manager and give --notify-secret "
                         "projects/PROJECT/secrets/SECRET (docs/vertex.md#alerts)")
    kfp_config = config.KubeflowConfig(
        image=args.image,
        pipeline_root=args.pipeline_root,
        data_root=args.data_root,
        serving_dir=args.serving_dir,
        notify_secret=args.notify_secret,
        settings=options.settings(args, beam_options.VERTEX_BEAM_ARGS, window_size=args.window or None),
        target=args.target,
    )
    output = args.output or OUTPUTS[args.target]
    # Before TensorFlow and TFX load: a mistyped folder is answered at once.
    folder = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(folder):
        raise ValueError(f"--output {output}: its folder {folder} does not exist: create it, or name a file in a "
                         "folder that exists")
    options.require_writable_folder(folder, "--output")
    from pipeline.cloud import kubeflow_runner
    from pipeline.cloud.compiled_fixes import dag_tasks

    tasks = dag_tasks(kubeflow_runner.compile_pipeline(kfp_config, output))
    print(f"Wrote {output}: {len(tasks)} tasks, image {args.image}, for {args.target}")
    return ExitCode.OK


def add_schedule(commands: argparse._SubParsersAction) -> None:
    schedule = commands.add_parser("schedule", help="create a Vertex AI schedule running the compiled pipeline")
    schedule.add_argument("--pipeline-json", default="pipeline.json", help="written by `taxi-pipeline compile`")
    schedule.add_argument("--cron", required=True, help='when to run, e.g. "0 3 * * *" (UTC)')
    schedule.add_argument("--project", required=True, help="Google Cloud project")
    schedule.add_argument("--region", required=True, help="Vertex AI region, e.g. europe-west4")
    schedule.add_argument("--service-account", default=None, help="service account the runs use")
    options.add_dry_run(schedule, "print the CreateScheduleRequest, send nothing")
    schedule.set_defaults(handler=schedule_pipeline, quiet=True)


def schedule_pipeline(args: argparse.Namespace, ending: Ending) -> int:
    from pipeline.cloud import vertex_schedule

    schedule_config = vertex_schedule.ScheduleConfig(
        pipeline_json=args.pipeline_json, cron=args.cron, project=args.project, region=args.region,
        service_account=args.service_account,
    )
    request = vertex_schedule.build_request(schedule_config)
    if args.dry_run:
        print(vertex_schedule.as_json(request))
        return ExitCode.OK
    try:
        name = vertex_schedule.submit(schedule_config, request)
    except vertex_schedule.NoCredentialsError as err:
        raise ValueError(str(err)) from err
    print(f"Created schedule {name} ({args.cron})")
    return ExitCode.OK


def add_beam_services(commands: argparse._SubParsersAction) -> None:
    services = commands.add_parser(
        "beam-services", help="Beam's job service and a Python worker pool on 127.0.0.1, for --beam portable"
    )
    services.add_argument("--job-port", type=int, default=8099, help="the job service's port (0: any free one)")
    services.add_argument("--worker-pool-port", type=int, default=50000,
                          help="the worker pool's port (0: any free one)")
    services.set_defaults(handler=beam_services, quiet=True)


def beam_services(args: argparse.Namespace, ending: Ending) -> int:
    from pipeline.beam import services

    services.serve_forever(args.job_port, args.worker_pool_port)
    return ExitCode.OK
