"""The alert webhook's URL is a credential: it can come from a file or the environment
instead of the command line, and logs name only its scheme and host."""

import argparse
import logging
import urllib.error
import urllib.request

import pytest

from pipeline import alerts, config, options

SECRET = "https://hooks.example.com/services/T000/B000/s3cr3t-token"


def _args(notify=None, notify_file=None) -> argparse.Namespace:
    return argparse.Namespace(notify=notify, notify_file=notify_file)


def test_the_url_comes_from_the_flag_then_the_file_then_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(config.NOTIFY_URL_ENV, "https://from-env.example.com/x")
    secret_file = tmp_path / "webhook"
    secret_file.write_text(SECRET + "\n# a comment line after the URL\n")
    assert options.notify_url(_args(notify="https://flag.example.com/y", notify_file=str(secret_file))) == (
        "https://flag.example.com/y")
    assert options.notify_url(_args(notify_file=str(secret_file))) == SECRET
    assert options.notify_url(_args()) == "https://from-env.example.com/x"
    monkeypatch.delenv(config.NOTIFY_URL_ENV)
    assert options.notify_url(_args()) == ""


def test_a_notify_file_missing_or_empty_is_an_error_naming_it(tmp_path):
    with pytest.raises(ValueError, match=f"--notify-file {tmp_path / 'nope'} does not exist"):
        options.notify_url(_args(notify_file=str(tmp_path / "nope")))
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ValueError, match="is empty: write the webhook URL on its first line"):
        options.notify_url(_args(notify_file=str(tmp_path / "empty")))


@pytest.mark.parametrize("url, shown", [
    (SECRET, "https://hooks.example.com/…"),
    ("http://user:password@127.0.0.1:8080/hook?token=t", "http://127.0.0.1:8080/…"),
    ("hooks.example.com/services/T000/B000/s3cr3t-token", "(a webhook)"),
])
def test_logs_name_the_webhook_by_scheme_and_host_only(url, shown):
    assert alerts.shown(url) == shown


def test_a_failed_alert_logs_no_part_of_the_credential(caplog):
    unreachable = "http://127.0.0.1:9/services/s3cr3t-token"
    with caplog.at_level(logging.INFO):
        assert not alerts.send(unreachable, {"text": "x"})
    assert "http://127.0.0.1:9/…" in caplog.text and "s3cr3t" not in caplog.text


def test_a_url_that_is_not_http_is_refused_without_showing_it(monkeypatch):
    monkeypatch.setenv(config.NOTIFY_URL_ENV, "hooks.example.com/services/s3cr3t")
    with pytest.raises(ValueError, match=r"\(it must start with https:// or http://\)") as raised:
        options.notify_url(_args())
    assert "s3cr3t" not in str(raised.value)
    # And sending to one gives a reason, never the URL in an exception.
    assert alerts.post("hooks.example.com/services/s3cr3t", {"text": "x"}) == (
        "the webhook's URL is not one an alert can be posted to: it must start with https:// or http://")


# Tokens pasted badly: a blank, a line break inside, a character outside ASCII.
BAD_URLS = {
    "a blank": ("https://hooks.example.com/services/T0/s3cr3t token", "it holds a blank"),
    "a newline": ("https://hooks.example.com/services/T0/s3cr3t\nX", "it holds a control character"),
    "non-ASCII": ("https://hooks.example.com/services/T0/s3cr3t\u00e9", "it holds a character outside ASCII"),
    "a bad port": ("https://hooks.example.com:80a/s3cr3t", "it does not parse as a URL"),
    "no host": ("https:///s3cr3t", "it names no host"),
}


@pytest.mark.parametrize("case", sorted(BAD_URLS))
def test_a_badly_pasted_url_is_named_by_what_is_wrong_never_shown(case):
    url, wrong = BAD_URLS[case]
    assert alerts.url_problem(url).startswith(wrong)
    assert "s3cr3t" not in alerts.url_problem(url)
    # Sent anyway (the exit handler's path): a reason, no exception, no part of it.
    assert alerts.post(url, {"text": "x"}).endswith(alerts.url_problem(url))
    assert alerts.url_problem(SECRET) is None


def test_an_http_client_error_that_quotes_the_url_is_told_by_its_class_only(monkeypatch):
    import http.client
    import urllib.request

    def refuse(request, timeout):
        raise http.client.InvalidURL(f"URL can't contain control characters. {request.full_url!r}")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    assert alerts.post(SECRET, {"text": "x"}) == "the webhook could not be reached (InvalidURL)"


@pytest.mark.parametrize("case", sorted(BAD_URLS))
def test_a_bad_url_is_refused_where_it_is_read_naming_its_source_not_its_content(case, tmp_path, monkeypatch):
    url, wrong = BAD_URLS[case]
    with pytest.raises(options.UsageError, match=f"given to --notify is not .*{wrong}") as raised:
        options.notify_url(_args(notify=url))
    assert "s3cr3t" not in str(raised.value)
    written = tmp_path / "webhook"
    written.write_text(url.replace("\n", "\t") + "\n", encoding="utf-8")  # a file's line ends at a newline
    with pytest.raises(options.UsageError, match=f"on the first line of --notify-file {written} is not") as raised:
        options.notify_url(_args(notify_file=str(written)))
    assert "s3cr3t" not in str(raised.value)
    monkeypatch.setenv(config.NOTIFY_URL_ENV, url)
    with pytest.raises(ValueError, match=f"in {config.NOTIFY_URL_ENV} is not") as raised:
        options.notify_url(_args())
    assert not isinstance(raised.value, options.UsageError) and "s3cr3t" not in str(raised.value)


@pytest.mark.parametrize("timed_out", [TimeoutError("timed out"), urllib.error.URLError(TimeoutError("timed out"))])
def test_the_sockets_own_timeout_is_said_as_the_silence_it_is(monkeypatch, timed_out):
    """urllib's timeout may end the request a moment before `post` stops waiting: the same
    words either way, whichever comes first."""
    def silent(request, timeout):
        raise timed_out

    monkeypatch.setattr(urllib.request, "urlopen", silent)
    assert alerts.post(SECRET, {"text": "x"}, timeout=2) == "the webhook did not answer within 2 s"
