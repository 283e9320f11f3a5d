"""The API key of an ``openai:`` runner stays secret: read from its variable, stripped, refused
(naming the variable, never the value) when no header can carry it, and never written to the
workspace, its -wal, a snapshot or the journal — nor to a run's error, whatever the HTTP
client or the server says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from procession import Workspace
from procession.engine.runners import http
from support.wait import HANG_S

PLANTED = "sk-planted-5e1d09c4"


class Server(ThreadingHTTPServer):
    """A chat endpoint that records the Authorization header; ``status`` other than 200
    answers with a body quoting the header, as some servers do."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.auth: list[str | None] = []
        self.status = 200
        self.linger = 0.0  # seconds the connection stays open after [DONE]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class Handler(BaseHTTPRequestHandler):
    server: Server

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        auth = self.headers.get("Authorization")
        self.server.auth.append(auth)
        self.send_response(self.server.status)
        self.end_headers()
        if self.server.status != 200:
            self.wfile.write(f"invalid credentials: {auth}".encode())
            return
        chunk = {"choices": [{"index": 0, "delta": {"content": "paid"}}]}
        self.wfile.write(f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode())
        self.wfile.flush()
        time.sleep(self.server.linger)


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()


def run_with_key(cli, key: str) -> dict:
    """``activate --now`` in a process whose ``$PAYROLL_KEY`` is ``key``; the run's record."""
    out = subprocess.run([sys.executable, "-m", "procession", "activate", "1", "--now"], capture_output=True,
                         text=True, env={**os.environ, "PROCESSION_DB": str(cli.db), "PAYROLL_KEY": key}, timeout=HANG_S)
    assert "Traceback" not in out.stderr, out.stderr
    return cli.json("runs", "1")[-1]


def assert_nowhere(cli, tmp_path: Path, *secrets: str) -> None:
    """Not in the workspace file, its -wal (kept by the open workspace), a snapshot of the
    session, the journal, or anything the CLI prints about the runs."""
    snap = tmp_path / "s.json"
    cli("save", "1", "-o", str(snap), "--force")
    files = [cli.db, Path(f"{cli.db}-wal"), snap]
    assert files[1].exists(), "the test holds the workspace open, so its -wal is there to search"
    printed = cli("log", "-n", "1000", "--json").stdout + cli("runs", "1").stdout + cli("runs", "1", "--json").stdout
    for secret in secrets:
        for path in files:
            assert secret.encode() not in path.read_bytes(), f"the key leaked into {path}"
        assert secret not in printed


@pytest.mark.parametrize("key", [f"{PLANTED}\r\nX-Injected: 1", f"{PLANTED}\n", f"{PLANTED} tail",
                                 f"{PLANTED}\rtail", f"{PLANTED}\ttail", f"{PLANTED}\x1b[8m", f"{PLANTED}é"],
                         ids=["crlf-header", "lf-inside", "space", "cr", "tab", "escape", "non-ascii"])
async def test_a_key_no_header_can_carry_is_refused_naming_the_variable(cli, db, tmp_path, server, key):
    key = key if key.strip() != PLANTED else f"{PLANTED}\nsecond-line"  # a newline inside, not at the end
    ws = await Workspace.open(db)  # held open: the -wal stays beside the file
    try:
        cli("spawn", "s", "--agent", "a", "--runner", f"openai:m@{server.url}#PAYROLL_KEY")
        cli("send", "1", "is the payroll ready?")
        run = run_with_key(cli, key)
        assert run["outcome"] == "failed"
        assert run["error"].splitlines()[-1].startswith("the API key in $PAYROLL_KEY holds a control character")
        assert server.auth == [], "nothing was sent with a key that would break the header"
        assert_nowhere(cli, tmp_path, PLANTED, key)
    finally:
        await ws.close()


async def test_surrounding_whitespace_is_stripped_and_the_key_is_kept_nowhere(cli, db, tmp_path, server):
    ws = await Workspace.open(db)
    try:
        cli("spawn", "s", "--agent", "a", "--runner", f"openai:m@{server.url}#PAYROLL_KEY")
        cli("send", "1", "is the payroll ready?")
        run = run_with_key(cli, f"  {PLANTED}\r\n")
        assert run["outcome"] == "ok", run
        assert server.auth == [f"Bearer {PLANTED}"]
        server.status = 401  # a server that quotes the header it was sent in its error
        run = run_with_key(cli, PLANTED)
        assert run["outcome"] == "failed" and "HTTP 401" in run["error"] and http.HIDDEN in run["error"]
        assert_nowhere(cli, tmp_path, PLANTED)
    finally:
        await ws.close()


async def test_the_reply_ends_at_done_even_if_the_server_keeps_the_connection(cli, server):
    server.linger = 30.0
    cli("spawn", "s", "--agent", "a", "--runner", f"openai:m@{server.url}#PAYROLL_KEY")
    cli("send", "1", "is the payroll ready?")
    started = time.monotonic()
    assert run_with_key(cli, PLANTED)["outcome"] == "ok"
    assert time.monotonic() - started < 20
    assert cli.json("history", "1")[-1]["content"] == "paid"


@pytest.mark.parametrize("exc", [
    httpx.LocalProtocolError(f"Illegal header value b'Bearer {PLANTED}\\n'"),
    httpx.RemoteProtocolError(f"illegal header line: bytearray(b'Authorization: Bearer {PLANTED}')"),
    httpx.UnsupportedProtocol(f"Request URL is missing a protocol: 'Bearer {PLANTED}'"),
    UnicodeEncodeError("ascii", f"Bearer {PLANTED}é", 26, 27, "ordinal not in range(128)"),
    ValueError(f"Invalid header value b'Bearer {PLANTED}'"),
])
def test_a_failed_request_is_described_without_the_exception_text(exc):
    """httpx and h11 quote header values in their exceptions: the run's error never uses them."""
    said = http._failure(exc, "http://127.0.0.1:9/v1")
    assert PLANTED not in said and type(exc).__name__ in said and "\n" not in said


def test_a_network_failure_keeps_the_reason_it_names_no_header():
    exc = httpx.ConnectError("All connection attempts failed")
    exc.__cause__ = ConnectionRefusedError(111, "Connection refused")
    assert http._failure(exc, "http://127.0.0.1:9/v1") == \
        "ConnectError: cannot reach http://127.0.0.1:9/v1 (Connection refused)"
