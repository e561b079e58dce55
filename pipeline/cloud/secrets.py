"""Where the compiled pipeline's exit handler finds the alert webhook's URL when a job
ends. The URL carries its credential, so the PipelineJob JSON (uploaded to a bucket,
shown in Vertex AI's console) holds only a reference to it:

- `projects/P/secrets/S` or `projects/P/secrets/S/versions/V`: a Secret Manager secret
  (its latest version unless one is named), read through Secret Manager's REST API with
  the task's own credentials (on Vertex AI, the job's service account, which needs
  `roles/secretmanager.secretAccessor` on the secret);
- `env:NAME`: a variable of the task's environment, set by whatever runs the task;
- `k8s:SECRET/KEY`: key KEY of the Kubernetes Secret SECRET in the namespace of a
  Kubeflow Pipelines run. `compile --target kubeflow` asks KFP, in the platform spec
  beside the pipeline spec, to set the exit handler's `config.NOTIFY_URL_ENV` from it (as
  kfp-kubernetes' `use_secret_as_env` writes it), and the task reads that variable. A
  Secret's name is a DNS subdomain and a key matches `[-._a-zA-Z0-9]+`: neither holds a
  `/`, so the one `/` splits them.

Nothing here names the URL itself in a message or a log line.
"""

from __future__ import annotations

import base64
import os
import re
from typing import Optional, Tuple

from pipeline import alerts, config

ENDPOINT = "https://secretmanager.googleapis.com/v1"
SCOPE = "https://www.googleapis.com/auth/cloud-platform"
ENV_PREFIX = "env:"
KUBERNETES_PREFIX = "k8s:"
# Seconds Secret Manager has to connect and to answer.
TIMEOUT_SECONDS = (5.0, 10.0)

_SECRET = re.compile(r"^projects/[^/\s]+/secrets/[^/\s]+(/versions/[^/\s]+)?$")
_ENV = re.compile(rf"^{ENV_PREFIX}[A-Za-z_][A-Za-z0-9_]*$")
_KUBERNETES = re.compile(
    rf"^{KUBERNETES_PREFIX}(?P<name>[a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?)/(?P<key>[-._a-zA-Z0-9]+)$")


def kubernetes_secret(reference: str) -> Optional[Tuple[str, str]]:
    """(the Secret's name, its key) when `reference` is `k8s:SECRET/KEY`, else None."""
    found = _KUBERNETES.match(reference)
    return (found["name"], found["key"]) if found else None


def check_reference(reference: str) -> str:
    """`reference` when it is a secret's name or `env:NAME`; ValueError otherwise, without
    quoting it when it looks like a URL (which would be the credential itself)."""
    if _SECRET.match(reference) or _ENV.match(reference) or _KUBERNETES.match(reference):
        return reference
    if "://" in reference:
        raise ValueError("the compiled pipeline never holds the webhook's URL: store it in Secret Manager and give "
                         "the secret's name, projects/PROJECT/secrets/SECRET, or on Kubeflow Pipelines in a "
                         "Kubernetes Secret and give k8s:SECRET/KEY (docs/vertex.md#alerts)")
    raise ValueError(f"{reference!r} is none of a Secret Manager secret (projects/PROJECT/secrets/SECRET"
                     "[/versions/VERSION]), a Kubernetes Secret's key (k8s:SECRET/KEY) or env:NAME "
                     "(docs/vertex.md#alerts)")


def version_name(reference: str) -> str:
    """The secret version `reference` names: its latest when it names none."""
    return reference if "/versions/" in reference else f"{reference}/versions/latest"


def webhook_url(reference: str) -> Tuple[str, str]:
    """(the URL `reference` holds, ""), or ("", why it could not be read)."""
    try:
        check_reference(reference)
    except ValueError as err:
        return "", str(err)
    kubernetes = kubernetes_secret(reference)
    if kubernetes:
        value = os.environ.get(config.NOTIFY_URL_ENV, "").strip()
        url, problem = (value, "") if value else (
            "", f"the task's environment has no {config.NOTIFY_URL_ENV}, which Kubeflow Pipelines sets from key "
                f"{kubernetes[1]} of the Kubernetes Secret {kubernetes[0]}: check that the Secret exists in the run's "
                "namespace and holds that key")
    elif reference.startswith(ENV_PREFIX):
        name = reference[len(ENV_PREFIX):]
        value = os.environ.get(name, "").strip()
        url, problem = (value, "") if value else ("", f"the task's environment has no {name}")
    else:
        url, problem = _access(version_name(reference))
    wrong = alerts.url_problem(url) if url else None
    if wrong:
        return "", (f"{reference} holds no URL an alert can be posted to ({wrong}; it is not shown here): store "
                    "the webhook's URL alone in it")
    return url, problem


def _access(name: str) -> Tuple[str, str]:
    import google.auth
    import google.auth.exceptions
    import requests
    from google.auth.transport.requests import AuthorizedSession

    try:
        credentials, _ = google.auth.default(scopes=[SCOPE])
        answer = AuthorizedSession(credentials).get(f"{ENDPOINT}/{name}:access", timeout=TIMEOUT_SECONDS)
    except (google.auth.exceptions.GoogleAuthError, requests.RequestException) as err:
        return "", f"Secret Manager could not be asked for {name}: {type(err).__name__}: {err}"
    if answer.status_code != 200:
        return "", (f"Secret Manager answered HTTP {answer.status_code} for {name}: check that the secret exists "
                    "and that the job's service account has roles/secretmanager.secretAccessor on it")
    try:
        value = base64.b64decode(answer.json()["payload"]["data"]).decode().strip()
    except (ValueError, KeyError, TypeError):
        return "", f"Secret Manager's answer for {name} holds no payload"
    return (value, "") if value else ("", f"the secret {name} is empty: add a version holding the webhook's URL")
