"""A phone's push service, as the tests reach it: an ntfy server of their own."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Ntfy:
    """An ntfy server of the test's own on 127.0.0.1 (what Apprise's ``ntfy://`` posts: a JSON
    message to ``/``), answering ``status``; ``got`` holds each message it took, with the
    headers it came with (``X-Click``, ``X-Actions``) under ``headers``."""

    def __init__(self, status: int = 200) -> None:
        got: list[dict[str, Any]] = []
        self.got = got

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                got.append({**json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0))),
                            "headers": dict(self.headers)})
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"id": "1"}')

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"ntfy://127.0.0.1:{self.server.server_port}/procession-test"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
