"""The image tests need the pipeline image (`make image`) and the Cloud Storage emulator
(`scripts/gcs-emulator`): `make test-image` builds both and names them in
TAXI_PIPELINE_IMAGE and TAXI_GCS_EMULATOR. Without them they are skipped, saying so."""

import dataclasses
import shutil
from pathlib import Path
from typing import List, Optional

import pytest

from tests import pages
from tests.helpers import SLICE_SPANS
from tests.image import gce_metadata, gcs, schedule, vertex
from tests.image.vertex import BUCKET, BUCKET_NAME, MODEL

# Where a task's container finds the emulator's CA, and this machine's scratch folder.
CA_INSIDE = "/run/taxi-harness/ca.crt"
LOCAL = "/local"


@pytest.fixture(scope="session")
def pipeline_image() -> str:
    return schedule.image_named(schedule.IMAGE_ENV, "pipeline image")


@pytest.fixture(scope="module")
def emulator(tmp_path_factory, pipeline_image) -> gcs.Emulator:
    # Here, not in pipeline_image, which a module may override (test_vertex_other_stack.py).
    if not shutil.which("buildah"):
        pytest.skip("buildah is not installed: `make test-image` installs it (Debian's package)")
    binary = gcs.binary()
    if not binary:
        pytest.skip("no Cloud Storage emulator: run `make test-image`, which builds it (scripts/gcs-emulator) "
                    "and sets TAXI_GCS_EMULATOR")
    server = gcs.Emulator(binary, tmp_path_factory.mktemp("gcs")).start()
    server.create_bucket(BUCKET_NAME)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def metadata_server() -> gce_metadata.MetadataServer:
    server = gce_metadata.MetadataServer().start()
    yield server
    server.stop()


@dataclasses.dataclass
class Bucket:
    """The job's bucket on the emulator, `gs://BUCKET_NAME`, and a local folder (`root`,
    mounted at LOCAL) for what runs outside Vertex: a local run, scratch files."""

    root: Path
    image: vertex.Image
    emulator: gcs.Emulator

    @staticmethod
    def inside(*parts: str) -> str:
        return "/".join([BUCKET, *parts])

    @staticmethod
    def local(*parts: str) -> str:
        return "/".join([LOCAL, *parts])

    @staticmethod
    def name(uri: str) -> str:
        assert uri.startswith(BUCKET + "/"), uri
        return uri[len(BUCKET) + 1:]

    # vertex.Storage
    def read(self, uri: str) -> Optional[bytes]:
        return self.emulator.read(BUCKET_NAME, self.name(uri))

    def delete(self, uri: str) -> None:
        self.emulator.delete(BUCKET_NAME, self.name(uri))

    def write(self, uri: str, data: bytes) -> None:
        self.emulator.upload(BUCKET_NAME, self.name(uri), data)

    def objects(self, prefix: str) -> List[str]:
        return self.emulator.list(BUCKET_NAME, prefix.rstrip("/") + "/")

    def versions(self, serving: str = "serving") -> List[str]:
        prefix = f"{serving}/{MODEL}/"
        return sorted({name[len(prefix):].split("/")[0] for name in self.objects(prefix)
                       if name[len(prefix):].split("/")[0].isdigit()})

    def run(self, argv: List[str], log: Path) -> str:
        """Runs `argv` in a container of the image; returns its output, failing the test
        with it when the command fails."""
        status = self.image.run(argv, str(log))
        output = log.read_text(errors="replace")
        assert status == 0, f"{argv[:3]} exited {status} in the image:\n{output[-4000:]}"
        return output


@pytest.fixture(scope="module")
def webhook():
    """A webhook on 127.0.0.1 (the tasks share this machine's network): its URL, and the
    JSON bodies it received, in order."""
    yield from pages.serve_webhook()


@pytest.fixture(scope="module")
def bucket(tmp_path_factory, pipeline_image, emulator, metadata_server, copy_spans) -> Bucket:
    root = tmp_path_factory.mktemp("local")
    copy_spans(root / "data", SLICE_SPANS)
    copy_spans(root / "local-data", SLICE_SPANS)
    emulator.upload_tree(BUCKET_NAME, "data", root / "data")
    image = vertex.Image(pipeline_image, {str(root): LOCAL, str(emulator.certificates["ca"]): CA_INSIDE},
                         hosts=emulator.add_hosts(),
                         env={**emulator.environment(CA_INSIDE), **metadata_server.environment()})
    return Bucket(root, image, emulator)


# The schedule's jobs (tests/image/schedule.py), in the image of the module that asks for
# them: on `first_target`, a clean copy of data/'s slice and the same data again; then, on
# `later_target`, a new span whose model the serving check refuses, a candidate approved and
# (after `before_rollback`, which a module may override to run a job of its own first) a
# rollback, each followed by a job with nothing new. A module may choose either target.
@pytest.fixture(scope="module")
def first_target() -> schedule.Target:
    """The target that runs the first two jobs."""
    return schedule.VERTEX


@pytest.fixture(scope="module")
def later_target() -> schedule.Target:
    """The target that runs the jobs after the first two."""
    return schedule.KUBEFLOW


@pytest.fixture(scope="module")
def compiled(bucket, webhook, pipeline_image, first_target) -> Path:
    return schedule.compile_job(bucket, pipeline_image, webhook[0], "pipeline", target=first_target)


@pytest.fixture(scope="module")
def first_scheduled(bucket, compiled, webhook, first_target) -> schedule.ScheduledJob:
    return schedule.run_job(bucket, compiled, webhook, first_target)


@pytest.fixture(scope="module")
def first_job(first_scheduled) -> vertex.JobResult:
    return first_scheduled.job


@pytest.fixture(scope="module")
def unchanged_job(bucket, compiled, first_job, webhook, first_target):
    """The next scheduled job, with no new span."""
    return schedule.run_job(bucket, compiled, webhook, first_target)


@pytest.fixture(scope="module")
def later_compiled(bucket, webhook, pipeline_image, compiled, first_target, later_target) -> Path:
    if later_target == first_target:
        return compiled
    return schedule.compile_job(bucket, pipeline_image, webhook[0], "pipeline", target=later_target)


@pytest.fixture(scope="module")
def refused_job(bucket, unchanged_job, webhook, later_target) -> schedule.ScheduledJob:
    return schedule.refuse_a_model(bucket, webhook, later_target)


@pytest.fixture(scope="module")
def approved_job(bucket, refused_job, webhook, later_target) -> schedule.ApprovedJob:
    return schedule.approve_a_candidate(bucket, webhook, later_target)


@pytest.fixture(scope="module")
def before_rollback(approved_job):
    """What the module runs before the rollback."""
    return approved_job


@pytest.fixture(scope="module")
def rolled_back_job(bucket, later_compiled, before_rollback, webhook, later_target):
    return schedule.roll_back(bucket, later_compiled, webhook, later_target)
