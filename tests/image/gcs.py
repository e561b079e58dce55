"""Cloud Storage on this machine, for the tasks' `gs://` paths: fake-gcs-server
(`scripts/gcs-emulator` builds it) on 127.0.0.1, behind a TLS front that answers for
Cloud Storage's host names on a loopback address of its own. Test code.

Why a front: TensorFlow's `gs://` file system has no endpoint setting; it always calls
`https://www.googleapis.com/storage/v1/...`, `.../upload/storage/v1/...` and
`https://storage.googleapis.com/BUCKET/OBJECT`. A task's container resolves those names
to the front's address (`buildah run --add-host`) and trusts the CA made here
(`CURL_CA_BUNDLE` for TensorFlow's libcurl, `REQUESTS_CA_BUNDLE` for Python's clients).
The front also drops `Transfer-Encoding: identity`, which TensorFlow sends with every
empty POST or PUT and Go's HTTP server refuses with 501 ("Unsupported transfer
encoding"), and it logs every request with the address it came from. It also answers
for Secret Manager (`Emulator.secrets`), where the exit handler reads the webhook's URL.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import http.client
import http.server
import ipaddress
import json
import os
import random
import re
import socket
import ssl
import subprocess
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Dict, List, Optional

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.helpers import free_ports

HOSTS = ("www.googleapis.com", "storage.googleapis.com", "secretmanager.googleapis.com")
# Secret Manager's REST API, answered by the front itself from `Emulator.secrets`: what
# the exit handler reads the webhook's URL from (pipeline.cloud.secrets).
SECRET_MANAGER = HOSTS[2]
HTTPS_PORT = 443
# Hop-by-hop headers, and the one TensorFlow sends that the emulator refuses.
DROPPED = {"transfer-encoding", "connection", "keep-alive", "content-length"}


def make_certificates(folder: Path, address: str) -> Dict[str, Path]:
    """A CA, and a server certificate it signs for HOSTS and `address`."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "taxi-pipeline test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName(host) for host in HOSTS] + [x509.IPAddress(ipaddress.ip_address(address))]
    server = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOSTS[0])]))
              .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
              .add_extension(x509.SubjectAlternativeName(names), critical=False)
              .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
              # Python 3.13's default context verifies strictly (VERIFY_X509_STRICT): without
              # these, "certificate verify failed: Missing Authority Key Identifier".
              .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
              .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
              .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
              .sign(ca_key, hashes.SHA256()))
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"ca": folder / "ca.crt", "cert": folder / "server.crt", "key": folder / "server.key"}
    paths["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths["cert"].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths["key"].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    return paths


def free_loopback_address() -> str:
    """A 127.0.0.X whose port 443 is free (each test worker gets its own)."""
    for _ in range(200):
        address = f"127.0.0.{random.randint(2, 254)}"
        with socket.socket() as probe:
            try:
                probe.bind((address, HTTPS_PORT))
            except OSError:
                continue
            return address
    raise RuntimeError(f"no loopback address with port {HTTPS_PORT} free")


def number_batch_parts(body: bytes, content_type: str) -> bytes:
    """A batch request with a `Content-ID` on every part: google-cloud-storage (Beam's
    copies and deletes) sends none, Cloud Storage answers in order anyway, and the
    emulator skips a part without one."""
    match = re.search(r'boundary="?([^";]+)"?', content_type)
    if not match:
        return body
    delimiter = b"--" + match.group(1).encode()
    pieces = body.split(delimiter)
    for index in range(1, len(pieces)):
        piece = pieces[index]
        if piece.startswith(b"--"):
            break
        newline = b"\r\n" if piece.startswith(b"\r\n") else b"\n"
        head = piece.split(newline + newline, 1)[0].lower()
        if b"content-id:" not in head:
            pieces[index] = newline + b"Content-ID: <part-%d>" % index + piece
    return delimiter.join(pieces)


class _Front(http.server.ThreadingHTTPServer):
    daemon_threads = True
    backend_port: int
    secrets: Dict[str, bytes]
    log_path: Path
    log_lock: threading.Lock


class _Forward(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # A response is written as its headers, then its body: with Nagle's algorithm on, the
    # body waits for the client's delayed ACK of the headers, 40 ms a request, where Cloud
    # Storage answers at once (TCP_NODELAY).
    disable_nagle_algorithm = True
    server: _Front

    def forward(self) -> None:
        body = self.read_body()
        started = time.time()
        if self.headers.get("Host", "").split(":")[0] == SECRET_MANAGER:
            status = self.secret_version()
        else:
            status = self.to_emulator(body)
        self.log_request_lines(body, started, status)

    def secret_version(self) -> int:
        """`GET /v1/projects/P/secrets/S/versions/V:access`, as Secret Manager answers it
        (`latest` is the only version a secret has here), to a caller with a token."""
        name = self.path[len("/v1/"):].removesuffix(":access").replace("/versions/latest", "")
        value = self.server.secrets.get(name)
        if not self.headers.get("Authorization", "").startswith("Bearer "):
            status, answer = 401, {"error": {"code": 401, "status": "UNAUTHENTICATED"}}
        elif self.command != "GET" or not self.path.endswith(":access") or value is None:
            status, answer = 404, {"error": {"code": 404, "status": "NOT_FOUND"}}
        else:
            status, answer = 200, {"name": f"{name}/versions/1",
                                   "payload": {"data": base64.b64encode(value).decode()}}
        payload = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        return status

    def generation_mismatch(self) -> bool:
        """A `DELETE …?ifGenerationMatch=G` whose object has another generation, which
        fake-gcs-server deletes anyway: Cloud Storage refuses it with 412 ("Makes the
        operation conditional on whether the object's current generation matches the
        given value", https://cloud.google.com/storage/docs/json_api/v1/objects/delete),
        and the push lock's conditional break and release rely on that."""
        parts = urllib.parse.urlsplit(self.path)
        wanted = urllib.parse.parse_qs(parts.query).get("ifGenerationMatch")
        if self.command != "DELETE" or not wanted:
            return False
        backend = http.client.HTTPConnection("127.0.0.1", self.server.backend_port, timeout=120)
        try:
            backend.request("GET", parts.path)
            answer = backend.getresponse()
            payload = answer.read()
        finally:
            backend.close()
        if answer.status != 200:
            return False  # absent: the emulator answers 404 as Cloud Storage does
        return str(json.loads(payload).get("generation")) != wanted[0]

    def refuse_precondition(self) -> int:
        payload = json.dumps({"error": {"code": 412, "message": "At least one of the pre-conditions you specified "
                                                                "did not hold.", "errors": [
            {"reason": "conditionNotMet", "message": "Precondition Failed"}]}}).encode()
        self.send_response(412)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        return 412

    def to_emulator(self, body: bytes) -> int:
        if self.generation_mismatch():
            return self.refuse_precondition()
        if self.path.startswith("/batch/"):
            body = number_batch_parts(body, self.headers.get("Content-Type", ""))
        headers = {key: value for key, value in self.headers.items() if key.lower() not in DROPPED}
        headers["Content-Length"] = str(len(body))
        backend = http.client.HTTPConnection("127.0.0.1", self.server.backend_port, timeout=120)
        try:
            backend.request(self.command, self.path, body=body, headers=headers)
            answer = backend.getresponse()
            payload = answer.read()
            self.send_response(answer.status, answer.reason)
            for key, value in answer.getheaders():
                if key.lower() == "location" and value.startswith("http://"):
                    # A resumable upload's session URL: the emulator saw plain HTTP.
                    value = "https://" + value[len("http://"):]
                if key.lower() not in DROPPED:
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)
            return answer.status
        finally:
            backend.close()

    def log_request_lines(self, body: bytes, started: float, status: int) -> None:
        # When, and how long the front and the emulator took to answer (the request's body
        # read), to tell their share of a task's time; a batch's parts carry 0.
        timing = {"at": round(started, 3), "ms": round((time.time() - started) * 1000, 1)}
        lines = [{"client": self.client_address[0], "method": self.command,
                  "host": self.headers.get("Host", ""), "path": self.path, "status": status, **timing}]
        if self.path.startswith("/batch/"):
            for method, url in re.findall(rb"^(GET|POST|PUT|PATCH|DELETE) (\S+) HTTP/1\.1\r?$", body, re.M):
                parts = urllib.parse.urlsplit(url.decode())
                lines.append({"client": self.client_address[0], "method": method.decode(), "host": parts.netloc,
                              "path": parts.path + (f"?{parts.query}" if parts.query else ""), "status": status,
                              "at": timing["at"], "ms": 0.0})
        with self.server.log_lock, open(self.server.log_path, "a") as log:
            log.writelines(json.dumps(line) + "\n" for line in lines)

    def read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = forward  # noqa: N815 (http.server's names)

    def log_message(self, *args) -> None:
        pass


@dataclasses.dataclass
class Request:
    client: str
    method: str
    host: str
    path: str
    status: int
    at: float  # when it came, seconds since the epoch
    ms: float  # how long the front took to answer it (0 for a batch's parts)

    @property
    def written(self) -> Optional[str]:
        """The object this request wrote (an upload's `name=`, a copy's or rewrite's
        destination), else None."""
        parts = urllib.parse.urlsplit(self.path)
        if self.method in ("POST", "PUT") and parts.path.startswith("/upload/storage/v1/"):
            return urllib.parse.parse_qs(parts.query).get("name", [None])[0]
        match = re.search(r"/(?:copyTo|rewriteTo)/b/[^/]+/o/([^/?]+)$", parts.path)
        if self.method == "POST" and match:
            return urllib.parse.unquote(match.group(1))
        return None


class Emulator:
    """fake-gcs-server behind the TLS front; `start()`, then `stop()`."""

    def __init__(self, binary: str, folder: Path):
        self.binary = binary
        self.folder = folder
        self.address = free_loopback_address()
        (self.backend_port,) = free_ports()
        self.certificates: Dict[str, Path] = {}
        self.process: Optional[subprocess.Popen] = None
        self.front: Optional[_Front] = None
        self.log_path = folder / "requests.jsonl"
        # Secret Manager's secrets, by name (projects/P/secrets/S): their one version's value.
        self.secrets: Dict[str, bytes] = {}

    def start(self) -> "Emulator":
        self.folder.mkdir(parents=True, exist_ok=True)
        self.certificates = make_certificates(self.folder / "tls", self.address)
        with open(self.folder / "emulator.log", "ab") as log:
            self.process = subprocess.Popen(
                [self.binary, "-scheme", "http", "-host", "127.0.0.1", "-port", str(self.backend_port),
                 "-backend", "filesystem", "-filesystem-root", str(self.folder / "objects"),
                 "-public-host", HOSTS[1], "-external-url", f"https://{HOSTS[0]}", "-log-level", "warn"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.backend_port), timeout=1).close()
                break
            except OSError as err:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"fake-gcs-server did not start: see {self.folder / 'emulator.log'}") from err
                time.sleep(0.1)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.certificates["cert"], self.certificates["key"])
        self.front = _Front((self.address, HTTPS_PORT), _Forward)
        self.front.socket = context.wrap_socket(self.front.socket, server_side=True)
        self.front.backend_port = self.backend_port
        self.front.secrets = self.secrets
        self.front.log_path = self.log_path
        self.front.log_lock = threading.Lock()
        threading.Thread(target=self.front.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.front:
            self.front.shutdown()
            self.front.server_close()
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)

    # ---- what a task's container needs
    def add_hosts(self) -> List[str]:
        return [f"{host}:{self.address}" for host in HOSTS]

    def environment(self, ca_inside: str) -> Dict[str, str]:
        """The variables a task needs to reach the emulator, the CA at `ca_inside`."""
        return {
            "CURL_CA_BUNDLE": ca_inside,  # TensorFlow's libcurl
            "REQUESTS_CA_BUNDLE": ca_inside,  # google-cloud-storage (Beam's gcsio)
            "SSL_CERT_FILE": ca_inside,
            # TensorFlow's client sends this token instead of asking a metadata server.
            # (Not NO_GCE_CHECK: Google's auth library would then skip the metadata server
            # of tests/image/gce_metadata.py too.)
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": "emulator",
            # google-cloud-storage: anonymous credentials, this endpoint.
            "STORAGE_EMULATOR_HOST": f"https://{HOSTS[1]}",
            "GOOGLE_CLOUD_PROJECT": "taxi-local",
        }

    # ---- the bucket, read and written through the emulator's own API
    def api(self, method: str, path: str, body: Optional[bytes] = None,
            headers: Optional[Dict[str, str]] = None) -> http.client.HTTPResponse:
        connection = http.client.HTTPConnection("127.0.0.1", self.backend_port, timeout=60)
        connection.request(method, path, body=body, headers=headers or {})
        return connection.getresponse()

    def create_bucket(self, name: str) -> None:
        answer = self.api("POST", "/storage/v1/b", json.dumps({"name": name}).encode(),
                          {"Content-Type": "application/json"})
        assert answer.status in (200, 409), answer.read()

    def upload(self, bucket: str, name: str, data: bytes) -> None:
        quoted = urllib.parse.quote(name, safe="")
        answer = self.api("POST", f"/upload/storage/v1/b/{bucket}/o?uploadType=media&name={quoted}", data,
                          {"Content-Type": "application/octet-stream"})
        assert answer.status == 200, answer.read()

    def upload_tree(self, bucket: str, prefix: str, folder: Path) -> None:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                self.upload(bucket, f"{prefix}/{path.relative_to(folder).as_posix()}", path.read_bytes())

    def list(self, bucket: str, prefix: str = "") -> List[str]:
        names, token = [], ""
        while True:
            query = urllib.parse.urlencode({"prefix": prefix, "pageToken": token})
            page = json.loads(self.api("GET", f"/storage/v1/b/{bucket}/o?{query}").read())
            names += [item["name"] for item in page.get("items", [])]
            token = page.get("nextPageToken", "")
            if not token:
                return sorted(names)

    def read(self, bucket: str, name: str) -> Optional[bytes]:
        """The object's bytes, or None when there is no such object."""
        quoted = urllib.parse.quote(name, safe="")
        answer = self.api("GET", f"/storage/v1/b/{bucket}/o/{quoted}?alt=media")
        data = answer.read()
        if answer.status == 404:
            return None
        assert answer.status == 200, (name, answer.status, data[:200])
        return data

    def delete(self, bucket: str, name: str) -> None:
        answer = self.api("DELETE", f"/storage/v1/b/{bucket}/o/{urllib.parse.quote(name, safe='')}")
        answer.read()
        assert answer.status in (200, 204, 404), (name, answer.status)

    def download_tree(self, bucket: str, prefix: str, folder: Path) -> None:
        for name in self.list(bucket, prefix.rstrip("/") + "/"):
            if name.endswith("/"):
                continue
            target = folder / name[len(prefix.rstrip("/")) + 1:]
            target.parent.mkdir(parents=True, exist_ok=True)
            data = self.read(bucket, name)
            if data is not None:
                target.write_bytes(data)

    def requests(self) -> List[Request]:
        if not self.log_path.exists():
            return []
        return [Request(**json.loads(line)) for line in self.log_path.read_text().splitlines() if line]


def binary() -> Optional[str]:
    """fake-gcs-server as `scripts/gcs-emulator` built it, or None."""
    path = os.environ.get("TAXI_GCS_EMULATOR")
    return path if path and os.access(path, os.X_OK) else None
