"""Compiles the same `create_pipeline(...)` for Kubeflow Pipelines v2 / Vertex AI.

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
from pipeline.cloud import compiled_fixes, notify, secrets

# The exit handler's task: runs when the pipeline ends, even after a failed component.
NOTIFY_NODE_ID = "NotifyFinalStatus"


def build_pipeline(kfp_config: config.KubeflowConfig) -> tfx.dsl.Pipeline:
    return pipeline_lib.create_pipeline(**kfp_config.pipeline_args())


def compile_pipeline(kfp_config: config.KubeflowConfig, output_path: str) -> Dict[str, Any]:
    """Writes the PipelineJob JSON for Vertex AI / KFP v2 and returns it as a dict."""
    runner = tfx.orchestration.experimental.KubeflowV2DagRunner(
        config=tfx.orchestration.experimental.KubeflowV2DagRunnerConfig(default_image=kfp_config.image)
    )
    if kfp_config.notify_secret:
        secrets.check_reference(kfp_config.notify_secret)
        # A plain string, not a RuntimeParameter: TFX 1.16-1.21 compile an exit handler
        # outside the pipeline's parameter context and fail on runtime parameters there.
        runner.set_exit_handler(notify.NotifyFinalStatus(
            final_status=tfx.orchestration.experimental.FinalStatusStr(), url_from=kfp_config.notify_secret,
            model_dir=kfp_config.model_serving_dir, job_created=notify.JOB_CREATED,
            data_root=kfp_config.data_root,
        ).with_id(NOTIFY_NODE_ID))
    job = runner.run(build_pipeline(kfp_config), write_out=False)
    for fix in (
        compiled_fixes.span_window_uncached_in_job,
        compiled_fixes.span_window_keyed_by_job,
        compiled_fixes.pusher_names_its_job,
        compiled_fixes.producer_tasks_named_as_compiled,
        compiled_fixes.cloud_storage_bounded_in_job,
    ):
        job = fix(job)
    with open(output_path, "w") as handle:
        json.dump(job, handle, indent=2, sort_keys=True)
    return job
