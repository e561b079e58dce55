"""The image tests need the pipeline image (`make image`): `make test-image` builds it and
names it in TAXI_PIPELINE_IMAGE. Without it they are skipped, saying so."""

import dataclasses
import http.server
import json
import os
import shutil
import threading
from pathlib import Path
from typing import List

import pytest

from tests.helpers import SLICE_SPANS
from tests.image import vertex
from tests.image.vertex import BUCKET, BUCKET_NAME, MODEL

IMAGE_ENV = "TAXI_PIPELINE_IMAGE"


@pytest.fixture(scope="session")
def pipeline_image() -> str:
    image = os.environ.get(IMAGE_ENV)
    if not image:
        pytest.skip(f"no pipeline image: run `make test-image`, which builds it and sets {IMAGE_ENV}")
    if not shutil.which("buildah"):
        pytest.skip("buildah is not installed: `make test-image` installs it (Debian's package)")
    return image


@dataclasses.dataclass
class Bucket:
    """The local folder mounted at BUCKET in every task's container."""

    root: Path
    image: vertex.Image

    def inside(self, *parts: str) -> str:
        return "/".join([BUCKET, *parts])

    @staticmethod
    def fuse(uri: str) -> str:
        """A gs:// URI of the bucket as the tasks see it through Cloud Storage FUSE."""
        assert uri.startswith(f"gs://{BUCKET_NAME}/"), uri
        return BUCKET + uri[len(f"gs://{BUCKET_NAME}"):]

    def versions(self, serving: str = "serving") -> List[str]:
        folder = self.root / serving / MODEL
        return sorted(name for name in os.listdir(folder) if name.isdigit()) if folder.is_dir() else []

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
    received: list = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/hook", received
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def bucket(tmp_path_factory, pipeline_image, copy_spans) -> Bucket:
    root = tmp_path_factory.mktemp("bucket")
    copy_spans(root / "data", SLICE_SPANS)
    copy_spans(root / "local-data", SLICE_SPANS)
    return Bucket(root, vertex.Image(pipeline_image, {str(root): BUCKET}))
