"""Runs a compiled PipelineJob JSON (`taxi-pipeline compile`) here, task by task, each task
inside the pipeline image, the way Vertex AI Pipelines runs it. Test code.

What it stands in for, as Vertex AI does it:
- the DAG, fail-slow as Vertex by default: each task once every task it waits for has
  ended (its `dependentTasks`, and the producers of the artifacts and parameters it takes),
  beside the others then ready, the `tfx-dag` sub-DAG first and the exit handler last, with the
  sub-DAG's final status (`PipelineTaskFinalStatus` as a JSON string, `state` SUCCEEDED or
  FAILED with the failing task's error) whatever happened;
- each container task: a fresh container of the image (`buildah from`, chroot isolation)
  running the exact `command` and `args` of the JSON, `{{$}}` replaced by the ExecutorInput
  built as Vertex builds it for a schema-2.0.0 spec: the task's constants and upstream
  outputs as `inputs.parameters`, upstream artifacts with their `name`, `type`, `uri` and
  `metadata`, output artifacts provisioned under the pipeline root at
  `<root>/<project>/<job>/<task>_<uuid>/<output>`, and `outputs.outputFile`; after it, the
  ExecutorOutput's `uri` and `metadata` merged into the provisioned artifacts and its
  `parameterValues` made the task's output parameters;
- `lifecycle.preCacheCheck` (ImportExampleGen's driver): run first, in its own container,
  with the same ExecutorInput; its `parameterValues` then replace the executor's
  parameters and its artifact metadata is merged into the output artifact;
- `triggerPolicy.condition`: evaluated by a CEL implementation (cel-python) on the task's
  inputs, artifact metadata as a protobuf Struct holds it (every number a double); a false
  condition skips the task, and a task whose upstream was skipped is not triggered;
- resolver tasks: their `outputArtifactQueries` filters (`schema_title`, `state`,
  `name`, `metadata.K.number_value`) answered from the artifacts that earlier jobs of this
  harness recorded in the same state folder, newest first, limit 1 (none on a first run);
- runtime constants that are whole values (`{{$.pipeline_job_uuid}}` and the like).

- Vertex's cache, on unless the job is made with `enable_caching=False`: a task whose
  `cachingOptions.enableCache` is true is keyed as KFP's backend keys it (`cache_key`), after
  its `preCacheCheck` driver ran, and a hit within the same pipeline name hands on the last
  successful execution's outputs, the same artifacts, without running the container.

What it does not do: retries (but a container that
buildah failed to start is started again: `START_FAILURE`), machine types and
resource limits, Vertex ML Metadata's API (artifacts live in a JSON file), service
accounts, and importer tasks (the pipeline has none: the harness refuses them).
Cloud Storage is real Cloud Storage's API, served by an emulator (tests/image/gcs.py):
the tasks get `gs://` URIs under the pipeline root, as on Vertex, and reach the emulator
under Cloud Storage's own host names, which their containers resolve to a loopback
address and nothing else (no DNS). The job's failure message (`task X failed: ...`,
code 13) is the harness's own wording.
Each task's output goes to `<state>/<job>/logs/<task>.log` (`.driver.log` for a driver),
and the job's states and times to `<state>/<job>/job.json`.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import os
import re
import signal
import subprocess
import threading
import time
import uuid
from typing import Any, Dict, List, Optional, Protocol, Sequence, Tuple

import celpy

BUCKET_NAME = "taxi-harness"
BUCKET = f"gs://{BUCKET_NAME}"
MODEL = "big_tip"

PROJECT_NUMBER = "0"
LOCATION = "local"
ARTIFACT_PREFIX = f"projects/{PROJECT_NUMBER}/locations/{LOCATION}/metadataStores/default/artifacts/"
# Whole-value runtime constants the backend resolves, and what they are here.
RUNTIME_CONSTANTS = ("pipeline_job_uuid", "pipeline_job_name", "pipeline_job_resource_name",
                     "pipeline_job_create_time_utc", "pipeline_job_schedule_time_utc")
TASK_TIMEOUT_SECONDS = 900
# What buildah itself prints after a command that failed in the container.
BUILDAH_LINE = re.compile(r"^(subprocess exited with status \d+|Error: exit status \d+)$")
# What buildah prints when the container never started: its chroot isolation re-executes
# buildah from a sealed memfd copy (containers/storage's unshare), and the kernel can refuse
# the seal for a moment (EBUSY) on a busy machine. Vertex AI's own infrastructure has no
# such step, so the harness starts a fresh container again, at most START_ATTEMPTS times.
START_FAILURE = re.compile(r"sealing memfd copy|Error during reexec|write\(anonfd\)")
START_ATTEMPTS = 3


class Storage(Protocol):
    """The pipeline root's storage, as this machine reads it (tasks write it themselves)."""

    def read(self, uri: str) -> Optional[bytes]:
        """The object at `uri`, or None when there is none."""

    def delete(self, uri: str) -> None:
        """Deletes the object at `uri`."""


class HarnessError(Exception):
    """The JSON asks for something this harness does not stand in for."""


@dataclasses.dataclass
class TaskResult:
    name: str
    state: str  # SUCCEEDED, CACHED, FAILED, SKIPPED, NOT_TRIGGERED
    seconds: float = 0.0
    log: str = ""
    error: str = ""
    outputs: Dict[str, List[Dict[str, Any]]] = dataclasses.field(default_factory=dict)
    parameters: Dict[str, Any] = dataclasses.field(default_factory=dict)
    cache_key: str = ""


@dataclasses.dataclass
class JobResult:
    job_id: str
    state: str  # the tfx-dag's final state
    tasks: Dict[str, TaskResult]
    final_status: Dict[str, Any]
    seconds: float

    def log_of(self, task: str) -> str:
        path = self.tasks[task].log
        if not (path and os.path.exists(path)):
            return ""
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()


class Image:
    """Runs commands in fresh containers of one image, with bind mounts, host names
    resolved as given (`name:address`) and nothing else (no DNS), and variables set."""

    def __init__(self, image: str, mounts: Dict[str, str], hosts: Sequence[str] = (),
                 env: Optional[Dict[str, str]] = None):
        self.image = image
        self.mounts = mounts  # host path -> path in the container
        self.hosts = list(hosts)
        self.env = dict(env or {})

    def run(self, argv: List[str], log_path: str, timeout: float = TASK_TIMEOUT_SECONDS,
            env: Optional[Dict[str, str]] = None) -> int:
        for attempt in range(1, START_ATTEMPTS + 1):
            start = os.path.getsize(log_path) if os.path.exists(log_path) else 0
            status = self.run_once(argv, log_path, timeout, env)
            if status == 0 or not self.never_started(log_path, start) or attempt == START_ATTEMPTS:
                return status
            with open(log_path, "a", encoding="utf-8") as log:
                log.write(f"[harness] the container did not start (attempt {attempt}); starting a fresh one\n")
        return status

    @staticmethod
    def never_started(log_path: str, start: int) -> bool:
        """Whether all that an attempt wrote is buildah's own failure to start the container."""
        with open(log_path, encoding="utf-8", errors="replace") as handle:
            handle.seek(start)
            lines = [line for line in handle.read().splitlines() if line.strip()]
        return any(START_FAILURE.search(line) for line in lines) and all(
            START_FAILURE.search(line) or BUILDAH_LINE.match(line) for line in lines)

    def run_once(self, argv: List[str], log_path: str, timeout: float, env: Optional[Dict[str, str]] = None) -> int:
        return self.start(argv, log_path, env).wait(timeout)

    def start(self, argv: List[str], log_path: str, env: Optional[Dict[str, str]] = None) -> "Running":
        """Starts `argv` in a fresh container, with `env` over the image's variables;
        `wait()` or `kill()` the result."""
        made = subprocess.run(["buildah", "from", "--pull-never", "--quiet", "--dns", "none"]
                              + [f"--add-host={host}" for host in self.hosts] + [self.image],
                              capture_output=True, text=True)
        if made.returncode != 0:
            raise HarnessError(f"no container of {self.image}: {made.stderr.strip()}")
        container = made.stdout.strip()
        command = ["buildah", "run", "--isolation", "chroot"]
        for host, inside in self.mounts.items():
            command += ["--volume", f"{host}:{inside}"]
        for key, value in sorted({**self.env, **(env or {})}.items()):
            command += ["--env", f"{key}={value}"]
        command += [container, "--"] + argv
        log = open(log_path, "ab")  # noqa: SIM115 (closed by Running)
        try:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError:
            log.close()
            subprocess.run(["buildah", "rm", container], capture_output=True)
            raise
        return Running(process, container, log)


class Running:
    """A command running in a container of the image."""

    def __init__(self, process: subprocess.Popen, container: str, log: Any):
        self.process = process
        self.container = container
        self.log = log

    def wait(self, timeout: float = TASK_TIMEOUT_SECONDS) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.log.write(f"\n[harness] timed out after {timeout} s\n".encode())
            return 124
        finally:
            self.kill()

    def kill(self) -> None:
        """Kills the command and everything it started (a timeout, or a test's fault), then
        removes the container."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        if not self.log.closed:
            self.log.close()
            subprocess.run(["buildah", "rm", self.container], capture_output=True)


class ArtifactStore:
    """The artifacts every job recorded: what the resolver tasks query. Safe for the
    job's tasks that run at once."""

    def __init__(self, path: str):
        self.path = path
        self.lock = threading.Lock()
        self.data = {"next_id": 1, "artifacts": []}
        if os.path.exists(path):
            with open(path) as handle:
                self.data = json.load(handle)

    def new_name(self) -> str:
        with self.lock:
            name = f"{ARTIFACT_PREFIX}{self.data['next_id']}"
            self.data["next_id"] += 1
        return name

    def record(self, pipeline: str, job_id: str, artifact: Dict[str, Any]) -> None:
        with self.lock:
            self.data["artifacts"].append(dict(artifact, pipeline=pipeline, job=job_id, state="LIVE"))
            _write_json(self.path, self.data)

    def query(self, pipeline: str, query: str) -> List[Dict[str, Any]]:
        """The newest artifact of `pipeline` matching a Vertex ML Metadata filter of the
        clauses TFX compiles, joined by AND; an empty list when none does."""
        tests = []
        for clause in query.split(" AND "):
            clause = clause.strip()
            match = re.fullmatch(r'(schema_title|name)="(.*)"', clause)
            if match:
                key, value = match.groups()
                tests.append(lambda a, k=key, v=value: (artifact_title(a) if k == "schema_title" else a["name"]) == v)
                continue
            match = re.fullmatch(r"state=(\w+)", clause)
            if match:
                tests.append(lambda a, v=match.group(1): a["state"] == v)
                continue
            match = re.fullmatch(r"metadata\.(\w+)\.number_value=([-\d.]+)", clause)
            if match:
                tests.append(lambda a, k=match.group(1), v=float(match.group(2)):
                             isinstance(a["metadata"].get(k), (int, float)) and float(a["metadata"][k]) == v)
                continue
            raise HarnessError(f"resolver filter clause not understood: {clause!r}")
        with self.lock:
            found = [a for a in self.data["artifacts"] if a["pipeline"] == pipeline and all(t(a) for t in tests)]
        return [strip_record(found[-1])] if found else []


def container_env(container: Dict[str, Any]) -> Dict[str, str]:
    """The variables a task's container spec sets (`env`), which Vertex AI sets in the
    task's container."""
    return {variable["name"]: variable["value"] for variable in container.get("env", [])}


def cache_key(image: str, container: Dict[str, Any], executor_input: Dict[str, Any],
              output_definitions: Dict[str, Any], environment: bool = True) -> str:
    """A task's cache key, as KFP's backend computes it (`backend/src/v2/cacheutils/cache.go`,
    GenerateCacheKey and GenerateFingerPrint; docs/vertex.md quotes them): the SHA-256 of
    the compact, key-sorted JSON of the input artifacts' names, the input parameters' values,
    the output artifacts' specs (name, type and metadata, the URI wiped), the output
    parameters' types, and the container's image and unresolved command and arguments.
    Vertex AI documents the same inputs, and the container's environment too (`environment`;
    KFP's own backend leaves it out). The artifacts' names here are one-to-one with the
    metadata store's ids KFP keys by."""
    inputs, outputs = executor_input["inputs"], executor_input["outputs"]
    key: Dict[str, Any] = {
        "inputArtifactNames": {
            name: {"artifactNames": [artifact["name"] for artifact in spec["artifacts"]]}
            for name, spec in inputs["artifacts"].items()},
        "inputParameterValues": inputs.get("parameterValues", inputs.get("parameters")),
        "outputArtifactsSpec": {
            name: {"name": name, "type": spec["artifacts"][0]["type"], "metadata": spec["artifacts"][0]["metadata"]}
            for name, spec in outputs["artifacts"].items() if spec["artifacts"]},
        "outputParametersSpec": {name: definition.get("parameterType") or definition.get("type", "")
                                 for name, definition in output_definitions.get("parameters", {}).items()},
        "containerSpec": {"image": image, "cmdArgs": list(container["command"]) + list(container.get("args", []))},
    }
    if environment:
        key["containerSpec"]["env"] = container.get("env", [])
    text = json.dumps(key, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


class Cache:
    """What KFP's cache holds: per pipeline name and key, the outputs of the last
    successful execution, which a hit hands on unchanged (the same artifacts, so the tasks
    after a hit can hit too). Safe for the job's tasks that run at once."""

    def __init__(self, path: str):
        self.path = path
        self.lock = threading.Lock()
        self.data: Dict[str, Any] = {}
        if os.path.exists(path):
            with open(path) as handle:
                self.data = json.load(handle)

    def get(self, pipeline: str, key: str) -> Optional[Dict[str, Any]]:
        with self.lock:
            return self.data.get(f"{pipeline}/{key}")

    def put(self, pipeline: str, key: str, outputs: Dict[str, Any], parameters: Dict[str, Any]) -> None:
        with self.lock:
            self.data[f"{pipeline}/{key}"] = {"outputs": outputs, "parameters": parameters}
            _write_json(self.path, self.data)


def _write_json(path: str, data: Any) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(data, handle, indent=1)
    os.replace(tmp, path)


def strip_record(artifact: Dict[str, Any]) -> Dict[str, Any]:
    return {key: artifact[key] for key in ("name", "type", "uri", "metadata")}


def artifact_title(artifact: Dict[str, Any]) -> str:
    kind = artifact["type"]
    if "schemaTitle" in kind:
        return kind["schemaTitle"]
    match = re.search(r"^title:\s*(\S+)", kind.get("instanceSchema", ""), re.M)
    return match.group(1) if match else ""


def as_struct(value: Any) -> Any:
    """A JSON value as a protobuf Struct holds it: every number a double."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, dict):
        return {key: as_struct(item) for key, item in value.items()}
    if isinstance(value, list):
        return [as_struct(item) for item in value]
    return value


def legacy_value(value: Any, kind: str) -> Dict[str, Any]:
    """A parameter value in the schema-2.0.0 form (`pipeline_spec.Value`) for a `kind`
    (STRING, INT, DOUBLE) input definition."""
    if kind == "INT":
        return {"intValue": str(int(value))}
    if kind == "DOUBLE":
        return {"doubleValue": float(value)}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, float) and value.is_integer():
        return {"stringValue": str(int(value))}
    return {"stringValue": json.dumps(value) if isinstance(value, (dict, list)) else str(value)}


def upstream(task: Dict[str, Any]) -> List[str]:
    """The tasks a task waits for: its `dependentTasks` and the producers of its inputs."""
    names = set(task.get("dependentTasks", []))
    for spec in task.get("inputs", {}).get("artifacts", {}).values():
        if "taskOutputArtifact" in spec:
            names.add(spec["taskOutputArtifact"]["producerTask"])
    for spec in task.get("inputs", {}).get("parameters", {}).values():
        if "taskOutputParameter" in spec:
            names.add(spec["taskOutputParameter"]["producerTask"])
    return sorted(names)


def dag_order(tasks: Dict[str, Any]) -> List[str]:
    """The tasks in an order that runs each after every task it waits for."""
    done: List[str] = []
    pending = sorted(tasks)
    while pending:
        ready = [name for name in pending if all(dep in done for dep in upstream(tasks[name]))]
        if not ready:
            raise HarnessError(f"tasks wait on tasks that are not in the DAG, or on each other: {pending}")
        done += ready
        pending = [name for name in pending if name not in ready]
    return done


def condition_holds(condition: str, inputs: Dict[str, Any]) -> bool:
    """A `triggerPolicy.condition` (CEL) on a task's inputs, as Vertex AI evaluates it."""
    environment = celpy.Environment()
    program = environment.program(environment.compile(condition))
    result = program.evaluate({"inputs": celpy.json_to_cel(as_struct(inputs))})
    if not isinstance(result, celpy.celtypes.BoolType):
        raise HarnessError(f"condition {condition!r} gave {result!r}, not a bool")
    return bool(result)


def resolve_filter(query: str, inputs: Dict[str, Any]) -> str:
    """A resolver's filter with its `{{$.inputs.artifacts['K'].metadata['P']}}` filled in."""
    def metadata(match: "re.Match[str]") -> str:
        artifacts = inputs["artifacts"].get(match.group(1), {}).get("artifacts", [])
        return str(artifacts[0]["metadata"].get(match.group(2), "")) if artifacts else ""

    return re.sub(r"\{\{\$\.inputs\.artifacts\['([^']+)'\]\.metadata\['([^']+)'\]\}\}", metadata, query)


class VertexJob:
    """One PipelineJob of a compiled JSON, run here (see the module's docstring)."""

    # The ExecutorInput's field of input parameters (schema 2.0.0's legacy values).
    PARAMETERS = "parameters"
    # Whether a container's `lifecycle.preCacheCheck` runs before it.
    RUNS_HOOKS = True
    # Whether the container's environment is part of the cache key.
    KEYED_BY_ENV = True

    def __init__(self, job_json: str, image: Image, storage: Storage, state_dir: str, enable_caching: bool = True):
        self.spec, self.root = self.load(job_json)
        self.image = image
        self.storage = storage
        self.pipeline = self.spec["pipelineInfo"]["name"]
        self.state_dir = state_dir
        self.store = ArtifactStore(os.path.join(state_dir, "artifacts.json"))
        self.cache = Cache(os.path.join(state_dir, "cache.json")) if enable_caching else None
        self.job_id = f"{self.pipeline}-{time.strftime('%Y%m%d%H%M%S')}-{uuid.uuid4().hex[:6]}"
        self.created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.logs = os.path.join(state_dir, self.job_id, "logs")
        os.makedirs(self.logs, exist_ok=True)

    def load(self, path: str) -> Tuple[Dict[str, Any], str]:
        """The pipeline spec and the pipeline root of the compiled file."""
        with open(path) as handle:
            job = json.load(handle)
        spec = job["pipelineSpec"]
        if spec.get("schemaVersion") != "2.0.0":
            raise HarnessError(f"schema {spec.get('schemaVersion')} (this harness builds 2.0.0 inputs)")
        return spec, job["runtimeConfig"]["gcsOutputDirectory"].rstrip("/")

    def constant_value(self, runtime: Dict[str, Any], kind: str) -> Any:
        value = dict(runtime["constantValue"])
        if "stringValue" in value:
            value["stringValue"] = self.constant(value["stringValue"])
        return value

    def passed_value(self, value: Any, kind: str) -> Any:
        return legacy_value(value, kind)

    def final_status_value(self, final_status: Optional[Dict[str, Any]]) -> Any:
        return {"stringValue": json.dumps(final_status, separators=(",", ":"))}

    def task_env(self, component: Dict[str, Any], container: Dict[str, Any]) -> Dict[str, str]:
        return container_env(container)

    def constant(self, value: str) -> str:
        match = re.fullmatch(r"\{\{\$\.(\w+)\}\}", value)
        if not match:
            return value
        key = match.group(1)
        if key not in RUNTIME_CONSTANTS:
            raise HarnessError(f"runtime constant {value} not known to the harness")
        return {
            "pipeline_job_uuid": self.job_id,
            "pipeline_job_name": self.job_id,
            "pipeline_job_resource_name": self.resource_name,
            "pipeline_job_create_time_utc": self.created,
            "pipeline_job_schedule_time_utc": self.created,
        }[key]

    @property
    def resource_name(self) -> str:
        return f"projects/{PROJECT_NUMBER}/locations/{LOCATION}/pipelineJobs/{self.job_id}"

    # ---- the job
    def run(self) -> JobResult:
        started = time.perf_counter()
        root_tasks = self.spec["root"]["dag"]["tasks"]
        results: Dict[str, TaskResult] = {}
        dag_names = [name for name, task in root_tasks.items() if "dag" in self.component(task)]
        exit_names = [name for name in root_tasks if name not in dag_names]
        final_status: Dict[str, Any] = {}
        state = "SUCCEEDED"
        if dag_names:
            for dag_name in dag_names:
                state, error = self.run_dag(self.component(root_tasks[dag_name])["dag"]["tasks"], results)
                final_status = {"state": state, "error": error, "pipelineJobResourceName": self.resource_name,
                                "pipelineTaskName": dag_name}
                results[dag_name] = TaskResult(dag_name, state, error=error.get("message", ""))
            for name in exit_names:
                results[name] = self.run_task(name, root_tasks[name], results, final_status)
        else:
            state, error = self.run_dag(root_tasks, results)
            final_status = {"state": state, "error": error}
        result = JobResult(self.job_id, state, results, final_status, time.perf_counter() - started)
        with open(os.path.join(self.state_dir, self.job_id, "job.json"), "w") as handle:
            json.dump(dataclasses.asdict(result), handle, indent=1)
        return result

    def component(self, task: Dict[str, Any]) -> Dict[str, Any]:
        return self.spec["components"][task["componentRef"]["name"]]

    def run_dag(self, tasks: Dict[str, Any], results: Dict[str, TaskResult]) -> Tuple[str, Dict[str, Any]]:
        """Every task of the DAG, each as soon as every task it waits for has ended, beside
        the others that are ready (as Vertex AI and Argo start them)."""
        order = dag_order(tasks)
        pending = list(order)
        running: Dict[concurrent.futures.Future, str] = {}
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(tasks)) as pool:
            while pending or running:
                for name in [name for name in pending if all(dep in results for dep in upstream(tasks[name]))]:
                    pending.remove(name)
                    waited = [results[dep].state for dep in upstream(tasks[name])]
                    if any(state in ("FAILED", "NOT_TRIGGERED", "SKIPPED") for state in waited):
                        results[name] = TaskResult(name, "NOT_TRIGGERED")
                    else:
                        running[pool.submit(self.run_task, name, tasks[name], dict(results))] = name
                if not running:
                    continue
                ended, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
                for future in ended:
                    results[running.pop(future)] = future.result()
        # Fail-slow, Vertex AI's default: tasks that do not wait for a failed one still run.
        failed = [name for name in order if results[name].state == "FAILED"]
        if failed:
            return "FAILED", {"code": 13, "message": f"task {failed[0]} failed: {results[failed[0]].error}"}
        return "SUCCEEDED", {}

    # ---- one task
    def inputs(self, name: str, task: Dict[str, Any], results: Dict[str, TaskResult],
               final_status: Optional[Dict[str, Any]]) -> Dict[str, Any]:
        definitions = self.component(task).get("inputDefinitions", {})
        parameters: Dict[str, Any] = {}
        for key, spec in task.get("inputs", {}).get("parameters", {}).items():
            definition = definitions.get("parameters", {}).get(key, {})
            kind = definition.get("parameterType") or definition.get("type", "STRING")
            if "runtimeValue" in spec:
                parameters[key] = self.constant_value(spec["runtimeValue"], kind)
            elif "taskOutputParameter" in spec:
                source = spec["taskOutputParameter"]
                parameters[key] = self.passed_value(
                    results[source["producerTask"]].parameters[source["outputParameterKey"]], kind)
            elif "taskFinalStatus" in spec:
                parameters[key] = self.final_status_value(final_status)
            else:
                raise HarnessError(f"{name}: parameter {key} of a kind the harness does not know: {spec}")
        artifacts: Dict[str, Any] = {}
        for key, spec in task.get("inputs", {}).get("artifacts", {}).items():
            if "taskOutputArtifact" not in spec:
                raise HarnessError(f"{name}: artifact input {key} of a kind the harness does not know: {spec}")
            source = spec["taskOutputArtifact"]
            artifacts[key] = {"artifacts": results[source["producerTask"]].outputs.get(source["outputArtifactKey"], [])}
        return {self.PARAMETERS: parameters, "artifacts": artifacts}

    def run_task(self, name: str, task: Dict[str, Any], results: Dict[str, TaskResult],
                 final_status: Optional[Dict[str, Any]] = None) -> TaskResult:
        started = time.perf_counter()
        component = self.component(task)
        executor = self.spec["deploymentSpec"]["executors"][component["executorLabel"]]
        inputs = self.inputs(name, task, results, final_status)
        condition = task.get("triggerPolicy", {}).get("condition")
        if condition and not condition_holds(condition, inputs):
            return TaskResult(name, "SKIPPED")
        if "resolver" in executor:
            outputs = {}
            for key, query in executor["resolver"]["outputArtifactQueries"].items():
                outputs[key] = self.store.query(self.pipeline, resolve_filter(query["filter"], inputs))
            return TaskResult(name, "SUCCEEDED", time.perf_counter() - started, outputs=outputs)
        if "container" not in executor:
            raise HarnessError(f"{name}: executor kind {sorted(executor)} not run by this harness")
        cached = bool(task.get("cachingOptions", {}).get("enableCache")) and self.cache is not None
        return self.run_container(name, component, executor["container"], inputs, started, cached)

    def run_container(self, name: str, component: Dict[str, Any], container: Dict[str, Any],
                      inputs: Dict[str, Any], started: float, cached: bool = False) -> TaskResult:
        task_root = f"{self.root}/{PROJECT_NUMBER}/{self.job_id}/{name}_{uuid.uuid4().hex[:12]}"
        output_definitions = component.get("outputDefinitions", {})
        outputs = {}
        for key, definition in output_definitions.get("artifacts", {}).items():
            outputs[key] = {"artifacts": [{
                "name": self.store.new_name(), "type": definition["artifactType"],
                "uri": f"{task_root}/{key}", "metadata": dict(definition.get("metadata", {})),
            }]}
        executor_input = {
            "inputs": inputs,
            "outputs": {
                "artifacts": outputs,
                "parameters": {key: {"outputFile": f"{task_root}/parameters/{key}"}
                               for key in output_definitions.get("parameters", {})},
                "outputFile": f"{task_root}/executor_output.json",
            },
        }
        output_file = executor_input["outputs"]["outputFile"]
        log = os.path.join(self.logs, f"{name}.log")
        hook = container.get("lifecycle", {}).get("preCacheCheck") if self.RUNS_HOOKS else None
        env = self.task_env(component, container)
        if hook:
            driver_log = os.path.join(self.logs, f"{name}.driver.log")
            status = self.image.run(self.argv(hook, executor_input), driver_log, env=env)
            if status != 0:
                return self.failed(name, started, driver_log, f"its preCacheCheck driver exited {status}")
            driver_output = self.read_json(output_file)
            if driver_output is None:
                return self.failed(name, started, driver_log, "its preCacheCheck driver wrote no output")
            kinds = component.get("inputDefinitions", {}).get("parameters", {})
            for key, value in driver_output.get("parameterValues", {}).items():
                inputs["parameters"][key] = legacy_value(value, kinds.get(key, {}).get("type", "STRING"))
            for key, produced in driver_output.get("artifacts", {}).items():
                if key in outputs and produced.get("artifacts"):
                    outputs[key]["artifacts"][0]["metadata"].update(produced["artifacts"][0].get("metadata", {}))
            self.storage.delete(output_file)
        fingerprint = cache_key(self.image.image, container, executor_input, output_definitions,
                                self.KEYED_BY_ENV) if cached else ""
        hit = self.cache.get(self.pipeline, fingerprint) if fingerprint else None
        if hit is not None:
            return TaskResult(name, "CACHED", time.perf_counter() - started, outputs=hit["outputs"],
                              parameters=hit["parameters"], cache_key=fingerprint)
        if env is None:
            with open(log, "w") as handle:
                handle.write("[harness] the task's container was not created: a Secret it needs is missing\n")
            return self.failed(name, started, log, "its pod was never started")
        status = self.image.run(self.argv(container, executor_input), log, env=env)
        if status != 0:
            return self.failed(name, started, log, f"exited {status}")
        produced = self.read_json(output_file) or {}
        result = TaskResult(name, "SUCCEEDED", time.perf_counter() - started, log=log)
        for key, spec in outputs.items():
            artifact = spec["artifacts"][0]
            made = (produced.get("artifacts", {}).get(key, {}).get("artifacts") or [{}])[0]
            artifact["uri"] = made.get("uri") or artifact["uri"]
            artifact["metadata"].update(made.get("metadata", {}))
            result.outputs[key] = [artifact]
            self.store.record(self.pipeline, self.job_id, artifact)
        result.parameters = dict(produced.get("parameterValues", {}))
        for key, spec in executor_input["outputs"]["parameters"].items():
            value = None if key in result.parameters else self.storage.read(spec["outputFile"])
            if value is not None:
                result.parameters[key] = value.decode()
        if fingerprint:
            self.cache.put(self.pipeline, fingerprint, result.outputs, result.parameters)
            result.cache_key = fingerprint
        return result

    def read_json(self, uri: str) -> Optional[Dict[str, Any]]:
        data = self.storage.read(uri)
        return None if data is None else json.loads(data)

    def argv(self, container: Dict[str, Any], executor_input: Dict[str, Any]) -> List[str]:
        serialized = json.dumps(executor_input, separators=(",", ":"))
        argv = []
        for arg in list(container["command"]) + list(container.get("args", [])):
            if "{{$" in arg and arg != "{{$}}":
                raise HarnessError(f"placeholder not known to the harness: {arg}")
            argv.append(serialized if arg == "{{$}}" else arg)
        return argv

    @staticmethod
    def failed(name: str, started: float, log: str, why: str) -> TaskResult:
        with open(log, encoding="utf-8", errors="replace") as handle:
            lines = [line for line in handle.read().splitlines() if line.strip() and not BUILDAH_LINE.match(line)]
        return TaskResult(name, "FAILED", time.perf_counter() - started, log=log,
                          error=f"{why}; last line of {log}: {lines[-1] if lines else '(empty)'}")


def report(job: JobResult) -> str:
    """Each task's state, time and error, for an assertion's message."""
    lines = [f"{name}: {task.state} {task.seconds:.1f} s {task.error}" for name, task in job.tasks.items()]
    return f"job {job.job_id} {job.state}\n" + "\n".join(lines)
