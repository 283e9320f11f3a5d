"""What every agent-CLI runner shares: the turn a run hands the agent, the invocation that
starts the CLI, and the reader that turns the CLI's JSON event stream into ``Events``.

An agent CLI keeps its own session (its transcript, its context); Procession keeps the
reference to it and a copy of what was said. A run gives the agent only what it has not
seen (``Turn.prompt``), resumes its session, and reads its events as they come: text,
tool calls paired with their results, usage, and the agent's own context size.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import shlex
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from ....model import limits
from ..protocol import LINE_MAX, Events
from ..toolbox import Ask
from ....model.toolcalls import summary, tool_message
from ....model.toolcalls import text_of as text_of  # the readers take it from here

#: A session setting: extra arguments for the CLI (shell words), after Procession's own.
EXTRA_ARGS: Final = "PROCESSION_AGENT_ARGS"


@dataclass(slots=True, frozen=True)
class McpServer:
    """An MCP server bound to a session (``bind SID mcp 'stdio:CMD ARGS'`` or an http(s) URL)."""

    name: str
    command: tuple[str, ...] = ()  # stdio: the command line
    url: str = ""  # http: the endpoint

    @classmethod
    def parse(cls, uri: str) -> McpServer:
        """A bound URI as a server, named for what it runs (its script, or its host): the
        agent sees its tools as ``<name>`` tools."""
        if uri.startswith("stdio:"):
            command = tuple(shlex.split(uri[len("stdio:"):]))
            scripts = [w for w in command[1:] if w.endswith(_SCRIPTS) or (not w.startswith("-") and "/" in w)]
            stem = Path(scripts[0] if scripts else command[0] if command else "mcp").stem
            return cls(_name(stem), command)
        return cls(_name(urlsplit(uri).hostname or "mcp"), url=uri)


_SCRIPTS = (".py", ".js", ".mjs", ".ts", ".sh")


def _name(text: str) -> str:
    return re.sub(r"[^a-z0-9_]", "_", text.lower()).strip("_")[:40] or "mcp"


@dataclass(slots=True)
class Turn:
    """One run of an agent session, as the engine read it before starting the CLI."""

    sid: int
    prompt: str  # what the agent has not seen, as one user turn
    upto: int  # the last message seq the prompt stands for
    system: str
    model: str
    cwd: str
    ref: dict[str, Any] | None  # the agent's own session, if it has one (a fork's: its parent's, to fork)
    mcp: list[McpServer] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # the run's environment (``environ.session_environment``)
    tmp: str | None = None  # the run's own temporary folder: the files made for the CLI go there
    confined: bool = False  # the kernel holds the run to its bounds (the CLI's own sandbox cannot nest in it)
    permissions: str = "bound"  # what its agent may do unasked (``model.bounds``)
    net: str = "any"  # where the run may connect
    ask: list[str] | None = None  # the command of the MCP server its CLI asks a person through, if it can
    decide: Ask | None = None  # how a CLI driven over its stdin asks a person (``Conversation``), if it must
    secret: str = field(default_factory=lambda: secrets.token_urlsafe(24))  # a server of the CLI's wants it
    #: the paths it may write, and those it may only read (its folder, its bindings): what an agent
    #: asks Procession itself to read or write is held to them (``acp``)
    served: tuple[list[str], list[str]] = field(default_factory=lambda: ([], []))
    #: the whole conversation so far, as a prompt: for an agent that cannot take its session up
    #: again (an ACP agent whose ``session/load`` fails), which is then given a new one ("" for others)
    whole: str = ""

    @property
    def extra_args(self) -> list[str]:
        return shlex.split(self.env.get(EXTRA_ARGS, ""))


@dataclass(slots=True)
class Invocation:
    """How to start the CLI for a turn: its argv, variables to add, files to remove after."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)


class Conversation:
    """What a reader writes back to a CLI it drives (over its stdin, as ``codex app-server``;
    or over a server's HTTP API, as ``opencode serve``), and the work it started meanwhile (a
    person asked, the API followed): when the reader hangs up, the CLI's stdin closes, that work
    is cancelled, and a CLI that does not end with its stdin is ended (``terminate``)."""

    def __init__(self) -> None:
        self.outbox: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.tasks: set[asyncio.Task[None]] = set()
        self.terminate = False  # the CLI is a server that outlives its stdin: SIGTERM when over
        self.linger = 0.0  # seconds it is given to end by itself once its stdin is closed, before that
        self.failed = False  # the reader gave up on the turn (what it said is the run's error): the run failed
        #: how its turn is interrupted by what it is told (True: asked; it ends the turn itself)
        self.interrupt: Callable[[], bool] | None = None

    def write(self, message: dict[str, Any]) -> None:
        self.outbox.put_nowait(json.dumps(message).encode("utf-8") + b"\n")

    def start(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def hang_up(self) -> None:
        self.outbox.put_nowait(None)
        for task in list(self.tasks):
            if task is not asyncio.current_task():  # the work that hangs up ends by itself
                task.cancel()

    async def lines(self) -> AsyncIterator[bytes]:
        """What to write to the CLI's stdin, as it comes, until the reader hangs up."""
        while (line := await self.outbox.get()) is not None:
            yield line


class Reader:
    """A CLI's stdout, one JSON event per line, turned into ``Events`` as it arrives.

    Subclasses say what each event means (``event``). Lines that are not JSON objects are
    left to the run's log (CLIs print warnings there); a line over ``LINE_MAX`` is dropped and
    said. Tool calls are held until their result comes (``started`` / ``finished``); one
    still open when the output ends is stored without a result.
    """

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.partial = bytearray()
        self.pending = Events()
        self.open_tools: dict[str, tuple[str, Any, dict[str, Any]]] = {}
        self.line = 0
        self.talk: Conversation | None = None  # set by a reader that drives its CLI over its stdin

    # -------------------------------------------------------------- the stream

    def feed(self, chunk: bytes) -> None:
        self.partial += chunk
        while (end := self.partial.find(b"\n")) >= 0:
            line = bytes(self.partial[:end])
            del self.partial[: end + 1]
            self._line(line)
        if len(self.partial) > LINE_MAX:
            self.line += 1
            self.pending.problems.append(f"line {self.line} of the agent's output is over {LINE_MAX >> 20} MiB; ignored")
            self.partial.clear()

    def _line(self, raw: bytes) -> None:
        self.line += 1
        text = raw.decode("utf-8", "replace").strip()
        if not text.startswith("{"):
            return
        try:
            event = limits.json_loads(text, f"line {self.line}", margin=8)
        except (limits.NotJson, ValueError):
            return
        if isinstance(event, dict):
            self.event(event)

    def take(self) -> Events:
        events, self.pending = self.pending, Events()
        return events

    def close(self) -> Events:
        if self.partial:
            self._line(bytes(self.partial))
            self.partial.clear()
        for call_id in list(self.open_tools):
            self.finished(call_id, None, True)
        if self.talk is not None:
            self.talk.hang_up()
        self.closing()
        return self.take()

    # -------------------------------------------------------------- for subclasses

    def event(self, event: dict[str, Any]) -> None:
        raise NotImplementedError

    def closing(self) -> None:
        """The output ended: settle what only the end tells (usage of an interrupted run)."""

    def announce(self, agent_id: str, **ref: Any) -> None:
        self.pending.agent_ref = {"cli": self.cli, "id": agent_id, "cwd": self.turn.cwd, **ref}

    def said(self, text: str, **meta: Any) -> None:
        if text.strip():
            self.pending.messages.append(("assistant", text, meta or None))
            self.pending.status = f"said: {summary(text)}"

    def started(self, call_id: str, name: str, input: Any, **meta: Any) -> None:
        self.open_tools[call_id] = (name, input, meta)
        self.pending.status = f"{name}: {summary(input)}"

    def finished(self, call_id: str, output: str | None, is_error: bool, **meta: Any) -> None:
        name, input, first = self.open_tools.pop(call_id, ("tool", None, {}))
        self.pending.messages.append(tool_message(call_id, name, input, output, is_error, **{**first, **meta}))

    def context(self, tokens: int, window: int | None = None) -> None:
        self.pending.context = (tokens, window)

    cli: str = ""
    reports_cost = False  # whether the CLI says what its runs cost (else the price table does: ``model.prices``)
