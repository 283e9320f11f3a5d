"""A step that is one streamed request to an OpenAI-compatible chat-completions endpoint.

Works with any server that speaks ``POST {base}/chat/completions`` with ``stream: true``
(OpenAI, llama.cpp, Ollama, vLLM...). The API key is read from the environment variable
the spec names (``openai:MODEL@URL#VAR``, default ``OPENAI_API_KEY``) when the request is
made; it is never stored. An HTTP step cannot be frozen: suspending it interrupts it, and
resuming queues it again. Its reply is turned into the same JSON Lines events a command
runner prints, so the engine treats both alike.

The key must never reach a run's error (stored, journaled, shown): surrounding whitespace
(a newline from ``$(cat key.txt)``) is stripped, and a key that still holds anything but
printable ASCII is refused before any request, naming the variable, never the value. The
HTTP client's own exception texts can quote a header (``Illegal header value b'Bearer
...'``), so a failed request is described by its kind and the server, never by the
exception's text; and whatever a server answers is stored with the key blanked out.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from typing import Any

from ...model import limits
from ...model.errors import InvalidArgument
from ...model.runner_spec import RunnerSpec
from .process import Sink, StepResult

DEFAULT_BASE = "https://api.openai.com/v1"
DEFAULT_KEY_ENV = "OPENAI_API_KEY"
#: What an HTTP header value may hold: printable ASCII, no space (a key never has one).
_KEY = re.compile(r"[\x21-\x7e]+")
#: The blank a key is replaced with in any text that is kept.
HIDDEN = "[key hidden]"


def api_key(variable: str) -> str | None:
    """The key in ``$variable``, stripped; None when unset or blank; ``InvalidArgument`` (naming
    the variable, never the value) when what is left holds a control character, a space or
    anything beyond printable ASCII."""
    key = os.environ.get(variable, "").strip()
    if not key:
        return None
    if not _KEY.fullmatch(key):
        raise InvalidArgument(f"the API key in ${variable} holds a control character, a space or a non-ASCII"
                              " character; fix the variable (its value is not shown)")
    return key


def _failure(exc: BaseException, base: str) -> str:
    """A failed request in one line that cannot quote a header: the exception's kind and the
    server, and the operating system's reason for a network failure (it names no header)."""
    import httpx

    kind = type(exc).__name__
    if isinstance(exc, httpx.TimeoutException):
        return f"{kind}: {base} did not answer in time"
    if isinstance(exc, httpx.NetworkError):
        cause = exc.__cause__ or exc.__context__
        reason = f" ({cause.strerror})" if isinstance(cause, OSError) and cause.strerror else ""
        return f"{kind}: cannot reach {base}{reason}"
    if isinstance(exc, (httpx.HTTPError, httpx.InvalidURL, UnicodeError)):
        return f"{kind}: the request to {base} failed"
    return f"{kind}: the step failed"


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
        self.key: str | None = None
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
        except Exception as exc:  # noqa: BLE001 - any failure fails the run, not the engine
            code, self.error = 1, _failure(exc, "the server")
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
        try:
            self.key = api_key(key_env or DEFAULT_KEY_ENV)
        except InvalidArgument as exc:
            self.error = str(exc)
            return 1
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        body = {"model": self.spec.target, "messages": request_messages(doc), "stream": True,
                "stream_options": {"include_usage": True}}
        timeout = httpx.Timeout(10.0, read=300.0)
        try:
            async with httpx.AsyncClient(timeout=timeout) as client:
                async with client.stream("POST", f"{base.rstrip('/')}/chat/completions", json=body,
                                         headers=headers) as response:
                    if response.status_code != 200:
                        text = (await response.aread()).decode("utf-8", "replace")[:500]
                        self.error = self.hide(f"HTTP {response.status_code} from {base}: {text}")
                        return 1
                    async for line in response.aiter_lines():
                        if not self._line(line):
                            break
        except Exception as exc:  # noqa: BLE001 - any request failure fails the run, in words of our own
            self.error = _failure(exc, base)
            return 1
        return 0

    def _line(self, line: str) -> bool:
        """One line of the event stream: a piece of the reply, or the usage; False at its end."""
        if not line.startswith("data:"):
            return True
        data = line[5:].strip()
        if data == "[DONE]":
            return False
        try:
            chunk = limits.json_loads(data, "a reply chunk")
        except InvalidArgument:
            return True  # a line no reply is made of is skipped, as a malformed one always was
        if not isinstance(chunk, dict):
            return True
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            delta = choice.get("delta") if isinstance(choice, dict) else None
            piece = delta.get("content") if isinstance(delta, dict) else None
            if isinstance(piece, str):
                self.content.append(piece)
                self.sink("reply", piece.encode("utf-8", "replace"))
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        return True

    def hide(self, text: str) -> str:
        """``text`` with the key blanked out: a server may quote the key it was sent."""
        return text.replace(self.key, HIDDEN) if self.key else text

    def freeze(self) -> None:
        raise NotImplementedError("an HTTP step cannot be frozen")

    def thaw(self) -> None:
        pass

    async def interrupt(self, grace: float) -> None:
        self.kill()

    def kill(self) -> None:
        if self.task is not None:
            self.task.cancel()
