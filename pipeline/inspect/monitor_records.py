"""`monitor` runs in MLMD: one execution each, in a `monitor_run` context of its own, so
that `history` lists them beside the pipeline's runs and `gc` (which reads `pipeline_run`
contexts only) leaves them alone."""

from __future__ import annotations

import dataclasses
import json
from typing import List

from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2 as mlmd

from pipeline.config import MetadataConfig
from pipeline.inspect import run_report

MONITOR_RUN_CONTEXT = "monitor_run"
MONITOR_EXECUTION = "taxi_pipeline.Monitor"
# The curated schema's environment of serving traffic (the label is not in it).
SERVING_ENVIRONMENT = "SERVING"


@dataclasses.dataclass
class MonitorRecord:
    monitor_id: str
    version: int
    requests: int
    malformed: int
    findings: List[str]
    page: str
    requests_glob: str
    training_run: str
    # Milliseconds since the epoch, as MLMD keeps it (set when read back).
    recorded: int = 0


def _type_id(store: metadata_store.MetadataStore, kind: str, name: str) -> int:
    message = mlmd.ContextType(name=name) if kind == "context" else mlmd.ExecutionType(name=name)
    return getattr(store, f"put_{kind}_type")(message)


def record(metadata: MetadataConfig, found: MonitorRecord) -> None:
    """Writes `found` as one complete execution in its own `monitor_run` context."""
    store = run_report.connect(metadata, writable=True)
    execution = mlmd.Execution(type_id=_type_id(store, "execution", MONITOR_EXECUTION),
                               last_known_state=mlmd.Execution.COMPLETE)
    values = dataclasses.asdict(found)
    del values["recorded"]
    for name, value in values.items():
        if isinstance(value, int):
            execution.custom_properties[name].int_value = value
        else:
            execution.custom_properties[name].string_value = value if isinstance(value, str) else json.dumps(value)
    context = mlmd.Context(type_id=_type_id(store, "context", MONITOR_RUN_CONTEXT), name=found.monitor_id)
    store.put_execution(execution, [], [context])


def read_all(store: metadata_store.MetadataStore) -> List[MonitorRecord]:
    """Every recorded monitor run, newest first."""
    found = []
    for context in store.get_contexts_by_type(MONITOR_RUN_CONTEXT):
        for execution in store.get_executions_by_context(context.id):
            properties = execution.custom_properties
            found.append(MonitorRecord(
                monitor_id=context.name,
                version=properties["version"].int_value,
                requests=properties["requests"].int_value,
                malformed=properties["malformed"].int_value,
                findings=json.loads(properties["findings"].string_value or "[]"),
                page=properties["page"].string_value,
                requests_glob=properties["requests_glob"].string_value,
                training_run=properties["training_run"].string_value,
                recorded=execution.create_time_since_epoch,
            ))
    return sorted(found, key=lambda r: r.recorded, reverse=True)


def describe(found: MonitorRecord) -> str:
    """A monitor run on one line, for `history`."""
    malformed = f" ({found.malformed} malformed)" if found.malformed else ""
    verdict = f"{len(found.findings)} finding(s): " + "; ".join(found.findings)[:200] if found.findings else "clean"
    return f"monitor of version {found.version}  {found.requests} requests{malformed}  {verdict}"
