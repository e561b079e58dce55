"""A watch on the services a run waits on, for the length of the run: a MySQL metadata
store, Beam's job service and worker pool (`--beam portable|spark`) and Flink's
JobManager (`--beam flink`).

ML Metadata's MySQL client has no read timeout, and holds Python's GIL while it waits:
a server that stops answering mid-run without closing its sockets (stopped, a network
that drops packets) holds the run in a query forever, every thread of it with it, and a
scheduler's next call finds the output root's lock held. Beam's portable runner waits on
its job service's state stream with no bound either. So the watch is a process of its
own: while a run works it greets each service every `PROBE_SECONDS` (MySQL with
`failures.check_store`, gRPC services with a fresh connection's handshake, each bounded);
when one has not answered for `silence_seconds()`, it writes the run's last lines (the
log named, then what broke and what to do) and kills the run. A long Beam job is not
silence: its services answer greetings while they work. The run ends as a kill ends it
(`ExitCode.KILLED`, 137 in a shell), which every run survives (docs/operations.md): the lock goes with the
process, nothing is pushed but by the Pusher's last rename, and the next run resumes
from what the store recorded. A run given an alert webhook would never post it, killed:
the watch posts it.

    python -m pipeline.run.watch PID LOG_PATH SILENCE_SECONDS COMMAND SERVICE...

watches for PID until its standard input closes (the run's end; LOG_PATH "" for a command
without a log file of its own: `gc`, `history` and the other readers of a MySQL store,
which `pipeline/cli.py` watches the same way); a SERVICE is
`mysql://HOST:PORT/DB`, `job-service=HOST:PORT`, `worker-pool=HOST:PORT` or
`flink-master=HOST:PORT` (greeted over HTTP, its REST API). The webhook's
URL, if any, comes in its environment (`config.NOTIFY_URL_ENV`), never on its command line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import select
import signal
import subprocess
import sys
import time
from typing import Callable, Dict, Iterator, List, Optional, Sequence

from components.support import beam_place
from pipeline import config, failures
from pipeline.beam import services as beam_services
from pipeline.outcome import ExitCode

# How often each service is greeted while a run works.
PROBE_SECONDS = 10.0
# How long a gRPC service has to complete a connection's handshake.
GREETING_SECONDS = 5.0
# How long a service may stay silent before the run ends: two minutes, far beyond a
# service under load (its greeting comes before any work it does), and settable.
SILENCE_SECONDS = 120.0
SILENCE_ENV = "TAXI_SILENCE_SECONDS"
# What to do when Beam's services stop answering.
BEAM_ADVICE = "check it (here: `taxi-pipeline beam-services`), then run again"
NAMES = {"job-service": "Beam's job service", "worker-pool": "Beam's worker pool",
         "flink-master": "Flink's JobManager"}
FLINK_ADVICE = "check the Flink cluster (its JobManager's REST address, --flink-master), then run again"
# The commands that run the pipeline, which resume from what the store recorded.
RUNS = ("run", "retrain")


class Silent(RuntimeError):
    """A service did not answer a greeting; says how."""


def silence_seconds() -> float:
    return float(os.environ.get(SILENCE_ENV) or SILENCE_SECONDS)


@dataclasses.dataclass(frozen=True)
class Service:
    """A service the run waits on: `kind` (mysql, job-service, worker-pool) at `address`."""

    kind: str
    address: str

    @classmethod
    def parse(cls, text: str) -> "Service":
        if text.startswith("mysql://"):
            return cls("mysql", text)
        kind, _, address = text.partition("=")
        if kind not in NAMES or not address:
            raise ValueError(f"not a service to watch: {text!r}")
        return cls(kind, address)

    def __str__(self) -> str:
        return self.address if self.kind == "mysql" else f"{self.kind}={self.address}"

    def greet(self) -> None:
        if self.kind == "mysql":
            metadata = config.MetadataConfig("", config.MySqlAddress.parse(self.address.removeprefix("mysql://")))
            try:
                failures.check_store(metadata)
            except failures.StoreError as err:
                raise Silent(str(err).split("(", 1)[-1].split(")", 1)[0]) from err
            return
        if self.kind == "flink-master":
            silence = beam_services.http_silence(self.address, GREETING_SECONDS)
        else:
            silence = beam_services.grpc_silence(self.address, GREETING_SECONDS)
        if silence:
            raise Silent(silence)

    def stalled(self, seconds: float, why: str, command: str = "run") -> str:
        if self.kind == "mysql":
            what, advice = f"the metadata store {self.address}", "check the server, then run again"
        else:
            what = f"{NAMES[self.kind]} at {self.address}"
            advice = FLINK_ADVICE if self.kind == "flink-master" else BEAM_ADVICE
        if command not in RUNS:
            return (f"{what} stopped answering while `{command}` ran (no answer for {seconds:.0f} s; {why}): "
                    f"{advice}. " + failures.NOTHING_CHANGED)
        return (f"{what} stopped answering mid-run (no answer for {seconds:.0f} s; {why}): {advice}; the run "
                "resumes from the components it recorded. " + failures.NOTHING_CHANGED)


def services(metadata: config.MetadataConfig, pipeline_args: Sequence[str]) -> List[Service]:
    """The services a run of `metadata` with the Beam options `pipeline_args` waits on."""
    found = [Service("mysql", str(metadata.mysql))] if metadata.mysql is not None else []
    flink_master = beam_place.option(pipeline_args, "flink_master") or ""
    if beam_place.runner_name(beam_place.option(pipeline_args, "runner")) == "flink" and ":" in flink_master:
        # Not `[auto]` or `[local]`, Beam's own cluster in this process.
        found.append(Service("flink-master", flink_master.removeprefix("http://")))
    job_endpoint = beam_place.option(pipeline_args, "job_endpoint")
    if beam_place.runner_name(beam_place.option(pipeline_args, "runner")) == "portable" and job_endpoint:
        found.append(Service("job-service", job_endpoint))
        pool = beam_place.option(pipeline_args, "environment_config")
        if beam_place.option(pipeline_args, "environment_type") == "EXTERNAL" and pool:
            found.append(Service("worker-pool", pool))
    return found


def watch(watched: Sequence[Service], run_ended: Callable[[float], bool], probe_seconds: float = PROBE_SECONDS,
          silence: Optional[float] = None, command: str = "run") -> Optional[str]:
    """Greets each service every `probe_seconds` until `run_ended(timeout)` says the run
    ended (None) or one stayed silent for `silence` seconds (the message to say)."""
    limit = silence_seconds() if silence is None else silence
    silent_since: Dict[Service, float] = {}
    # A worker pool may sit beside remote workers (Spark's), out of this machine's reach:
    # only one that answered here once can stop answering.
    answered = {service for service in watched if service.kind != "worker-pool"}
    while not run_ended(probe_seconds):
        for service in watched:
            try:
                service.greet()
                silent_since.pop(service, None)
                answered.add(service)
            except Silent as err:
                if service not in answered:
                    continue
                now = time.monotonic()
                since = silent_since.setdefault(service, now)
                if now - since >= limit:
                    return service.stalled(now - since, str(err), command)
    return None


@contextlib.contextmanager
def watching(metadata: config.MetadataConfig, pipeline_args: Sequence[str], log_path: str, command: str = "run",
             notify_url: str = "") -> Iterator[None]:
    """Within the block, the services the run waits on are watched by a process of its
    own, which ends this process, saying why (and alerting `notify_url`), when one stops
    answering; a run on SQLite and Beam's in-process engine needs no watch."""
    watched = services(metadata, pipeline_args)
    if not watched:
        yield
        return
    environment = {name: value for name, value in os.environ.items() if name != config.NOTIFY_URL_ENV}
    if notify_url:
        environment[config.NOTIFY_URL_ENV] = notify_url
    watcher = subprocess.Popen(
        [sys.executable, "-m", __name__, str(os.getpid()), log_path, str(silence_seconds()), command,
         *map(str, watched)],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env=environment,
        # Its own session: a Ctrl-C at the terminal is the run's to answer (pipeline.interrupts),
        # and the watch ends when the run does (its stdin closes).
        start_new_session=True,
    )
    try:
        yield
    finally:
        watcher.stdin.close()  # the run's end: the watch ends
        with contextlib.suppress(subprocess.TimeoutExpired):
            watcher.wait(timeout=failures.STORE_TIMEOUT_SECONDS + GREETING_SECONDS + 1)


def main(argv: Sequence[str]) -> int:
    pid, log_path, silence, command = int(argv[1]), argv[2], float(argv[3]), argv[4]
    watched = [Service.parse(text) for text in argv[5:]]

    def run_ended(timeout: float) -> bool:
        readable, _, _ = select.select([sys.stdin], [], [], timeout)
        return bool(readable) and not sys.stdin.buffer.read1(1)

    # Greeted at least four times within the silence allowed, however short it is set.
    message = watch(watched, run_ended, probe_seconds=min(PROBE_SECONDS, max(silence / 4, 0.1)), silence=silence,
                    command=command)
    if message is None or run_ended(0):  # the run ended while the last greeting waited
        return 0
    if log_path:
        with contextlib.suppress(OSError), open(log_path, "a") as log:
            log.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} ERROR watch: {message}\n")
    print((f"Full log: {log_path}\n" if log_path else "") + f"error: {message}", file=sys.stderr, flush=True)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    url = os.environ.get(config.NOTIFY_URL_ENV, "")
    if url:
        from pipeline import alerts

        alerts.send(url, alerts.run_payload(command, int(ExitCode.KILLED), None, message, "stalled"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
