"""What tests of pages and alerts share: Debian's chromium, headless, and the parts of a
rendered DOM they read; a webhook on 127.0.0.1 that keeps what it is sent."""

import html.parser
import http.server
import json
import shutil
import subprocess
import threading

from tests.helpers import LOOPBACK

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


def rendered(path) -> Page:
    """The page at `path` as chromium renders it: its DOM once its scripts ran, parsed."""
    dom = browser("--dump-dom", f"file://{path}")
    assert dom.returncode == 0, dom.stderr
    page = Page()
    page.feed(dom.stdout)
    return page


def serve_webhook():
    """A webhook on 127.0.0.1 that keeps what it receives, until the generator is closed:
    yields its URL and the JSON bodies it received, in order (each webhook its own list)."""
    received: list = []

    class Webhook(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer((LOOPBACK, 0), Webhook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://{LOOPBACK}:{server.server_port}/hook", received
    finally:
        server.shutdown()
        server.server_close()
