"""Small stdlib HTTP servers for the endpoint tests of response shapes the real llama-server never sends
(vLLM's, broken streams): a handler class per test module, served on 127.0.0.1 for the test's duration."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator


class CannedStream(http.server.BaseHTTPRequestHandler):
    """Answers every POST with `body`: an event stream, or with another `status` a JSON error body.
    Subclass it per test module: the canned answer is class state."""

    status = 200
    body = b""

    def do_POST(self):  # noqa: N802 - the stdlib's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.reply(self.status, "text/event-stream" if self.status == 200 else "application/json", self.body)

    def reply(self, status: int, kind: str, payload: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """The base URL of `handler` served on a free local port, shut down afterwards."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
