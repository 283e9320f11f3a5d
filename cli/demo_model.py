"""The demo's own model: a tiny scripted OpenAI-compatible server on 127.0.0.1.

``procession demo`` starts it (a thread, a free port) for as long as the monitor is open, so
that the demo's ``openai:`` session shows the agent loop with no API key and no network: asked
a question, it calls every file-reading tool it is offered, then writes its answer with the
first file-writing tool it is offered (once), and answers from what the files said (the grade
with the highest hourly rate, and who is on it). It speaks streamed Chat
Completions with tool calls and usage, as a real server does; it is not a model.
"""

from __future__ import annotations

import csv
import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "demo"


def reply(body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """What the scripted model answers to a request: text, or tool calls to make first."""
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    if last.get("role") == "user":
        reads = [t["function"]["name"] for t in body.get("tools") or []
                 if t["function"]["name"].endswith("_read") and not t["function"]["parameters"].get("required")]
        if reads:
            return "I'll read the tables first.", [
                {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": "{}"}}
                for i, name in enumerate(reads)]
        return "I have no table to read: bind one to this session.", []
    results = [str(m.get("content") or "") for m in messages if m.get("role") == "tool"]
    text = answer(results)
    writes = [t["function"]["name"] for t in body.get("tools") or [] if t["function"]["name"].endswith("_write")]
    written = any(c["function"]["name"].endswith("_write") for m in messages if m.get("role") == "assistant"
                  for c in m.get("tool_calls") or [])
    if writes and not written:  # a bound answer file: the answer goes there too (a write: asked, under ask)
        return "I'll write the answer down.", [
            {"id": "call_write", "type": "function",
             "function": {"name": writes[0], "arguments": json.dumps({"content": text + "\n"})}}]
    return text, []


def answer(tables: list[str]) -> str:
    """An answer read off the CSV tables the tools returned."""
    rows = [list(csv.DictReader(io.StringIO(t))) for t in tables]
    rates = next((r for r in rows if r and "hourly" in r[0]), [])
    people = next((r for r in rows if r and "name" in r[0] and "grade" in r[0]), [])
    if not rates:
        return "The tables I read hold no hourly rates."
    top = max(rates, key=lambda r: float(r["hourly"] or 0))
    on_it = [p["name"] for p in people if p.get("grade") == top["grade"]]
    hours = sum(float(p.get("hours") or 0) for p in people if p.get("grade") == top["grade"])
    who = f": {', '.join(on_it)} ({hours:g} hours this month)" if on_it else ", and no one is on it"
    return f"Grade {top['grade']} has the highest hourly rate, {top['hourly']} EUR{who}."


class DemoModel(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.thread = threading.Thread(target=self.serve_forever, args=(0.1,), name="demo-model", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def __enter__(self) -> DemoModel:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        except ValueError:
            body = None
        if not self.path.endswith("/chat/completions") or not isinstance(body, dict):
            self.send_error(404, "the demo model answers POST /v1/chat/completions only")
            return
        text, calls = reply(body)
        usage = {"prompt_tokens": len(json.dumps(body.get("messages"))) // 4, "completion_tokens": len(text) // 4 + 1}
        if not body.get("stream"):
            message = {"role": "assistant", "content": text, **({"tool_calls": calls} if calls else {})}
            data = json.dumps({"choices": [{"index": 0, "message": message}], "usage": usage}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        chunks: list[dict[str, Any]] = [{"content": word} for word in _pieces(text)]
        chunks += [{"tool_calls": [dict(call, index=i)]} for i, call in enumerate(calls)]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for delta in chunks:
            self._event({"choices": [{"index": 0, "delta": delta}]})
        self._event({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls" if calls else "stop"}]})
        self._event({"choices": [], "usage": usage})
        self.wfile.write(b"data: [DONE]\n\n")

    def _event(self, data: dict[str, Any]) -> None:
        self.wfile.write(f"data: {json.dumps({'model': MODEL, **data})}\n\n".encode())
        self.wfile.flush()


def _pieces(text: str) -> list[str]:
    words = text.split(" ")
    return [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]
