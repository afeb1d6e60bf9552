"""The request handler of the small HTTP servers tests run in a thread."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from typing import Any


class QuietHandler(BaseHTTPRequestHandler):
    """Logs nothing (the test's output stays its own); :meth:`reply` answers 200."""

    def reply(self, body: bytes, content_type: str = "application/json") -> None:
        """Send ``body`` as the whole 200 answer, with its type and length."""
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass
