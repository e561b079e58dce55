"""Bounds on every wait on Cloud Storage through TensorFlow's client: `tf.io.gfile` on
gs:// (a data root or serving folder there, and every artifact of a compiled job).

Left to its defaults, TensorFlow's client waits 120 s to connect and 60 s on each silent
stretch of a request, and tries a request 11 times with back-offs up to 32 s: a bucket
that stops answering holds one operation for about 25 minutes, and a run makes hundreds.
With `BOUNDS` one operation ends within about 3.5 minutes (6 tries of at most 30 s, 31 s
of back-off), with an error `failures.explain` names, while a transient error (a 429 or a
503 under load) is still tried again for half a minute. TensorFlow reads them from the environment when it first
touches gs://: the command line sets them when it starts (a value already in the
environment wins), and `compile` writes them into every task's container
(`pipeline/cloud/compiled_fixes.py`). google-cloud-storage's own client (the push lock,
Beam's gcsio) has bounds of its own: 60 s a request, 120 s of retries.
"""

from __future__ import annotations

import os
import threading
from typing import Dict, Mapping, MutableMapping

BOUNDS: Dict[str, str] = {
    # TCP connect and TLS handshake.
    "GCS_REQUEST_CONNECTION_TIMEOUT_SECS": "20",
    # No byte sent or received for this long: a slow transfer that still moves is not silent.
    "GCS_REQUEST_IDLE_TIMEOUT_SECS": "30",
    # Transient errors (429, 5xx) are still retried 5 times, with back-offs of 1 to 16 s.
    "GCS_RETRY_CONFIG_MAX_RETRIES": "5",
    "GCS_RETRY_CONFIG_MAX_DELAY_TIME_US": "16000000",
}


def bound(environ: MutableMapping[str, str] = os.environ) -> None:
    """`BOUNDS` into `environ`, but for a variable already set there."""
    for name, value in BOUNDS.items():
        environ.setdefault(name, value)


# How long a command waits, before its work, for Cloud Storage to answer at all: a bucket
# that does not answer is named in seconds, not after `BOUNDS` end its first operation.
PROBE_SECONDS = 15.0
# Where TensorFlow's client sends a bucket's requests.
HOST, PORT = "storage.googleapis.com", 443
PROXY_VARIABLES = ("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")


def _answers(bucket: str, found: list) -> None:
    import http.client
    import ssl

    connection = http.client.HTTPSConnection(HOST, PORT, timeout=PROBE_SECONDS)
    try:
        connection.request("HEAD", f"/{bucket}")
        found.append(connection.getresponse().status)
    except ssl.SSLError as err:  # something answered; the command's first call says what is wrong
        found.append(type(err).__name__)
    except OSError as err:
        found.append(err)
    finally:
        connection.close()


def require_answer(path: str, option: str, environ: Mapping[str, str] = os.environ) -> None:
    """Raises ValueError, naming `option` and `path`, when Cloud Storage does not answer a
    request about `path`'s bucket within `PROBE_SECONDS` (any answer will do: a missing
    bucket or a refused credential is the command's first call's to name). Through a proxy
    (`https_proxy` and the like, which TensorFlow's client follows) nothing is probed."""
    if any(environ.get(name) for name in PROXY_VARIABLES):
        return
    bucket = path[len("gs://"):].split("/", 1)[0]
    found: list = []
    probe = threading.Thread(target=_answers, args=(bucket, found), daemon=True)
    probe.start()
    probe.join(PROBE_SECONDS)
    if found and not isinstance(found[0], OSError):
        return
    why = f"({found[0]})" if found else f"within {PROBE_SECONDS:.0f} s"
    raise ValueError(
        f"{option} {path}: Cloud Storage ({HOST}) did not answer {why}: check the network route to it (proxy, "
        "firewall, DNS) and Cloud Storage's status, then run again"
    )
