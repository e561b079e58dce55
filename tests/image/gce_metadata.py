"""The metadata server a Vertex task's machine has, on 127.0.0.1: the task's service
account, its access token and the project, as Compute Engine's metadata server answers
them. Test code.

Why: Google's auth library finds a task's credentials there (`google.auth.default()`'s
last step). Without one, every client that asks for credentials the default way, as
Beam's gcsio does, retries with backoff before it goes on without them, in every task
that touches `gs://` through Beam (docs/vertex.md measures it): time that a task on
Vertex never spends. The library reads the server's address from GCE_METADATA_HOST and
GCE_METADATA_IP; the token is a fixed string, which the Cloud Storage emulator accepts
as it accepts any.
"""

from __future__ import annotations

import http.server
import json
import threading
from typing import Dict, List, Optional

PROJECT = "taxi-local"
ACCOUNT = f"pipeline-tasks@{PROJECT}.iam.gserviceaccount.com"
TOKEN = "metadata-server-token"
FLAVOR = ("Metadata-Flavor", "Google")


def answer(path: str) -> Optional[str]:
    """What the metadata server answers for `path` (query removed), or None (404)."""
    if path in ("/", "/computeMetadata/v1/"):
        return "computeMetadata/\n"
    if path == "/computeMetadata/v1/project/project-id":
        return PROJECT
    if path == "/computeMetadata/v1/universe/universe-domain":
        return "googleapis.com"
    prefix = "/computeMetadata/v1/instance/service-accounts/"
    if not path.startswith(prefix):
        return None
    account, _, rest = path[len(prefix):].partition("/")
    if account not in ("default", ACCOUNT):
        return None
    if rest == "":
        return json.dumps({"email": ACCOUNT, "scopes": ["https://www.googleapis.com/auth/cloud-platform"],
                           "aliases": ["default"]})
    if rest == "email":
        return ACCOUNT
    if rest == "token":
        return json.dumps({"access_token": TOKEN, "expires_in": 3600, "token_type": "Bearer"})
    return None


class _Handler(http.server.BaseHTTPRequestHandler):
    # Headers and body go out at once, as the metadata server sends them (gcs._Forward).
    disable_nagle_algorithm = True
    server: "_Server"

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        path = self.path.split("?", 1)[0]
        body = answer(path)
        with self.server.lock:
            self.server.paths.append(path)
        self.send_response(404 if body is None else 200)
        self.send_header(*FLAVOR)
        payload = (body or "not found").encode()
        self.send_header("Content-Type", "application/json" if payload.startswith(b"{") else "text/plain")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    paths: List[str]
    lock: threading.Lock


class MetadataServer:
    """`start()`, then `stop()`; `paths()` lists what the tasks asked for."""

    def __init__(self) -> None:
        self.server: Optional[_Server] = None

    def start(self) -> "MetadataServer":
        self.server = _Server(("127.0.0.1", 0), _Handler)
        self.server.paths, self.server.lock = [], threading.Lock()
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server:
            self.server.shutdown()
            self.server.server_close()

    def paths(self) -> List[str]:
        with self.server.lock:
            return list(self.server.paths)

    def environment(self) -> Dict[str, str]:
        """Where a task's Google auth library finds this server (its port on 127.0.0.1)."""
        address = f"127.0.0.1:{self.server.server_port}"
        return {"GCE_METADATA_HOST": address, "GCE_METADATA_IP": address}
