"""`compile --target kubeflow`: what Kubeflow Pipelines' own backend takes and runs, where
it differs from Vertex AI (docs/beyond-one-machine.md names the KFP sources read).

- The upload is a pipeline spec, not a PipelineJob: the API server takes a YAML (or JSON)
  PipelineSpec of schema 2.1.0 only, and a second YAML document, the platform spec, for
  what only Kubernetes can do. The pipeline root goes into the spec
  (`defaultPipelineRoot`); a run may override it.
- The backend runs a container's `lifecycle.preCacheCheck` hook never: TFX's
  ImportExampleGen driver, which fingerprints the input files, does not run there. So the
  task takes SpanWindow's digest of the window's files (`inputs_used`) as a parameter,
  which is in KFP's cache key: a late file in a span is a new key, not a stale hit. Its
  executor fingerprints the files itself (`components.custom.ingest`).
- No resolver task: the backend refuses one ("resolver not implemented yet") before any
  task starts. The baseline comes from ServingBaseline, which reads the serving record.
- The alert's URL from a Kubernetes Secret (`--notify-secret k8s:SECRET/KEY`): the
  platform spec asks KFP to set the exit handler's `config.NOTIFY_URL_ENV` from it,
  in the shape kfp-kubernetes' `use_secret_as_env` writes.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import yaml

from components.custom import window
from components.custom.recorded import NodeId
from pipeline import config
from pipeline.cloud import compiled_fixes, secrets

# The ImportExampleGen task's parameter that keys it by the window's files.
WINDOW_INPUTS_PARAMETER = "window_inputs"


def example_gen_keyed_by_window(job: Dict[str, Any]) -> Dict[str, Any]:
    """ImportExampleGen without the pre-cache hook KFP never runs, keyed instead by
    SpanWindow's `inputs_used`, passed by value."""
    spec = job["pipelineSpec"]
    tasks = compiled_fixes.dag_tasks(job)
    if NodeId.EXAMPLE_GEN not in tasks or NodeId.WINDOW not in tasks:
        return job
    compiled_fixes.string_parameter(job, NodeId.EXAMPLE_GEN, WINDOW_INPUTS_PARAMETER, {
        "taskOutputParameter": {"producerTask": NodeId.WINDOW, "outputParameterKey": window.INPUTS_KEY}})
    label = compiled_fixes.component_of(spec, tasks[NodeId.EXAMPLE_GEN])["executorLabel"]
    spec["deploymentSpec"]["executors"][label]["container"].pop("lifecycle", None)
    return job


def refuse_resolvers(spec: Dict[str, Any]) -> None:
    """A resolver task anywhere is refused here, as KFP's backend would refuse the upload."""
    resolvers = sorted(label for label, executor in spec["deploymentSpec"]["executors"].items()
                       if "resolver" in executor)
    if resolvers:
        raise ValueError(f"the pipeline holds resolver tasks ({', '.join(resolvers)}), which Kubeflow Pipelines' "
                         "backend does not run (\"resolver not implemented yet\"): compile for Vertex AI")


def secret_as_env(spec: Dict[str, Any], task: str, reference: str) -> Optional[Dict[str, Any]]:
    """The platform spec setting task `task`'s `config.NOTIFY_URL_ENV` from the
    Kubernetes Secret `reference` names (`k8s:SECRET/KEY`); None for another reference.
    Optional, as a Secret Manager secret the task cannot read: a missing Secret is a line in
    the task's log, and the job's outcome stands."""
    kubernetes = secrets.kubernetes_secret(reference)
    if kubernetes is None or task not in spec["root"]["dag"]["tasks"]:
        return None
    name, key = kubernetes
    label = compiled_fixes.component_of(spec, spec["root"]["dag"]["tasks"][task])["executorLabel"]
    return {"platforms": {"kubernetes": {"deploymentSpec": {"executors": {label: {"secretAsEnv": [{
        "secretName": name,
        "secretNameParameter": {"runtimeValue": {"constant": name}},
        "keyToEnv": [{"secretKey": key, "envVar": config.NOTIFY_URL_ENV}],
        "optional": True,
    }]}}}}}}


def documents(job: Dict[str, Any], pipeline_root: str, notify_task: str, notify_secret: str) -> List[Dict[str, Any]]:
    """The pipeline spec of `job` (compiled with schema 2.1.0), and the platform spec when
    one is needed."""
    spec = dict(job["pipelineSpec"], defaultPipelineRoot=pipeline_root)
    if spec.get("schemaVersion") != "2.1.0":
        raise ValueError(f"Kubeflow Pipelines' backend takes pipeline specs of schema 2.1.0, not "
                         f"{spec.get('schemaVersion')}")
    refuse_resolvers(spec)
    platform = secret_as_env(spec, notify_task, notify_secret) if notify_secret else None
    return [spec] + ([platform] if platform else [])


def write(path: str, docs: List[Dict[str, Any]]) -> None:
    with open(path, "w") as handle:
        yaml.safe_dump_all(docs, handle, sort_keys=True)
