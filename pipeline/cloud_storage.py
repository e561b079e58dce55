"""Bounds on every wait on Cloud Storage through TensorFlow's client: `tf.io.gfile` on
gs:// (a data root or serving folder there, and every artifact of a compiled job).

Left to its defaults, TensorFlow's client waits 120 s to connect and 60 s on each silent
stretch of a request, and tries a request 11 times with back-offs up to 32 s: a bucket
that stops answering holds one read for about 15 minutes, and a run makes hundreds. With
`BOUNDS` one operation ends within about two minutes (4 tries of at most 30 s, 7 s of
back-off), the bound of the run's other waits (`pipeline/run/watch.py`), with an error
`failures.explain` names. TensorFlow reads them from the environment when it first
touches gs://: the command line sets them when it starts (a value already in the
environment wins), and `compile` writes them into every task's container
(`pipeline/cloud/compiled_fixes.py`). google-cloud-storage's own client (the push lock,
Beam's gcsio) has bounds of its own: 60 s a request, 120 s of retries.
"""

from __future__ import annotations

import os
from typing import Dict, MutableMapping

BOUNDS: Dict[str, str] = {
    # TCP connect and TLS handshake.
    "GCS_REQUEST_CONNECTION_TIMEOUT_SECS": "20",
    # No byte sent or received for this long: a slow transfer that still moves is not silent.
    "GCS_REQUEST_IDLE_TIMEOUT_SECS": "30",
    # Transient errors (429, 5xx) are still retried, with back-offs of 1, 2 and 4 s.
    "GCS_RETRY_CONFIG_MAX_RETRIES": "3",
    "GCS_RETRY_CONFIG_MAX_DELAY_TIME_US": "8000000",
}


def bound(environ: MutableMapping[str, str] = os.environ) -> None:
    """`BOUNDS` into `environ`, but for a variable already set there."""
    for name, value in BOUNDS.items():
        environ.setdefault(name, value)
