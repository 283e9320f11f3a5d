"""The OpenAI-compatible runner against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import until
from procession import State

SECRET = "sk-test-4c1b9e0d-never-store-me"


class ChatServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.requests: list[dict] = []
        self.pieces = ["The payroll ", "for November ", "is ready."]
        self.delay = 0.0
        self.status = 200

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class Handler(BaseHTTPRequestHandler):
    server: ChatServer

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
        if self.server.status != 200:
            self.send_response(self.server.status)
            self.end_headers()
            self.wfile.write(b'{"error": "model not loaded"}')
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            for piece in self.server.pieces:
                chunk = {"choices": [{"index": 0, "delta": {"content": piece}}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
                time.sleep(self.server.delay)
            usage = {"choices": [], "usage": {"prompt_tokens": 321, "completion_tokens": 12}}
            self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        except (BrokenPipeError, ConnectionResetError):
            pass


@pytest.fixture
def server():
    srv = ChatServer()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()


async def finished_runs(ws, sid, n=1):
    runs = [r for r in await ws.runs(sid) if r.ended]
    return runs if len(runs) >= n else None


async def test_streamed_reply_usage_and_the_key_stays_out_of_the_store(live, engine, server, db, monkeypatch, tmp_path):
    monkeypatch.setenv("PAYROLL_KEY", SECRET)
    sid = (await live.spawn("payroll", "hr", system="You compute payroll.",
                           runner=f"openai:local-model@{server.url}#PAYROLL_KEY")).sid
    await live.memory_set(sid, "month", "2026-11")
    await live.send(sid, "Is the payroll ready?")
    await live.activate(sid)
    run = (await until(lambda: finished_runs(live, sid)))[0]
    assert run.outcome == "ok" and (run.tokens_in, run.tokens_out) == (321, 12)
    assert (await live.history(sid))[-1].content == "The payroll for November is ready."
    request = server.requests[0]
    assert request["path"] == "/v1/chat/completions" and request["auth"] == f"Bearer {SECRET}"
    assert request["body"]["model"] == "local-model" and request["body"]["stream"] is True
    messages = request["body"]["messages"]
    assert messages[0]["role"] == "system" and "You compute payroll." in messages[0]["content"]
    assert '"month": "2026-11"' in messages[0]["content"]
    assert messages[-1] == {"role": "user", "content": "Is the payroll ready?"}
    snap = tmp_path / "payroll.json"
    await live.save(sid, file=str(snap))
    for path in (db, snap):
        found = subprocess.run(["grep", "-rc", SECRET, str(path)], capture_output=True, text=True)
        assert found.stdout.strip() in ("0", ""), f"the key leaked into {path}"
    assert SECRET not in json.dumps([e.to_json() for e in await live.journal(limit=1000)])


async def test_http_error_fails_the_run_with_the_reason(live, engine, server):
    server.status = 503
    sid = (await live.spawn("down", "a", runner=f"openai:m@{server.url}")).sid
    await live.activate(sid)
    run = (await until(lambda: finished_runs(live, sid)))[0]
    assert run.outcome == "failed" and "HTTP 503" in run.error and "model not loaded" in run.error
    assert (await live.info(sid)).state is State.SLEEPING


async def test_unreachable_server_fails_the_run(live, engine):
    sid = (await live.spawn("nowhere", "a", runner="openai:m@http://127.0.0.1:9")).sid
    await live.activate(sid)
    run = (await until(lambda: finished_runs(live, sid)))[0]
    assert run.outcome == "failed" and "Connect" in run.error


async def test_interrupt_keeps_the_partial_reply(live, engine, server):
    server.delay = 0.4
    sid = (await live.spawn("slow", "a", runner=f"openai:m@{server.url}")).sid
    await live.activate(sid)
    await until(lambda: len(server.requests) == 1)
    await until(lambda: _replied(live, sid))  # the reply has begun: part of it is in the run's log
    await live.interrupt(sid)
    run = (await until(lambda: finished_runs(live, sid)))[0]
    assert run.outcome == "interrupted"
    last = (await live.history(sid))[-1]
    assert last.content.startswith("The payroll") and last.meta["outcome"] == "interrupted"


async def test_suspend_lets_the_request_under_way_finish_whole(live, engine, server):
    server.delay = 0.3
    sid = (await live.spawn("slow", "a", runner=f"openai:m@{server.url}")).sid
    await live.activate(sid)
    await until(lambda: len(server.requests) == 1)
    await live.suspend(sid)
    run = (await until(lambda: finished_runs(live, sid)))[0]
    assert run.outcome == "ok" and len(server.requests) == 1
    assert (await live.history(sid))[-1].content == "The payroll for November is ready."
    assert (await live.info(sid)).state is State.SUSPENDED


async def _replied(ws, sid: int) -> bool:
    _, chunks = await ws.run_log(sid)
    return any(c.stream == "reply" for c in chunks)
