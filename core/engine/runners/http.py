"""A step that is one streamed request to an OpenAI-compatible chat-completions endpoint.

Works with any server that speaks ``POST {base}/chat/completions`` with ``stream: true``
(OpenAI, llama.cpp, Ollama, vLLM...). The API key is read from the environment variable
the spec names (``openai:MODEL@URL#VAR``, default ``OPENAI_API_KEY``) when the request is
made; it is never stored. An HTTP step cannot be frozen: suspending it interrupts it, and
resuming queues it again. Its reply is turned into the same JSON Lines events a command
runner prints, so the engine treats both alike.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from ...model.runner_spec import RunnerSpec
from .process import Sink, StepResult

DEFAULT_BASE = "https://api.openai.com/v1"
DEFAULT_KEY_ENV = "OPENAI_API_KEY"


def request_messages(doc: dict[str, Any]) -> list[dict[str, str]]:
    """The chat messages for a step: system prompt (with memory and resources), then context."""
    system = doc.get("system") or ""
    if doc.get("memory"):
        system += "\n\nWorking memory (JSON): " + json.dumps(doc["memory"], ensure_ascii=False)
    if doc.get("resources"):
        system += "\n\nBound resources: " + ", ".join(f"{r['kind']} {r['uri']} ({r['mode']})" for r in doc["resources"])
    out = [{"role": "system", "content": system.strip()}] if system.strip() else []
    for m in doc.get("messages", []):
        role = m["role"] if m["role"] in ("system", "user", "assistant") else "user"
        out.append({"role": role, "content": m["content"]})
    return out


class HttpStep:
    """One streamed request. What the model says arrives in the run's log as it streams
    (stream ``reply``); it becomes a message only when the reply is whole, so an interrupted
    or suspended request leaves nothing partial in the context (the partial reply stays in
    the run's record)."""

    freezable = False
    pid = None
    frozen = False

    def __init__(self, spec: RunnerSpec) -> None:
        self.spec = spec
        self.content: list[str] = []
        self.usage: dict[str, int] = {}
        self.error = ""
        self.task: asyncio.Task[int] | None = None
        self.sink: Sink = lambda stream, data: None

    @classmethod
    async def start(cls, spec: RunnerSpec, cwd: str, env: dict[str, str], tracker: object = None) -> HttpStep:
        return cls(spec)

    async def run(self, document: bytes | None, sink: Sink) -> StepResult:
        self.sink = sink
        self.task = asyncio.ensure_future(self._request(json.loads(document or b"{}")))
        try:
            code: int | None = await self.task
        except asyncio.CancelledError:
            code = None
            if not self.task.cancelled():
                raise
        except Exception as exc:  # noqa: BLE001 - any transport failure fails the run, not the engine
            code, self.error = 1, f"{type(exc).__name__}: {exc}"
        if code == 0:
            if self.content:
                sink("out", json.dumps({"type": "message", "role": "assistant",
                                        "content": "".join(self.content)}).encode() + b"\n")
        if self.usage:
            sink("out", json.dumps({"type": "usage", "in": self.usage.get("prompt_tokens", 0),
                                    "out": self.usage.get("completion_tokens", 0)}).encode() + b"\n")
        return StepResult(code, self.error, "".join(self.content) if code != 0 else "")

    async def _request(self, doc: dict[str, Any]) -> int:
        import httpx

        base, _, key_env = (self.spec.arg or DEFAULT_BASE).partition("#")
        key = os.environ.get(key_env or DEFAULT_KEY_ENV)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        body = {"model": self.spec.target, "messages": request_messages(doc), "stream": True,
                "stream_options": {"include_usage": True}}
        timeout = httpx.Timeout(10.0, read=300.0)
        async with httpx.AsyncClient(timeout=timeout) as client:
            async with client.stream("POST", f"{base.rstrip('/')}/chat/completions", json=body,
                                     headers=headers) as response:
                if response.status_code != 200:
                    text = (await response.aread()).decode("utf-8", "replace")[:500]
                    self.error = f"HTTP {response.status_code} from {base}: {text}"
                    return 1
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    try:
                        chunk = json.loads(data)
                    except ValueError:
                        continue
                    for choice in chunk.get("choices") or []:
                        piece = (choice.get("delta") or {}).get("content")
                        if piece:
                            self.content.append(piece)
                            self.sink("reply", piece.encode("utf-8", "replace"))
                    if chunk.get("usage"):
                        self.usage = chunk["usage"]
        return 0

    def freeze(self) -> None:
        raise NotImplementedError("an HTTP step cannot be frozen")

    def thaw(self) -> None:
        pass

    async def interrupt(self, grace: float) -> None:
        self.kill()

    def kill(self) -> None:
        if self.task is not None:
            self.task.cancel()
