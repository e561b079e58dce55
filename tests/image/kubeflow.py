"""Runs `compile --target kubeflow`'s pipeline spec here as Kubeflow Pipelines' own backend
runs it, where that differs from Vertex AI (tests/image/vertex.py runs the rest alike:
the DAG, containers of the image, the exit handler, conditions, artifacts on `gs://`).
Test code. From reading kubeflow/pipelines at 7b70c7b9 (docs/beyond-one-machine.md):

- the upload: a PipelineSpec of schema 2.1.0, maybe followed by a PlatformSpec; a
  PipelineJob is "unknown template format", another schema "KFP only supports schema
  version 2.1.0" (backend/src/apiserver/template); the pipeline root is the spec's
  `defaultPipelineRoot`;
- the compiler runs container and importer executors only; a resolver is refused before
  any task starts: "resolver not implemented yet" (backend/src/v2/compiler/argocompiler);
- no `lifecycle.preCacheCheck` hook runs;
- parameters in the 2.1.0 form: constants as `runtimeValue.constant`, the ExecutorInput's
  `inputs.parameterValues` as plain JSON values, an upstream number given to a STRING
  input turned into text, the exit handler's final status a Struct
  (backend/src/v2/driver/resolve.go);
- the cache key without the container's environment (backend/src/v2/cacheutils/cache.go),
  within the pipeline's name (one namespace here);
- the PlatformSpec's `secretAsEnv`: the task's variable set from a Kubernetes Secret's
  key, held here in `kubernetes_secrets`; a Secret that is missing leaves an optional
  variable unset, and keeps a task that needs it from starting.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Tuple

import yaml

from tests.image.vertex import HarnessError, Image, Storage, VertexJob, container_env

# backend/src/apiserver/template/v2_template.go (NewV2SpecTemplate).
SCHEMA_VERSION = "2.1.0"
# backend/src/v2/compiler/visitor.go (pipelineDFS.dfs): container and importer executors only.
EXECUTOR_KINDS = {"container", "importer"}


class KubeflowJob(VertexJob):
    """One run of a pipeline spec, as KFP's backend runs it (see the module's docstring)."""

    PARAMETERS = "parameterValues"
    RUNS_HOOKS = False
    KEYED_BY_ENV = False

    def __init__(self, spec_yaml: str, image: Image, storage: Storage, state_dir: str,
                 kubernetes_secrets: Optional[Dict[Tuple[str, str], str]] = None, enable_caching: bool = True):
        self.kubernetes_secrets = dict(kubernetes_secrets or {})
        self.platform: Dict[str, Any] = {}
        super().__init__(spec_yaml, image, storage, state_dir, enable_caching)

    def load(self, path: str) -> Tuple[Dict[str, Any], str]:
        with open(path) as handle:
            documents = [document for document in yaml.safe_load_all(handle) if document]
        spec = documents[0]
        if "pipelineSpec" in spec or "root" not in spec:
            raise HarnessError("unknown template format")
        if spec.get("schemaVersion") != SCHEMA_VERSION:
            raise HarnessError(f"KFP only supports schema version {SCHEMA_VERSION}, but got "
                               f"{spec.get('schemaVersion')}")
        for label, executor in spec["deploymentSpec"]["executors"].items():
            if "resolver" in executor:
                raise HarnessError(f"{label}: resolver not implemented yet")
            if not set(executor) <= EXECUTOR_KINDS:
                raise HarnessError(f"{label}: non-container and non-importer executor not implemented")
        self.platform = documents[1] if len(documents) > 1 else {}
        return spec, spec["defaultPipelineRoot"].rstrip("/")

    def constant_value(self, runtime: Dict[str, Any], kind: str) -> Any:
        value = runtime["constant"]
        return self.constant(value) if isinstance(value, str) else value

    def passed_value(self, value: Any, kind: str) -> Any:
        if kind == "STRING" and not isinstance(value, str):
            if isinstance(value, float) and value.is_integer():
                return str(int(value))
            return json.dumps(value) if isinstance(value, (dict, list)) else str(value)
        return value

    def final_status_value(self, final_status: Optional[Dict[str, Any]]) -> Any:
        return dict(final_status or {})

    def task_env(self, component: Dict[str, Any], container: Dict[str, Any]) -> Optional[Dict[str, str]]:
        """The container's variables and those its Secrets set; None when a Secret a task
        needs is missing (its pod is never started)."""
        env = container_env(container)
        executors = (self.platform.get("platforms", {}).get("kubernetes", {}).get("deploymentSpec", {})
                     .get("executors", {}))
        for secret in executors.get(component.get("executorLabel", ""), {}).get("secretAsEnv", []):
            name = secret.get("secretNameParameter", {}).get("runtimeValue", {}).get("constant") or secret["secretName"]
            for pair in secret["keyToEnv"]:
                value = self.kubernetes_secrets.get((name, pair["secretKey"]))
                if value is not None:
                    env[pair["envVar"]] = value
                elif not secret.get("optional", False):
                    return None
        return env
