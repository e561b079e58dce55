"""Compiles the same `create_pipeline(...)` for Kubeflow Pipelines v2 / Vertex AI.

The pipeline image (see `Dockerfile`) has this package installed, so user code is
referred to by module path and the curated schema is read from inside the image.
Nothing of the build machine's file system goes into the compiled spec.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Dict, Optional, Tuple

from tfx import v1 as tfx

from components import window
from components.trainer.settings import ExportConfig, TrainConfig
from pipeline import config as config_lib
from pipeline import defaults
from pipeline import pipeline as pipeline_lib

# Where the Dockerfile installs the package; the schema ships inside it.
IMAGE_SCHEMA_DIR = "/pipeline/components/schema"
# On Vertex the Beam components run Dataflow or the portable runner, as the user says;
# the local in-memory settings and setup file make no sense there.
DEFAULT_VERTEX_BEAM_ARGS: Tuple[str, ...] = ("--max_cache_memory_usage_mb=0",)


@dataclasses.dataclass(frozen=True)
class KubeflowConfig:
    image: str
    pipeline_root: str
    data_root: str
    serving_dir: str
    beam_args: Tuple[str, ...] = DEFAULT_VERTEX_BEAM_ARGS
    schema_dir: str = IMAGE_SCHEMA_DIR
    pipeline_name: str = config_lib.PIPELINE_NAME
    model_name: str = config_lib.MODEL_NAME
    keep_versions: int = defaults.KEEP_VERSIONS
    # Rolling window of the newest spans, chosen on each run; None: every span.
    window_size: Optional[int] = defaults.WINDOW_SIZE
    train: TrainConfig = TrainConfig()
    evaluation: config_lib.EvaluationConfig = config_lib.EvaluationConfig()

    def __post_init__(self) -> None:
        for name in ("pipeline_root", "data_root", "serving_dir"):
            value = getattr(self, name)
            if "://" not in value:
                raise ValueError(f"{name} must be a remote URI (gs://...) the pipeline's pods can read, got {value!r}")
        if not self.image:
            raise ValueError("an image is required")


def build_pipeline(kfp_config: KubeflowConfig) -> tfx.dsl.Pipeline:
    return pipeline_lib.create_pipeline(
        pipeline_name=kfp_config.pipeline_name,
        pipeline_root=kfp_config.pipeline_root,
        data_root=kfp_config.data_root,
        schema_path=kfp_config.schema_dir,
        serving_model_dir=f"{kfp_config.serving_dir.rstrip('/')}/{kfp_config.model_name}",
        train=kfp_config.train,
        export_settings=ExportConfig(model_name=kfp_config.model_name),
        evaluation=kfp_config.evaluation,
        code_version=config_lib.code_version(),
        keep_versions=kfp_config.keep_versions,
        window_size=kfp_config.window_size,
        beam_pipeline_args=kfp_config.beam_args,
        metadata_connection_config=None,
    )


def _name_existing_producer_tasks(tasks: Dict[str, Any]) -> None:
    """Points each runtime parameter at the task that produces it.

    TFX 1.16 compiles a parameter taken from another node's output (`.future()[0].value`)
    as coming from task `<node id>_task`, but names that task `<node id>`: no task
    of that name exists, and the run could not resolve the parameter.
    """
    for task in tasks.values():
        for parameter in task.get("inputs", {}).get("parameters", {}).values():
            output = parameter.get("taskOutputParameter")
            if output and output["producerTask"] not in tasks and output["producerTask"].endswith("_task"):
                producer = output["producerTask"][: -len("_task")]
                if producer in tasks:
                    output["producerTask"] = producer


def compile_pipeline(kfp_config: KubeflowConfig, output_path: str) -> Dict[str, Any]:
    """Writes the PipelineJob JSON for Vertex AI / KFP v2 and returns it as a dict.

    The SpanWindow task's cache is turned off: with the same parameters on every run,
    Vertex would otherwise reuse the first run's window forever.
    """
    runner = tfx.orchestration.experimental.KubeflowV2DagRunner(
        config=tfx.orchestration.experimental.KubeflowV2DagRunnerConfig(default_image=kfp_config.image),
        output_dir=os.path.dirname(os.path.abspath(output_path)),
        output_filename=os.path.basename(output_path),
    )
    job = runner.run(build_pipeline(kfp_config), write_out=False)
    tasks = job["pipelineSpec"]["root"]["dag"]["tasks"]
    if window.NODE_ID in tasks:
        tasks[window.NODE_ID]["cachingOptions"] = {"enableCache": False}
    _name_existing_producer_tasks(tasks)
    with open(output_path, "w") as handle:
        json.dump(job, handle, indent=2, sort_keys=True)
    return job
