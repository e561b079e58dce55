"""The exit handler's webhook URL, read when a job ends from a Secret Manager secret (here
a stand-in of its REST API on 127.0.0.1) or from the task's environment."""

import base64
import http.server
import json
import threading
import time

import google.auth
import pytest
from google.auth.credentials import AnonymousCredentials

from pipeline import config
from pipeline.cloud import secrets

URL = "https://hooks.example.com/services/T0/B0/s3cr3t-token"
NAME = "projects/taxi-prod/secrets/alert-webhook"


@pytest.fixture
def secret_manager(monkeypatch):
    """Secret Manager's `versions/*:access` on 127.0.0.1: {version name: payload}, and the
    paths asked for."""
    held, asked = {}, []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            asked.append(self.path)
            name = self.path[len("/v1/"):].removesuffix(":access")
            if name == f"{NAME}/versions/slow":
                time.sleep(30)
            if name not in held:
                self.send_response(404)
                self.end_headers()
                return
            body = json.dumps({"name": name, "payload": {"data": base64.b64encode(held[name]).decode()}}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(secrets, "ENDPOINT", f"http://127.0.0.1:{server.server_port}/v1")
    monkeypatch.setattr(google.auth, "default", lambda scopes=None: (AnonymousCredentials(), "taxi-prod"))
    yield held, asked
    server.shutdown()
    server.server_close()


def test_a_secret_s_latest_version_or_the_one_named_is_the_url(secret_manager):
    held, asked = secret_manager
    held[f"{NAME}/versions/latest"] = (URL + "\n").encode()
    held[f"{NAME}/versions/3"] = b"https://hooks.example.com/older"
    assert secrets.webhook_url(NAME) == (URL, "")
    assert secrets.webhook_url(f"{NAME}/versions/3") == ("https://hooks.example.com/older", "")
    assert asked == [f"/v1/{NAME}/versions/latest:access", f"/v1/{NAME}/versions/3:access"]


def test_a_missing_empty_or_slow_secret_is_a_reason_naming_the_secret_not_the_url(secret_manager, monkeypatch):
    held, _ = secret_manager
    url, why = secrets.webhook_url(NAME)
    assert url == "" and why.startswith(f"Secret Manager answered HTTP 404 for {NAME}/versions/latest")
    assert "secretAccessor" in why
    held[f"{NAME}/versions/latest"] = b"\n"
    assert secrets.webhook_url(NAME) == ("", f"the secret {NAME}/versions/latest is empty: add a version holding "
                                             "the webhook's URL")
    monkeypatch.setattr(secrets, "TIMEOUT_SECONDS", (1.0, 1.0))
    started = time.monotonic()
    url, why = secrets.webhook_url(f"{NAME}/versions/slow")
    assert url == "" and why.startswith(f"Secret Manager could not be asked for {NAME}/versions/slow")
    assert time.monotonic() - started < 10


def test_env_names_a_variable_of_the_task_s_environment(monkeypatch):
    monkeypatch.setenv("ALERT_WEBHOOK", URL)
    assert secrets.webhook_url("env:ALERT_WEBHOOK") == (URL, "")
    monkeypatch.delenv("ALERT_WEBHOOK")
    assert secrets.webhook_url("env:ALERT_WEBHOOK") == ("", "the task's environment has no ALERT_WEBHOOK")


def test_a_kubernetes_secret_s_key_is_read_from_the_variable_kfp_sets_from_it(monkeypatch):
    reference = "k8s:alert-webhook/url"
    assert secrets.kubernetes_secret(reference) == ("alert-webhook", "url")
    monkeypatch.setenv(config.NOTIFY_URL_ENV, URL)
    assert secrets.webhook_url(reference) == (URL, "")
    monkeypatch.delenv(config.NOTIFY_URL_ENV)
    url, why = secrets.webhook_url(reference)
    assert url == "" and why.startswith(f"the task's environment has no {config.NOTIFY_URL_ENV}, which Kubeflow "
                                        "Pipelines sets from key url of the Kubernetes Secret alert-webhook")


@pytest.mark.parametrize("reference", ["k8s:alert-webhook", "k8s:Alert/url", "k8s:alert/url/more", "k8s:-a/url",
                                       "k8s:alert/"])
def test_a_kubernetes_reference_kubernetes_would_not_take_is_refused(reference):
    assert secrets.kubernetes_secret(reference) is None
    with pytest.raises(ValueError, match="k8s:SECRET/KEY"):
        secrets.check_reference(reference)


@pytest.mark.parametrize("pasted", [" ", "\n", "\u00e9"], ids=["blank", "newline", "non-ascii"])
def test_a_secret_holding_a_badly_pasted_url_is_a_reason_naming_the_secret_not_the_url(secret_manager, monkeypatch,
                                                                                        pasted):
    held, _ = secret_manager
    broken = URL.replace("s3cr3t", f"s3cr{pasted}3t")
    held[f"{NAME}/versions/latest"] = broken.encode()
    monkeypatch.setenv("ALERT_WEBHOOK", broken)
    monkeypatch.setenv(config.NOTIFY_URL_ENV, broken)
    for reference in (NAME, "env:ALERT_WEBHOOK", "k8s:alert-webhook/url"):
        url, why = secrets.webhook_url(reference)
        assert url == "" and why.startswith(f"{reference} holds no URL an alert can be posted to (it holds a")
        assert "s3cr" not in why and "3t" not in why.split("(", 1)[1]


def test_a_url_given_where_a_reference_belongs_is_refused_unquoted():
    with pytest.raises(ValueError) as refused:
        secrets.check_reference(URL)
    assert "s3cr3t" not in str(refused.value) and "Secret Manager" in str(refused.value)
    url, why = secrets.webhook_url(URL)
    assert url == "" and "s3cr3t" not in why


def test_the_exit_handler_posts_to_the_secret_s_url_and_logs_no_credential(secret_manager, monkeypatch, caplog,
                                                                           tmp_path):
    from pipeline.cloud import notify

    held, _ = secret_manager
    received = []
    monkeypatch.setattr(notify, "send", lambda url, payload: received.append((url, payload)) or True)
    status = json.dumps({"state": "SUCCEEDED", "error": {}, "pipelineTaskName": "tfx-dag"})
    caplog.set_level("INFO")
    handler = dict(final_status=status, url_from=NAME, model_dir=str(tmp_path / "m"),
                   job="job-1", data_root="")
    # Not there yet: logged with the secret's name, nothing posted, the task succeeds.
    assert notify.notify_final_status(**handler) is False
    assert received == [] and f"could not notify: Secret Manager answered HTTP 404 for {NAME}" in caplog.text
    held[f"{NAME}/versions/latest"] = URL.encode()
    assert notify.notify_final_status(**handler) is True
    ((url, payload),) = received
    assert url == URL and payload["outcome"] == "succeeded"
    assert "s3cr3t" not in caplog.text
