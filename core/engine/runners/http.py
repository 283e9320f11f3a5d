"""A step that is an agent loop on an OpenAI-compatible chat-completions endpoint.

Works with any server that speaks ``POST {base}/chat/completions`` with ``stream: true``
(OpenAI, llama.cpp, Ollama, vLLM...). The model is offered the session's bound resources as
tools (``toolbox``); each streamed reply that calls tools has them run and answered, turn
after turn, until a reply calls none or the session's turn limit (``sampling``) is reached. Every reply and every tool call is handed to the engine
as it completes, as the same JSON Lines events a command runner prints (tool calls as
``tool`` events, stored as the agent-CLI runners store theirs), so the engine treats both
alike and commits them as they come.

Suspending the step is a true pause: the request or tool call under way finishes, then the
loop holds before the next one until it is resumed; nothing partial enters the context.
Interrupting it cancels what is under way and keeps the turns already done. The session's
sampling settings (temperature, max tokens, any extra request field) go into every request.

The API key is read from the environment variable the spec names
(``openai:MODEL@URL#VAR``, default ``OPENAI_API_KEY``) when the request is made; it is never
stored.

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
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...model import limits, sampling
from ...model.errors import InvalidArgument, ProcessionError
from ...model.runner_spec import RunnerSpec
from ...store import tokens
from . import toolbox
from .process import Sink, StepResult

DEFAULT_BASE = "https://api.openai.com/v1"
DEFAULT_KEY_ENV = "OPENAI_API_KEY"
#: What an HTTP header value may hold: printable ASCII, no space (a key never has one).
_KEY = re.compile(r"[\x21-\x7e]+")
#: The blank a key is replaced with in any text that is kept.
HIDDEN = "[key hidden]"
#: How much of a tool call's id and name (and of arguments refused) its record keeps.
NAME_KEPT = 4096
#: A reply being streamed is told as the run's status this often at most, by its last words.
STATUS_EVERY_S = 0.5
STATUS_TAIL = 150


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


def request_messages(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The chat messages for a step: system prompt (with memory and resources), then context.

    Tool calls in the history (this runner's, or an agent CLI's) go back to the model as
    what they were: an assistant message calling them, then each one's result."""
    system = doc.get("system") or ""
    if doc.get("memory"):
        system += "\n\nWorking memory (JSON): " + json.dumps(doc["memory"], ensure_ascii=False)
    if doc.get("resources"):
        system += "\n\nBound resources: " + ", ".join(f"{r['kind']} {r['uri']} ({r['mode']})" for r in doc["resources"])
    out: list[dict[str, Any]] = [{"role": "system", "content": system.strip()}] if system.strip() else []
    calls: list[tuple[int, dict[str, Any]]] = []

    def settle() -> None:
        if calls:
            out.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": t.get("id") or f"call_{seq}", "type": "function",
                 "function": {"name": t.get("name") or "tool", "arguments": json.dumps(t.get("input"))}}
                for seq, t in calls]})
            out.extend({"role": "tool", "tool_call_id": t.get("id") or f"call_{seq}",
                        "content": t["output"] if t.get("output") is not None else "(no result: the run stopped first)"}
                       for seq, t in calls)
            calls.clear()

    for m in doc.get("messages", []):
        if m["role"] == "tool" and isinstance(m.get("tool"), dict):
            calls.append((m.get("seq", 0), m["tool"]))
            continue
        settle()
        role = m["role"] if m["role"] in ("system", "user", "assistant") else "user"
        out.append({"role": role, "content": m["content"]})
    settle()
    return out


def counted(body: dict[str, Any], count: Callable[[str], int]) -> int:
    """Procession's count of one request, in the workspace's counter: each message (its text,
    and the calls it makes as sent) and the tools offered. What the server reports it was
    sent, over this, is the session's factor (``tokens.calibrate``)."""
    total = count(json.dumps(body["tools"], ensure_ascii=False)) if body.get("tools") else 0
    for m in body["messages"]:
        text = m.get("content") or ""
        if m.get("tool_calls"):
            text += json.dumps(m["tool_calls"], ensure_ascii=False)
        total += count(text)
    return total


@dataclass(slots=True)
class Reply:
    """One streamed reply, as it came: its text, its tool calls (by index), its usage."""

    text: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)

    def tool_calls(self) -> list[dict[str, Any]]:
        return [{"id": c.get("id") or f"call_{i}", "type": "function",
                 "function": {"name": c.get("name", ""), "arguments": c.get("arguments", "")}}
                for i, c in sorted(self.calls.items())]


class HttpStep:
    """An agent loop of streamed requests. What the model says arrives in the run's log as it
    streams (stream ``reply``); it becomes a message only when the reply is whole, so an
    interrupted request leaves nothing partial in the context (the partial reply stays in
    the run's record)."""

    freezable = True
    pid = None

    def __init__(self, spec: RunnerSpec, cwd: str = ".", env: dict[str, str] | None = None,
                 count: Callable[[str], int] = tokens.estimate, wrap: toolbox.Wrap = list) -> None:
        self.spec = spec
        self.cwd = cwd
        self.env = dict(env or {})
        self.count = count
        self.wrap = wrap
        self.sent = 0  # Procession's count of the request under way
        self.reply = Reply()
        self.error = ""
        self.key: str | None = None
        self.task: asyncio.Task[int] | None = None
        self.sink: Sink = lambda stream, data: None
        self.frozen = False
        self._going = asyncio.Event()
        self._going.set()
        self._open_call: tuple[str, str, Any] | None = None
        self.clock: Callable[[], float] = time.monotonic
        self._told = -STATUS_EVERY_S  # when the reply under way was last told as the run's status
        self.ask: toolbox.Ask | None = None  # set when a person must allow each tool call that is not a read

    @classmethod
    async def start(cls, spec: RunnerSpec, cwd: str, env: dict[str, str], tracker: object = None,
                    count: Callable[[str], int] = tokens.estimate, wrap: toolbox.Wrap = list) -> HttpStep:
        """``count`` is the workspace's counter: what the server reports against it calibrates
        the session's context figure; ``wrap`` starts a process of its tools within the run's
        bounds (``confinement.Bounds.wrap``)."""
        sampling.max_turns(env)  # a bad setting fails the run before it starts, in one line
        sampling.fields(env)
        return cls(spec, cwd, env, count, wrap)

    async def run(self, document: bytes | None, sink: Sink) -> StepResult:
        self.sink = sink
        self.task = asyncio.ensure_future(self._loop(json.loads(document or b"{}")))
        try:
            code: int | None = await self.task
        except asyncio.CancelledError:
            code = None
            if not self.task.cancelled():
                raise
        except Exception as exc:  # noqa: BLE001 - any failure fails the run, not the engine
            code, self.error = 1, _failure(exc, "the server")
        if self._open_call is not None:  # stopped in the middle of a tool call: it never returned
            self._event(type="tool", id=self._open_call[0], name=self._open_call[1], input=self._open_call[2],
                        output=None, is_error=True)
        self._usage()
        return StepResult(code, self.error, "".join(self.reply.text) if code != 0 else "")

    def _event(self, **event: Any) -> None:
        self.sink("out", json.dumps(event, ensure_ascii=False).encode("utf-8", "replace") + b"\n")

    def _usage(self) -> None:
        usage, self.reply.usage = self.reply.usage, {}
        if usage:
            self._event(type="usage", **{"in": usage.get("prompt_tokens", 0), "out": usage.get("completion_tokens", 0),
                                         "counted": self.sent})

    async def _loop(self, doc: dict[str, Any]) -> int:
        import httpx

        base, _, key_env = (self.spec.arg or DEFAULT_BASE).partition("#")
        try:
            self.key = api_key(key_env or DEFAULT_KEY_ENV)
            max_turns = sampling.max_turns(self.env)
            extra = sampling.fields(self.env)
        except InvalidArgument as exc:
            self.error = str(exc)
            return 1
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        messages = request_messages(doc)
        timeout = httpx.Timeout(10.0, read=300.0)
        try:
            async with toolbox.opened(doc.get("resources") or [], self.cwd, self.env, self.wrap) as box, \
                    httpx.AsyncClient(timeout=timeout) as client:
                tools = box.specs()
                for _ in range(max_turns):
                    await self._going.wait()
                    body = {**extra, "model": self.spec.target, "messages": messages, "stream": True,
                            "stream_options": {"include_usage": True}, **({"tools": tools} if tools else {})}
                    self.reply = Reply()
                    self.sent = counted(body, self.count)
                    if not await self._request(client, base, headers, body):
                        return 1
                    text, calls = "".join(self.reply.text), self.reply.tool_calls()
                    if text:
                        self._event(type="message", role="assistant", content=text)
                    self._usage()
                    self.reply.text = []
                    if not calls:
                        return 0
                    messages.append({"role": "assistant", "content": text or None, "tool_calls": calls})
                    for call in calls:
                        await self._going.wait()
                        messages.append(await self._call(box, call))
                self._event(type="note", text=f"stopped at the turn limit ({max_turns} model requests;"
                                              f" the session's {sampling.MAX_TURNS_ENV} setting)")
        except (httpx.HTTPError, httpx.InvalidURL, UnicodeError) as exc:
            self.error = _failure(exc, base)
            return 1
        except toolbox.Refused as exc:
            self.error = str(exc)
            return 1
        except OSError as exc:
            self.error = f"the session's tools could not start: {exc}"
            return 1
        return 0

    async def _call(self, box: toolbox.Toolbox, call: dict[str, Any]) -> dict[str, Any]:
        """Run one tool call, tell the engine, and answer the model. What its record could not
        hold (arguments nested too deep, too large, not Unicode) is refused before it runs:
        nothing a tool does goes unrecorded."""
        fn = call["function"]
        ident, name = call["id"][:NAME_KEPT], fn["name"][:NAME_KEPT]
        try:
            args = toolbox.arguments(fn["arguments"])
        except toolbox.Refused as exc:
            shown: Any = fn["arguments"][:NAME_KEPT] if limits.is_unicode(fn["arguments"]) else "(not Unicode)"
            output, is_error = str(exc), True
        else:
            shown = args
            self._open_call = (ident, name, shown)
            self._event(type="status", text=f"{name}: {fn['arguments'][:150]}")
            output, is_error = await box.call(fn["name"], args, self.ask)
            self._open_call = None
        self._event(type="tool", id=ident, name=name, input=shown, output=output, is_error=is_error)
        return {"role": "tool", "tool_call_id": call["id"], "content": output}

    async def _request(self, client: Any, base: str, headers: dict[str, str], body: dict[str, Any]) -> bool:
        import httpx

        async with client.stream("POST", f"{base.rstrip('/')}/chat/completions", json=body,
                                 headers=headers) as response:
            if response.status_code != 200:
                text = (await response.aread()).decode("utf-8", "replace")[:500]
                self.error = self.hide(f"HTTP {response.status_code} from {base}: {text}")
                return False
            try:
                async for line in response.aiter_lines():
                    if not self._line(line):
                        break
            except httpx.HTTPError as exc:
                self.error = _failure(exc, base)
                return False
        return True

    def _line(self, line: str) -> bool:
        """One line of the event stream: a piece of the reply, of a tool call, or the usage;
        False at its end."""
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
            if not isinstance(delta, dict):
                continue
            piece = delta.get("content")
            if isinstance(piece, str) and piece:
                self.reply.text.append(piece)
                self.sink("reply", piece.encode("utf-8", "replace"))
                self._writing()
            for part in delta.get("tool_calls") or []:
                if isinstance(part, dict):
                    self._tool_piece(part)
        if isinstance(chunk.get("usage"), dict):
            self.reply.usage = chunk["usage"]
        return True

    def _writing(self) -> None:
        """A reply being streamed is what the run is doing: its last words are its status
        (a long answer without tool calls showed nothing until it ended), told at most every
        ``STATUS_EVERY_S``."""
        now = self.clock()
        if now - self._told < STATUS_EVERY_S:
            return
        self._told = now
        tail, size = [], 0
        for piece in reversed(self.reply.text):  # the last words, not the whole reply joined each time
            tail.append(piece)
            size += len(piece)
            if size >= STATUS_TAIL:
                break
        self._event(type="status", text="writing: " + " ".join("".join(reversed(tail)).split())[-STATUS_TAIL:])

    def _tool_piece(self, part: dict[str, Any]) -> None:
        index = part.get("index", len(self.reply.calls))
        call = self.reply.calls.setdefault(index if isinstance(index, int) else 0, {})
        if isinstance(part.get("id"), str):
            call["id"] = part["id"]
        fn: dict[str, Any] = part["function"] if isinstance(part.get("function"), dict) else {}
        if isinstance(fn.get("name"), str):
            call["name"] = call.get("name", "") + fn["name"]
        if isinstance(fn.get("arguments"), str):
            call["arguments"] = call.get("arguments", "") + fn["arguments"]

    def hide(self, text: str) -> str:
        """``text`` with the key blanked out: a server may quote the key it was sent."""
        return text.replace(self.key, HIDDEN) if self.key else text

    def freeze(self) -> None:
        """Hold the loop before its next request or tool call (the one under way finishes)."""
        self.frozen = True
        self._going.clear()

    def thaw(self) -> None:
        self.frozen = False
        self._going.set()

    async def interrupt(self, grace: float) -> None:
        self.kill()

    def kill(self) -> None:
        if self.task is not None:
            self.task.cancel()


async def complete(spec: RunnerSpec, messages: list[dict[str, Any]], env: dict[str, str] | None = None,
                   timeout: float = 300.0) -> tuple[str, dict[str, Any]]:
    """One whole (not streamed) chat completion, without tools: its text and its usage.
    Refused in one line that names the server, never the key (as a run's error is)."""
    import httpx

    env = dict(os.environ if env is None else env)
    base, _, key_env = (spec.arg or DEFAULT_BASE).partition("#")
    key = api_key(key_env or DEFAULT_KEY_ENV)
    body = {**sampling.fields(env), "model": spec.target, "messages": messages, "stream": False}
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(10.0, read=timeout)) as client:
            response = await client.post(f"{base.rstrip('/')}/chat/completions", json=body,
                                         headers={"Authorization": f"Bearer {key}"} if key else {})
    except (httpx.HTTPError, httpx.InvalidURL, UnicodeError) as exc:
        raise ProcessionError(_failure(exc, base)) from None
    text = response.text[:500]
    if key:
        text = text.replace(key, HIDDEN)
    if response.status_code != 200:
        raise ProcessionError(f"HTTP {response.status_code} from {base}: {text}")
    try:
        reply = response.json()
        content = reply["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise ProcessionError(f"{base} answered with no reply: {text}") from None
    if not isinstance(content, str) or not content.strip():
        raise ProcessionError(f"{base} answered with an empty reply")
    usage = reply.get("usage")
    return content.strip(), usage if isinstance(usage, dict) else {}
