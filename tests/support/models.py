"""A scripted model server the agent CLIs talk to instead of a real model.

One HTTP server on 127.0.0.1 (a free port) speaks the four wire formats the CLIs use:
Anthropic Messages (``POST /v1/messages``: Claude Code), OpenAI Responses
(``POST /v1/responses``: Codex CLI), OpenAI Chat Completions (``POST /v1/chat/completions``:
opencode's openai-compatible provider, Qwen Code, Copilot CLI, and any plain OpenAI client) and
Gemini's ``generateContent`` (``POST /v1beta/models/{model}:streamGenerateContent``: Gemini CLI
with ``GOOGLE_GEMINI_BASE_URL``). A test writes a `Script` of turns; each model request of the
agent's loop takes the next turn, whatever the format, and the server answers it as that
format's streamed (or whole) reply. Tool calls are written by what they do (`shell`,
`read_file`, `mcp_call`) and named on the wire as the calling CLI's own tool is named
(``Bash``/``exec_command``/``bash``/``run_shell_command``...).

The CLIs also send requests that are not a turn of the agent loop: titles (opencode, Claude
without tools), context compaction (Codex, opencode), token counts, a ``HEAD /`` preflight, a
model list. They get a canned answer and never take a scripted turn, so a script lists exactly
the agent's own turns. Every request is recorded, parsed, in `ModelServer.requests`.

Usage numbers are the test's (`Usage`), never estimated, so a test can assert that what the CLI
reports, and what the engine computes from it, is exactly what the model said.
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from support.wait import HANG_S

# ---------------------------------------------------------------------------------------------
# What a test writes


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts a reply reports, in Anthropic's terms: ``input`` excludes the cached parts.

    The OpenAI formats report a prompt total instead (``input_tokens`` / ``prompt_tokens`` =
    `prompt`), with the cached parts as details; each format's reply maps these four numbers
    to its own fields (see ``usage`` in each wire class below).
    """

    input: int = 100
    output: int = 10
    cache_read: int = 0
    cache_write: int = 0

    @property
    def prompt(self) -> int:
        """Every token of the prompt: uncached, read from the cache, and written to it."""
        return self.input + self.cache_read + self.cache_write


class Hold:
    """Keeps a reply's stream open, after its first event, until `release` (or the server stops).

    The CLI has its response headers and the stream's opening event, so it is mid-request: the
    moment a test interrupts, cancels, suspends or kills it. `wait_reached` says when that
    moment has come; no sleeping.
    """

    def __init__(self) -> None:
        self._reached = threading.Event()
        self._released = threading.Event()

    @property
    def reached(self) -> bool:
        return self._reached.is_set()

    def wait_reached(self, timeout: float = HANG_S) -> None:
        """Return once a request is held here; fail the test after ``timeout`` seconds (a hang guard)."""
        if not self._reached.wait(timeout):
            raise AssertionError(f"no request reached the hold within {timeout}s")

    def release(self) -> None:
        """Let the held reply (and any later one on this hold) finish; idempotent."""
        self._released.set()

    def _hold(self, stopping: threading.Event) -> None:
        self._reached.set()
        while not self._released.wait(0.05):
            if stopping.is_set():
                return


@dataclass(frozen=True, slots=True)
class Call:
    """One tool call, said by what it does; each wire names it as its CLI's tool (`ToolUse`).

    ``action`` is ``shell`` (args: command), ``read`` (path), ``mcp`` (server, tool, arguments)
    or ``tool`` (name, input, namespace: sent exactly so, for anything else).
    """

    action: str
    args: Mapping[str, Any]

    @classmethod
    def shell(cls, command: str) -> Call:
        return cls("shell", {"command": command})

    @classmethod
    def read(cls, path: str) -> Call:
        return cls("read", {"path": path})

    @classmethod
    def mcp(cls, server: str, tool: str, arguments: Mapping[str, Any]) -> Call:
        return cls("mcp", {"server": server, "tool": tool, "arguments": dict(arguments)})

    @classmethod
    def tool(cls, name: str, input: Mapping[str, Any], namespace: str | None = None) -> Call:
        return cls("tool", {"name": name, "input": dict(input), "namespace": namespace})


@dataclass(frozen=True, slots=True)
class Turn:
    """One reply of the model: text, then tool calls (the CLI runs them and asks again).

    ``status`` other than 200 answers with that HTTP error instead (``text`` is its message).
    ``hold`` stalls the stream after its first event until the test releases it.
    """

    text: str = ""
    calls: tuple[Call, ...] = ()
    usage: Usage = Usage()
    hold: Hold | None = None
    status: int = 200


def say(text: str, *, usage: Usage = Usage(), hold: Hold | None = None) -> Turn:
    """A text reply: the end of the agent's turn."""
    return Turn(text=text, usage=usage, hold=hold)


def calls(*tool_calls: Call, text: str = "", usage: Usage = Usage(), hold: Hold | None = None) -> Turn:
    """A reply with several tool calls at once (the CLIs run them in parallel or in order)."""
    return Turn(text=text, calls=tool_calls, usage=usage, hold=hold)


def shell(command: str, *, text: str = "", usage: Usage = Usage(), hold: Hold | None = None) -> Turn:
    """Run ``command`` with the CLI's shell tool (Claude ``Bash``, Codex ``exec_command``,
    opencode ``bash``), in the CLI's working folder."""
    return calls(Call.shell(command), text=text, usage=usage, hold=hold)


def read_file(path: str, *, text: str = "", usage: Usage = Usage(), hold: Hold | None = None) -> Turn:
    """Read a file with the CLI's read tool (Claude ``Read``, opencode ``read``). Codex has no
    read tool: it reads files with its shell (``cat``), so that is what it is asked to do."""
    return calls(Call.read(path), text=text, usage=usage, hold=hold)


def mcp_call(server: str, tool: str, arguments: Mapping[str, Any], *, text: str = "",
             usage: Usage = Usage(), hold: Hold | None = None) -> Turn:
    """Call ``tool`` of the MCP server the CLI knows as ``server`` (Claude ``mcp__S__T``,
    Codex ``T`` in namespace ``mcp__S``, opencode ``S_T``)."""
    return calls(Call.mcp(server, tool, arguments), text=text, usage=usage, hold=hold)


def tool_call(name: str, input: Mapping[str, Any], *, namespace: str | None = None, text: str = "",
              usage: Usage = Usage(), hold: Hold | None = None) -> Turn:
    """Call a tool by the exact name the CLI offers it under (``namespace``: Codex only)."""
    return calls(Call.tool(name, input, namespace), text=text, usage=usage, hold=hold)


def http_error(status: int, message: str = "scripted error") -> Turn:
    """Answer the request with an HTTP error (in the format's error body) instead of a reply."""
    return Turn(text=message, status=status)


class Script:
    """The agent's turns, in order; each turn request of any format takes the next one.

    Tests may `add` turns while a CLI runs (e.g. after inspecting what it sent so far).
    """

    def __init__(self, *turns: Turn) -> None:
        self._turns = list(turns)
        self._taken = 0
        self._lock = threading.Lock()

    def add(self, *turns: Turn) -> None:
        with self._lock:
            self._turns.extend(turns)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._turns) - self._taken

    def _take(self) -> tuple[int, Turn] | None:
        with self._lock:
            if self._taken == len(self._turns):
                return None
            self._taken += 1
            return self._taken - 1, self._turns[self._taken - 1]


# ---------------------------------------------------------------------------------------------
# What the server saw


@dataclass(frozen=True, slots=True)
class ToolUse:
    """A tool call as the server sent it: its id comes back with the result."""

    id: str
    name: str
    input: Mapping[str, Any]
    namespace: str | None = None


@dataclass(frozen=True, slots=True)
class Item:
    """One piece of a request's conversation, the same shape whatever the wire format.

    ``role``: system (also Codex's developer messages), user, assistant, tool. ``kind``: text,
    call (``name``, ``text`` = its arguments as JSON) or result (``text`` = the tool's output).
    ``call_id`` ties a call to its result.
    """

    role: str
    kind: str
    text: str
    name: str = ""
    call_id: str = ""


@dataclass(frozen=True, slots=True)
class Request:
    """One HTTP request the server received.

    ``kind``: ``turn`` (it took scripted turn number ``turn``; None when the script had run
    out), a side request (``title``, ``compaction``, ``side``, ``json``: answered, no turn taken) or
    ``other`` (preflight, model list, token count, unknown path). ``body`` is the parsed JSON.
    ``sent`` lists the tool calls the answer carried.
    """

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any
    wire: str | None
    kind: str
    turn: int | None = None
    sent: tuple[ToolUse, ...] = ()
    at: float = field(default_factory=time.monotonic)

    def items(self) -> list[Item]:
        """The conversation the request carries (system prompt, history, new message)."""
        if self.wire is None or not isinstance(self.body, dict):
            return []
        return WIRES[self.wire].items(self.body)

    def texts(self, role: str | None = None) -> list[str]:
        """The text items' texts, of one role or all."""
        return [i.text for i in self.items() if i.kind == "text" and role in (None, i.role)]

    def results(self) -> dict[str, str]:
        """The tool results the request carries: call id -> output."""
        return {i.call_id: i.text for i in self.items() if i.kind == "result"}

    def said(self) -> list[str]:
        """What the user said: the user's texts without the blocks a CLI puts before them
        (Copilot's ``<current_datetime>``, Gemini's ``<session_context>``, Codex's
        ``<environment_context>``), leaving out texts that were nothing else (see `spoken`)."""
        return [text for text in map(spoken, self.texts("user")) if text]


LEADING_TAG = re.compile(r"\A\s*<([A-Za-z][\w.:-]*)(?:\s[^>]*)?>.*?</\1>", re.DOTALL)


def spoken(text: str) -> str:
    """``text`` without its leading ``<tag>…</tag>`` blocks (context a CLI adds to the user's words)."""
    while match := LEADING_TAG.match(text):
        text = text[match.end():]
    return text.strip()


# ---------------------------------------------------------------------------------------------
# The wire formats: how each one is classified, read and answered


@dataclass(frozen=True, slots=True)
class Reply:
    """A turn made concrete for one request: tool calls named and numbered, the model echoed."""

    text: str
    uses: tuple[ToolUse, ...]
    usage: Usage
    model: str


SIDE_USAGE = Usage(input=10, output=2)
SIDE_TEXTS = {"title": "Scripted session title", "compaction": "Scripted summary of the conversation.",
              "side": "Side reply", "json": "{}"}


def sse(data: Mapping[str, Any], event: str | None = None) -> bytes:
    """One server-sent event; Anthropic and Responses name theirs, chat completions do not."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


def joined(content: Any) -> str:
    """A message content, string or list of text-like parts, as one string."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(joined(p.get("text", p.get("content", ""))) if isinstance(p, dict) else str(p)
                       for p in content)
    return "" if content is None else json.dumps(content)


def offered_tools(body: Mapping[str, Any]) -> set[str]:
    """The names of the tools an OpenAI chat request offers the model."""
    return {t["function"]["name"] for t in body.get("tools") or [] if isinstance(t, dict) and "function" in t}


def openai_error(status: int, message: str) -> dict[str, Any]:
    """OpenAI's error body; its ``type`` is what opencode reads to decide whether to retry."""
    return {"error": {"message": message, "type": "server_error" if status >= 500 else "invalid_request_error"}}


class Wire(Protocol):
    name: str

    def classify(self, body: Mapping[str, Any]) -> str: ...
    def items(self, body: Mapping[str, Any]) -> list[Item]: ...
    def tool_use(self, call: Call, body: Mapping[str, Any]) -> ToolUse: ...
    def stream(self, reply: Reply) -> Iterator[bytes]: ...
    def whole(self, reply: Reply) -> dict[str, Any]: ...
    def error(self, status: int, message: str) -> dict[str, Any]: ...


class Anthropic:
    """Anthropic Messages, as Claude Code sends them.

    Claude Code's agent loop always sends its tools; a request without tools is a side request
    (titles, summaries). Its context size is the last call's input + cache read + cache
    creation, so message_start carries those, and message_delta the output count.
    """

    name = "anthropic"

    def classify(self, body: Mapping[str, Any]) -> str:
        return "turn" if body.get("tools") else "side"

    def items(self, body: Mapping[str, Any]) -> list[Item]:
        out = [Item("system", "text", joined(body["system"]))] if body.get("system") else []
        for message in body.get("messages", []):
            role, content = message["role"], message["content"]
            for block in [{"type": "text", "text": content}] if isinstance(content, str) else content:
                if block["type"] == "text":
                    out.append(Item(role, "text", block["text"]))
                elif block["type"] == "tool_use":
                    out.append(Item(role, "call", json.dumps(block["input"]), block["name"], block["id"]))
                elif block["type"] == "tool_result":
                    out.append(Item("tool", "result", joined(block.get("content")), call_id=block["tool_use_id"]))
        return out

    def tool_use(self, call: Call, body: Mapping[str, Any]) -> ToolUse:
        a = call.args
        match call.action:
            case "shell":
                return ToolUse(new_id("toolu_"), "Bash", {"command": a["command"]})
            case "read":
                return ToolUse(new_id("toolu_"), "Read", {"file_path": a["path"]})
            case "mcp":
                return ToolUse(new_id("toolu_"), f"mcp__{a['server']}__{a['tool']}", a["arguments"])
        return ToolUse(new_id("toolu_"), a["name"], a["input"])

    def usage(self, usage: Usage) -> dict[str, int]:
        return {"input_tokens": usage.input, "cache_creation_input_tokens": usage.cache_write,
                "cache_read_input_tokens": usage.cache_read, "output_tokens": usage.output}

    def blocks(self, reply: Reply) -> list[dict[str, Any]]:
        text = [{"type": "text", "text": reply.text}] if reply.text or not reply.uses else []
        return text + [{"type": "tool_use", "id": u.id, "name": u.name, "input": u.input} for u in reply.uses]

    def stop_reason(self, reply: Reply) -> str:
        return "tool_use" if reply.uses else "end_turn"

    def stream(self, reply: Reply) -> Iterator[bytes]:
        message: dict[str, Any] = {"id": new_id("msg_"), "type": "message", "role": "assistant", "model": reply.model,
                   "content": [], "stop_reason": None, "stop_sequence": None,
                   "usage": dict(self.usage(reply.usage), output_tokens=1)}
        yield sse({"type": "message_start", "message": message}, "message_start")
        for index, block in enumerate(self.blocks(reply)):
            if block["type"] == "text":
                start, delta = dict(block, text=""), {"type": "text_delta", "text": block["text"]}
            else:
                start, delta = dict(block, input={}), {"type": "input_json_delta",
                                                       "partial_json": json.dumps(block["input"])}
            yield sse({"type": "content_block_start", "index": index, "content_block": start},
                      "content_block_start")
            yield sse({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta")
            yield sse({"type": "content_block_stop", "index": index}, "content_block_stop")
        yield sse({"type": "message_delta", "delta": {"stop_reason": self.stop_reason(reply), "stop_sequence": None},
                   "usage": self.usage(reply.usage)}, "message_delta")
        yield sse({"type": "message_stop"}, "message_stop")

    def whole(self, reply: Reply) -> dict[str, Any]:
        return {"id": new_id("msg_"), "type": "message", "role": "assistant", "model": reply.model,
                "content": self.blocks(reply), "stop_reason": self.stop_reason(reply),
                "stop_sequence": None, "usage": self.usage(reply.usage)}

    def error(self, status: int, message: str) -> dict[str, Any]:
        kind = "api_error" if status >= 500 else "invalid_request_error"
        return {"type": "error", "error": {"type": kind, "message": message}}


class Responses:
    """OpenAI Responses, as Codex sends them (``wire_api = "responses"``, always streamed).

    Codex acts on each ``response.output_item.done`` and needs ``response.completed`` to end
    the turn; its local auto-compaction is an ordinary request whose last user message starts
    with `COMPACTION`. A shell call asks Codex to wait for the command as long as it may
    (`YIELD_MS`, its maximum): by default it answers after 10 s of wall time with "Process
    running" and asks the model again, so a command's result would depend on the machine's
    speed (and on how long a test keeps it suspended).
    """

    name = "responses"
    COMPACTION = "You are performing a CONTEXT CHECKPOINT COMPACTION"
    YIELD_MS = 30_000

    def classify(self, body: Mapping[str, Any]) -> str:
        user = [i for i in body.get("input", []) if i.get("type") == "message" and i.get("role") == "user"]
        return "compaction" if user and joined(user[-1].get("content")).startswith(self.COMPACTION) else "turn"

    def items(self, body: Mapping[str, Any]) -> list[Item]:
        out = [Item("system", "text", body["instructions"])] if body.get("instructions") else []
        for item in body.get("input", []):
            if item.get("type") == "message":
                role = "system" if item["role"] == "developer" else item["role"]
                out.append(Item(role, "text", joined(item["content"])))
            elif item.get("type") == "function_call":
                out.append(Item("assistant", "call", item["arguments"], item["name"], item["call_id"]))
            elif item.get("type") == "function_call_output":
                out.append(Item("tool", "result", joined(item["output"]), call_id=item["call_id"]))
        return out

    def tool_use(self, call: Call, body: Mapping[str, Any]) -> ToolUse:
        a = call.args
        match call.action:
            case "shell":
                return ToolUse(new_id("call_"), "exec_command", {"cmd": a["command"], "yield_time_ms": self.YIELD_MS})
            case "read":
                return ToolUse(new_id("call_"), "exec_command", {"cmd": f"cat {shlex.quote(a['path'])}",
                                                                 "yield_time_ms": self.YIELD_MS})
            case "mcp":
                return ToolUse(new_id("call_"), a["tool"], a["arguments"], f"mcp__{a['server']}")
        return ToolUse(new_id("call_"), a["name"], a["input"], a["namespace"])

    def usage(self, usage: Usage) -> dict[str, Any]:
        return {"input_tokens": usage.prompt,
                "input_tokens_details": {"cached_tokens": usage.cache_read, "cache_write_tokens": usage.cache_write},
                "output_tokens": usage.output, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": usage.prompt + usage.output}

    def output(self, reply: Reply) -> list[dict[str, Any]]:
        text = [{"type": "message", "id": new_id("msg_"), "role": "assistant", "status": "completed",
                 "content": [{"type": "output_text", "text": reply.text, "annotations": []}]}
                ] if reply.text or not reply.uses else []
        return text + [{"type": "function_call", "id": new_id("fc_"), "call_id": u.id, "name": u.name,
                        "arguments": json.dumps(u.input), "status": "completed",
                        **({"namespace": u.namespace} if u.namespace else {})} for u in reply.uses]

    def stream(self, reply: Reply) -> Iterator[bytes]:
        seq = itertools.count()
        response = {"id": new_id("resp_"), "object": "response", "created_at": int(time.time()),
                    "model": reply.model, "status": "in_progress", "output": []}
        yield sse({"type": "response.created", "sequence_number": next(seq), "response": response},
                  "response.created")
        output = self.output(reply)
        for index, item in enumerate(output):
            yield sse({"type": "response.output_item.added", "sequence_number": next(seq), "output_index": index,
                       "item": item}, "response.output_item.added")
            if item["type"] == "message":
                yield sse({"type": "response.output_text.delta", "sequence_number": next(seq),
                           "output_index": index, "item_id": item["id"], "content_index": 0,
                           "delta": reply.text}, "response.output_text.delta")
            yield sse({"type": "response.output_item.done", "sequence_number": next(seq), "output_index": index,
                       "item": item}, "response.output_item.done")
        done = dict(response, status="completed", output=output, usage=self.usage(reply.usage))
        yield sse({"type": "response.completed", "sequence_number": next(seq), "response": done},
                  "response.completed")

    def whole(self, reply: Reply) -> dict[str, Any]:
        return {"id": new_id("resp_"), "object": "response", "created_at": int(time.time()), "model": reply.model,
                "status": "completed", "output": self.output(reply), "usage": self.usage(reply.usage)}

    def error(self, status: int, message: str) -> dict[str, Any]:
        return openai_error(status, message)


class ChatCompletions:
    """OpenAI Chat Completions, as opencode's openai-compatible provider, Qwen Code and Copilot
    CLI send them.

    opencode's title and compaction requests are told apart by their system prompts. The three
    name their tools differently, so a call is named after the tools the request offers: Qwen
    Code (a Gemini CLI fork) offers ``run_shell_command`` and ``read_file``, Copilot ``bash``
    and ``view``, opencode ``bash`` and ``read`` (also the names when a request offers none of them).
    """

    name = "chat"
    MARKERS = {"title": "You are a title generator", "compaction": "You are a context summarization agent"}

    def classify(self, body: Mapping[str, Any]) -> str:
        system = " ".join(joined(m.get("content")) for m in body.get("messages", []) if m.get("role") == "system")
        return next((kind for kind, marker in self.MARKERS.items() if marker in system), "turn")

    def items(self, body: Mapping[str, Any]) -> list[Item]:
        out = []
        for message in body.get("messages", []):
            role = message["role"]
            if role == "tool":
                out.append(Item("tool", "result", joined(message.get("content")), call_id=message["tool_call_id"]))
                continue
            if joined(message.get("content")):
                out.append(Item(role, "text", joined(message["content"])))
            for call in message.get("tool_calls") or []:
                out.append(Item(role, "call", call["function"]["arguments"], call["function"]["name"], call["id"]))
        return out

    def tool_use(self, call: Call, body: Mapping[str, Any]) -> ToolUse:
        a = call.args
        offered = offered_tools(body)
        match call.action:
            case "shell":
                name = "run_shell_command" if "run_shell_command" in offered else "bash"
                return ToolUse(new_id("call_"), name, {"command": a["command"], "description": "scripted command"})
            case "read":
                if "read_file" in offered:
                    return ToolUse(new_id("call_"), "read_file", {"file_path": a["path"]})
                if "view" in offered and "read" not in offered:
                    return ToolUse(new_id("call_"), "view", {"path": a["path"]})
                return ToolUse(new_id("call_"), "read", {"filePath": a["path"]})
            case "mcp":
                return ToolUse(new_id("call_"), f"{a['server']}_{a['tool']}", a["arguments"])
        return ToolUse(new_id("call_"), a["name"], a["input"])

    def usage(self, usage: Usage) -> dict[str, Any]:
        return {"prompt_tokens": usage.prompt, "completion_tokens": usage.output,
                "total_tokens": usage.prompt + usage.output,
                "prompt_tokens_details": {"cached_tokens": usage.cache_read, "cache_write_tokens": usage.cache_write}}

    def chunk(self, reply: Reply, delta: Mapping[str, Any] | None, finish: str | None = None,
              usage: bool = False) -> bytes:
        body: dict[str, Any] = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk",
                                "created": int(time.time()), "model": reply.model,
                                "choices": [] if delta is None else [{"index": 0, "delta": delta,
                                                                      "finish_reason": finish}]}
        if usage:
            body["usage"] = self.usage(reply.usage)
        return sse(body)

    def calls(self, reply: Reply) -> list[dict[str, Any]]:
        return [{"id": u.id, "type": "function", "function": {"name": u.name, "arguments": json.dumps(u.input)}}
                for u in reply.uses]

    def finish(self, reply: Reply) -> str:
        return "tool_calls" if reply.uses else "stop"

    def stream(self, reply: Reply) -> Iterator[bytes]:
        yield self.chunk(reply, {"role": "assistant", "content": ""})
        if reply.text:
            yield self.chunk(reply, {"content": reply.text})
        for index, call in enumerate(self.calls(reply)):
            yield self.chunk(reply, {"tool_calls": [dict(call, index=index)]})
        yield self.chunk(reply, {}, self.finish(reply))
        yield self.chunk(reply, None, usage=True)
        yield b"data: [DONE]\n\n"

    def error(self, status: int, message: str) -> dict[str, Any]:
        return openai_error(status, message)

    def whole(self, reply: Reply) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.uses:
            message["tool_calls"] = self.calls(reply)
        choice = {"index": 0, "message": message, "finish_reason": self.finish(reply)}
        return {"id": "chatcmpl-scripted", "object": "chat.completion", "created": int(time.time()),
                "model": reply.model, "choices": [choice], "usage": self.usage(reply.usage)}


class Gemini:
    """Gemini's ``generateContent``, as Gemini CLI sends it to ``GOOGLE_GEMINI_BASE_URL``:
    ``POST /v1beta/models/{model}:streamGenerateContent?alt=sse`` for its agent loop (streamed
    chunks of ``candidates[0].content.parts``, the last with ``finishReason`` and
    ``usageMetadata``), ``:generateContent`` for a whole reply, ``:countTokens`` (answered apart).

    Its agent loop always sends its tools (``tools[].functionDeclarations[]``); a request without
    them is a side request (summaries), of kind ``json`` when it asks for JSON (its checks, which
    read the ``{}`` it gets as "nothing to do").
    Gemini counts cached tokens inside the prompt, as OpenAI does, and has no cache writes: they
    are in ``promptTokenCount`` and nowhere else.
    """

    name = "gemini"
    ROLES = {"user": "user", "model": "assistant", "function": "tool"}

    def classify(self, body: Mapping[str, Any]) -> str:
        if any(t.get("functionDeclarations") for t in body.get("tools") or []):
            return "turn"
        config = body.get("generationConfig") or {}
        wants_json = config.get("responseMimeType") == "application/json" or "responseJsonSchema" in config
        return "json" if wants_json else "side"

    def items(self, body: Mapping[str, Any]) -> list[Item]:
        system = body.get("systemInstruction")
        parts = system.get("parts", []) if isinstance(system, dict) else [{"text": system}] if system else []
        out = [Item("system", "text", "".join(p.get("text", "") for p in parts))] if parts else []
        for content in body.get("contents", []):
            role = self.ROLES.get(content.get("role", "user"), "user")
            for part in content.get("parts", []):
                if part.get("thought"):
                    continue
                if "text" in part:
                    out.append(Item(role, "text", part["text"]))
                elif "functionCall" in part:
                    call = part["functionCall"]
                    out.append(Item("assistant", "call", json.dumps(call.get("args", {})), call["name"],
                                    call.get("id", "")))
                elif "functionResponse" in part:
                    response = part["functionResponse"]
                    result = response.get("response", {})
                    output = result.get("output") if isinstance(result, dict) else None
                    out.append(Item("tool", "result", output if isinstance(output, str) else json.dumps(result),
                                    response.get("name", ""), response.get("id", "")))
        return out

    def tool_use(self, call: Call, body: Mapping[str, Any]) -> ToolUse:
        a = call.args
        match call.action:
            case "shell":
                return ToolUse(new_id("call_"), "run_shell_command",
                               {"command": a["command"], "description": "scripted command"})
            case "read":
                return ToolUse(new_id("call_"), "read_file", {"file_path": a["path"]})
            case "mcp":
                return ToolUse(new_id("call_"), f"mcp_{a['server']}_{a['tool']}", a["arguments"])
        return ToolUse(new_id("call_"), a["name"], a["input"])

    def usage(self, usage: Usage) -> dict[str, int]:
        return {"promptTokenCount": usage.prompt, "candidatesTokenCount": usage.output,
                "cachedContentTokenCount": usage.cache_read, "totalTokenCount": usage.prompt + usage.output}

    def parts(self, reply: Reply) -> list[dict[str, Any]]:
        text = [{"text": reply.text}] if reply.text or not reply.uses else []
        return text + [{"functionCall": {"id": u.id, "name": u.name, "args": u.input}} for u in reply.uses]

    def chunk(self, reply: Reply, parts: list[dict[str, Any]], last: bool = False) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        body: dict[str, Any] = {"candidates": [candidate], "modelVersion": reply.model, "responseId": "scripted"}
        if last:
            candidate["finishReason"] = "STOP"
            body["usageMetadata"] = self.usage(reply.usage)
        return body

    def stream(self, reply: Reply) -> Iterator[bytes]:
        """An empty text part first (what a held reply stops after), then a chunk per part."""
        yield sse(self.chunk(reply, [{"text": ""}]))
        parts = self.parts(reply)
        for index, part in enumerate(parts):
            yield sse(self.chunk(reply, [part], last=index == len(parts) - 1))

    def whole(self, reply: Reply) -> dict[str, Any]:
        return self.chunk(reply, self.parts(reply), last=True)

    def error(self, status: int, message: str) -> dict[str, Any]:
        kind = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}.get(status, "INTERNAL")
        return {"error": {"code": status, "message": message, "status": kind}}


WIRES: dict[str, Wire] = {w.name: w for w in (Anthropic(), Responses(), ChatCompletions(), Gemini())}
ROUTES = {"/v1/messages": "anthropic", "/v1/responses": "responses", "/v1/chat/completions": "chat"}
#: Gemini's routes: ``/{version}/models/{model}:{method}``.
GEMINI_ROUTE = re.compile(r"/v1(?:beta|alpha)?/models/(?P<model>[^/:]+):(?P<method>\w+)")


# ---------------------------------------------------------------------------------------------
# The server


class ModelServer:
    """The scripted model on 127.0.0.1, in a thread of the test process.

    `url` is the bare origin (Claude's ``ANTHROPIC_BASE_URL``, Gemini's
    ``GOOGLE_GEMINI_BASE_URL``); `url_v1` adds ``/v1`` (the OpenAI base URL Codex, opencode,
    Qwen Code and Copilot want). A turn request that finds the script empty is
    answered ``(script exhausted)`` and listed in `unserved`: the ``model_server`` fixture
    fails a test that leaves any, as a script too short is a test bug, not a CLI's.
    """

    EXHAUSTED = "(script exhausted)"

    def __init__(self, script: Script | None = None) -> None:
        self.script = script or Script()
        self._requests: list[Request] = []
        self._changed = threading.Condition()
        self._stopping = threading.Event()
        self._httpd: _HTTPServer | None = None

    def start(self) -> ModelServer:
        self._httpd = _HTTPServer(self)
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="model-server", daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop serving; held replies end (their stream is cut), nothing waits on a client."""
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "the server is not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def url_v1(self) -> str:
        return self.url + "/v1"

    @property
    def requests(self) -> list[Request]:
        """Every request so far, in arrival order (a copy)."""
        with self._changed:
            return list(self._requests)

    def turn_requests(self) -> list[Request]:
        """The requests that took (or wanted) a scripted turn, in order."""
        return [r for r in self.requests if r.kind == "turn"]

    @property
    def unserved(self) -> list[Request]:
        return [r for r in self.turn_requests() if r.turn is None]

    def wait_requests(self, count: int, kind: str = "turn", timeout: float = HANG_S) -> list[Request]:
        """Wait until ``count`` requests of ``kind`` have arrived; return them all."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(found := [r for r in self._requests if r.kind == kind]) < count:
                if (left := deadline - time.monotonic()) <= 0:
                    raise AssertionError(f"{len(found)} {kind} requests within {timeout}s, wanted {count}")
                self._changed.wait(left)
            return found

    def _record(self, request: Request) -> None:
        with self._changed:
            self._requests.append(request)
            self._changed.notify_all()

    def _serve(self, wire: Wire, body: Mapping[str, Any], path: str, headers: Mapping[str, str]
               ) -> tuple[Turn, Reply]:
        """Classify a model request, take its turn if it is one, record it, and make the reply."""
        kind = wire.classify(body)
        taken = self.script._take() if kind == "turn" else None
        turn = taken[1] if taken else Turn(text=self.EXHAUSTED if kind == "turn" else SIDE_TEXTS[kind],
                                           usage=SIDE_USAGE)
        uses = tuple(wire.tool_use(c, body) for c in turn.calls)
        self._record(Request("POST", path, headers, body, wire.name, kind, taken[0] if taken else None, uses))
        gemini = GEMINI_ROUTE.match(path.split("?")[0])
        model = body.get("model") or (gemini.group("model") if gemini else "scripted-model")
        return turn, Reply(turn.text, uses, turn.usage, str(model))


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, model: ModelServer) -> None:
        self.model = model
        super().__init__(("127.0.0.1", 0), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A CLI interrupted mid-stream drops its connection: that is no server error."""
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_HEAD(self) -> None:
        """Claude Code's preflight."""
        self._record(None, None, "other")
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self._record(None, None, "other")
        if self.path.split("?")[0].rstrip("/").endswith("/models"):
            # One body for both clients: OpenAI's list, and Codex's catalogue ("models": none
            # extra, so it keeps its built-in metadata).
            return self._json(200, {"object": "list", "models": [], "data": [
                {"id": "scripted-model", "object": "model", "created": 0, "owned_by": "tests"}]})
        self._json(404, {"error": {"message": f"no such path: {self.path}"}})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        path = self.path.split("?")[0]
        if path.endswith("/v1/messages/count_tokens"):
            self._record(body, "anthropic", "other")
            return self._json(200, {"input_tokens": SIDE_USAGE.input})
        wire_name, streamed = ROUTES.get(path), isinstance(body, dict) and bool(body.get("stream"))
        if gemini := GEMINI_ROUTE.fullmatch(path):
            wire_name, streamed = "gemini", gemini.group("method") == "streamGenerateContent"
            if gemini.group("method") == "countTokens":
                self._record(body, wire_name, "other")
                return self._json(200, {"totalTokens": SIDE_USAGE.input})
            if gemini.group("method") not in ("streamGenerateContent", "generateContent"):
                wire_name = None
        if wire_name is None or not isinstance(body, dict):
            self._record(body, wire_name, "other")
            return self._json(404, {"error": {"message": f"no model endpoint at {self.path}"}})
        wire = WIRES[wire_name]
        turn, reply = self.server.model._serve(wire, body, self.path, self._headers())
        if turn.status != 200:
            return self._json(turn.status, wire.error(turn.status, turn.text))
        if not streamed:
            return self._json(200, wire.whole(reply))
        self._stream(wire.stream(reply), turn.hold)

    def _headers(self) -> dict[str, str]:
        return {k.lower(): v for k, v in self.headers.items()}

    def _record(self, body: Any, wire: str | None, kind: str) -> None:
        self.server.model._record(Request(self.command, self.path, self._headers(), body, wire, kind))

    def _json(self, status: int, body: Mapping[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, events: Iterator[bytes], hold: Hold | None) -> None:
        """Send the events chunked, each flushed at once; stall after the first if held."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for index, event in enumerate(events):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
            if index == 0 and hold is not None:
                hold._hold(self.server.model._stopping)
                if self.server.model._stopping.is_set():
                    self.close_connection = True
                    return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
