"""Compiles the same `create_pipeline(...)` for Vertex AI (a PipelineJob JSON) or for
Kubeflow Pipelines' own backend (a pipeline spec: `pipeline.cloud.kubeflow_target`).

The pipeline image (see `Dockerfile`) has this package installed, so user code is
referred to by module path and the curated schema is read from inside the image.
Nothing of the build machine's file system goes into the compiled spec.
"""

from __future__ import annotations

import json
from typing import Any, Dict

from tfx import v1 as tfx

from pipeline import config
from pipeline import pipeline as pipeline_lib
from pipeline.cloud import compiled_fixes, kubeflow_target, notify, secrets

# The exit handler's task: runs when the pipeline ends, even after a failed component.
NOTIFY_NODE_ID = "NotifyFinalStatus"


def build_pipeline(kfp_config: config.KubeflowConfig) -> tfx.dsl.Pipeline:
    return pipeline_lib.create_pipeline(**kfp_config.pipeline_args())


def compile_pipeline(kfp_config: config.KubeflowConfig, output_path: str) -> Dict[str, Any]:
    """Writes what `kfp_config.target` runs (Vertex AI's PipelineJob JSON, or Kubeflow
    Pipelines' pipeline spec YAML) and returns the job as a dict."""
    kubeflow = kfp_config.target == config.KUBEFLOW
    runner = tfx.orchestration.experimental.KubeflowV2DagRunner(
        config=tfx.orchestration.experimental.KubeflowV2DagRunnerConfig(
            default_image=kfp_config.image, use_pipeline_spec_2_1=kubeflow)
    )
    if kfp_config.notify_secret:
        secrets.check_reference(kfp_config.notify_secret)
        if secrets.kubernetes_secret(kfp_config.notify_secret) and not kubeflow:
            raise ValueError(f"--notify-secret {kfp_config.notify_secret} names a Kubernetes Secret, which only "
                             "Kubeflow Pipelines on a cluster reads: give --target kubeflow, or for Vertex AI a "
                             "Secret Manager secret, projects/PROJECT/secrets/SECRET (docs/vertex.md#alerts)")
        # A plain string, not a RuntimeParameter: TFX 1.16-1.21 compile an exit handler
        # outside the pipeline's parameter context and fail on runtime parameters there.
        runner.set_exit_handler(notify.NotifyFinalStatus(
            final_status=tfx.orchestration.experimental.FinalStatusStr(), url_from=kfp_config.notify_secret,
            model_dir=kfp_config.model_serving_dir, job=compiled_fixes.PIPELINE_JOB_NAME,
            data_root=kfp_config.data_root,
        ).with_id(NOTIFY_NODE_ID))
    job = runner.run(build_pipeline(kfp_config), write_out=False)
    for fix in (
        compiled_fixes.span_window_uncached_in_job,
        compiled_fixes.span_window_keyed_by_job,
        compiled_fixes.pusher_names_its_job,
        compiled_fixes.producer_tasks_named_as_compiled,
        compiled_fixes.cloud_storage_bounded_in_job,
        compiled_fixes.tasks_end_at_once_in_job,
        *((kubeflow_target.example_gen_keyed_by_window,) if kubeflow else ()),
    ):
        job = fix(job)
    if kubeflow:
        kubeflow_target.write(output_path, kubeflow_target.documents(
            job, kfp_config.pipeline_root, NOTIFY_NODE_ID, kfp_config.notify_secret))
        return job
    with open(output_path, "w") as handle:
        json.dump(job, handle, indent=2, sort_keys=True)
    return job
