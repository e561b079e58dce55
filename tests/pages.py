"""What tests of pages and alerts share: Debian's chromium, headless, and the parts of a
rendered DOM they read; a webhook on 127.0.0.1 that keeps what it is sent."""

import html.parser
import http.server
import json
import shutil
import subprocess
import threading

BROWSER_TIMEOUT_SECONDS = 120


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "the page is tested in Debian's chromium: `make test` installs it (apt-get install chromium)"
    return path


def browser(*args: str) -> subprocess.CompletedProcess:
    command = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               "--no-first-run", "--disable-dev-shm-usage", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=BROWSER_TIMEOUT_SECONDS)


class Page(html.parser.HTMLParser):
    """The rendered DOM's parts the tests read: text by element id, images, table rows."""

    def __init__(self):
        super().__init__()
        self.text_by_id, self.images, self.rows, self._open = {}, [], {}, []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs.get("src", ""))
        if tag == "tr" and self._open:
            table = next((i for i in reversed(self._open) if i), None)
            if table:
                self.rows[table] = self.rows.get(table, 0) + 1
        self._open.append(attrs.get("id"))

    def handle_endtag(self, tag):
        if self._open:
            self._open.pop()

    def handle_data(self, data):
        for element_id in filter(None, self._open):
            self.text_by_id[element_id] = self.text_by_id.get(element_id, "") + data


class Webhook(http.server.BaseHTTPRequestHandler):
    received: list = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append(json.loads(body))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def serve_webhook():
    """A webhook on 127.0.0.1 that keeps what it receives, until the generator is closed."""
    Webhook.received = []
    server = http.server.HTTPServer(("127.0.0.1", 0), Webhook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/hook", Webhook.received
    server.shutdown()
    server.server_close()
