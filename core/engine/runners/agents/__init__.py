"""Agent CLIs as runners: Claude Code (``claude``), Codex (``codex``), opencode (``opencode``)
through runners written for each, and any agent that speaks ACP (``acp``) through one.

Each module says how its CLI is started for a turn (``invocation``) and how its event
stream reads (a ``Reader``); ``base`` holds what they share. What is known of each CLI
(its state, its model's address, its ACP command) is its descriptor's (``model.agents``).
``interactive`` is the CLI's own interactive face, resumed on a session (``attach``)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal, Protocol

from ....model import agents, runner_spec
from ....model.errors import InvalidArgument
from ....model.outcomes import Attached
from ....model.runner_spec import RunnerSpec
from . import acp, claude, codex, codex_app, opencode, opencode_serve
from .base import Conversation, Invocation, McpServer, Reader, Turn

__all__ = ["Conversation", "Invocation", "McpServer", "Reader", "Runner", "Turn", "asks", "endpoints", "interactive",
           "locate", "prepare", "runner", "state"]

#: How a CLI's run asks a person: through the engine's MCP server (``engine.asking``, always
#: given), over its own stdin (``Turn.decide``, given when its session's permissions are ask), or
#: not at all.
Asks = Literal["mcp", "talk", ""]


class Runner(Protocol):
    """What the engine needs of the runner of an agent, whatever drives it. A turn is started
    by ``prepare``: the command line (run through the launcher, in the run's bounds) and the
    ``Reader`` of what it prints, which turns it into the run's events (text, tool calls,
    usage, the agent's own session: where its transcript lives, which the next turn resumes or
    forks) and, through its ``Conversation``, asks a person (``asks``) and interrupts the turn.
    ``state`` and ``endpoints`` say what the run's bounds must hold."""

    @property
    def asks(self) -> Asks: ...

    def prepare(self, turn: Turn, exe: str) -> tuple[Invocation, Reader]: ...

    def state(self, env: dict[str, str]) -> tuple[list[str], list[str]]: ...

    def endpoints(self, env: dict[str, str]) -> list[str]: ...


@dataclass(slots=True, frozen=True)
class Headless:
    """An agent CLI's own runner (``KIND:``): how to start it, how its events read, where it
    keeps its state (folders it writes, files it reads) and where its model is."""

    invocation: Callable[[str, Turn], Invocation]
    reader: Callable[[Turn], Reader]
    state: Callable[[dict[str, str]], tuple[list[str], list[str]]]
    endpoints: Callable[[dict[str, str]], list[str]]
    asks: Asks = ""

    def prepare(self, turn: Turn, exe: str) -> tuple[Invocation, Reader]:
        return self.invocation(exe, turn), self.reader(turn)


@dataclass(slots=True, frozen=True)
class Acp:
    """Any agent over the Agent Client Protocol (``acp:NAME``, ``acp:command:PROG ARGS``): its
    CLI's descriptor (``model.agents``) says where its state and its model are."""

    cli: str
    command: str = ""
    asks: Asks = "talk"

    def prepare(self, turn: Turn, exe: str) -> tuple[Invocation, Reader]:
        argv = agents.acp_program(self.cli, self.command, turn.env)
        return acp.invocation(turn, [exe, *argv[1:]], self.cli), acp.AcpReader(turn, self.cli)

    def state(self, env: dict[str, str]) -> tuple[list[str], list[str]]:
        if self.cli in _KINDS:  # the same state as its own runner's
            return _KINDS[self.cli].state(env)
        homes = agents.CLIS[self.cli].homes if self.cli in agents.CLIS else {}
        return [env[name] for name in homes if env.get(name)], []

    def endpoints(self, env: dict[str, str]) -> list[str]:
        if self.cli in _KINDS:
            return _KINDS[self.cli].endpoints(env)
        if self.cli not in agents.CLIS:  # a program named by its command: its bound MCP servers' only
            return []
        names, default = agents.CLIS[self.cli].endpoint
        return [env[name] for name in names if env.get(name)] or [default]


def _codex_reader(turn: Turn) -> Reader:
    return codex_app.CodexAppReader(turn) if turn.decide is not None else codex.CodexReader(turn)


def _opencode_reader(turn: Turn) -> Reader:
    return opencode_serve.OpencodeServeReader(turn) if turn.decide is not None else opencode.OpencodeReader(turn)


_KINDS: Final[dict[str, Headless]] = {
    "claude": Headless(claude.invocation, claude.ClaudeReader, claude.state, claude.endpoints, asks="mcp"),
    "codex": Headless(codex.invocation, _codex_reader, codex.state, codex.endpoints, asks="talk"),
    "opencode": Headless(opencode.invocation, _opencode_reader, opencode.state, opencode.endpoints, asks="talk"),
}


def runner(spec: RunnerSpec) -> Runner:
    """The runner of an agent's ``spec`` (refused in one line for one this version has not)."""
    if spec.kind == runner_spec.ACP:
        return Acp(spec.cli, spec.acp_command)
    if spec.kind not in _KINDS:
        raise InvalidArgument(f"the {spec.kind} runner is not available in this version")
    return _KINDS[spec.kind]


def prepare(spec: RunnerSpec, turn: Turn, exe: str) -> tuple[Invocation, Reader]:
    """How to start the agent of ``spec`` (its executable ``exe``, from ``locate``) for
    ``turn``, and the reader of its events."""
    return runner(spec).prepare(turn, exe)


def asks(spec: RunnerSpec) -> Asks:
    """How a run of ``spec`` asks a person (``Asks``; a runner that is no agent's: not at all)."""
    return runner(spec).asks if spec.agent else ""


def locate(spec: RunnerSpec, env: dict[str, str]) -> str:
    """The executable the agent of ``spec`` runs as (refused in one line if it is not installed)."""
    if spec.kind == runner_spec.ACP:
        return agents.acp_program(spec.cli, spec.acp_command, env)[0]
    runner(spec)
    return agents.locate(spec.kind, env)


def state(spec: RunnerSpec, env: dict[str, str]) -> tuple[list[str], list[str]]:
    """The folders the agent of ``spec`` keeps its state in (made here if missing: a confined
    run could not make them), and the files of its configuration it reads."""
    folders, files = runner(spec).state(env)
    for folder in folders:
        os.makedirs(folder, exist_ok=True)
    return folders, files


def endpoints(spec: RunnerSpec, env: dict[str, str]) -> list[str]:
    """Where the agent of ``spec`` finds its model (``--net model`` lets a run reach those ports)."""
    return runner(spec).endpoints(env)


def interactive(attached: Attached) -> int:
    """Run the agent CLI's interactive face resumed on the attached session, in this terminal,
    in the session's folder (Claude Code finds a session only from the folder it ran in) with
    its environment, until the person quits it; its exit status. Blocks: faces call it where
    nothing else needs the terminal (the monitor suspended)."""
    exe = agents.locate(attached.cli, attached.env)
    argv = [exe, *(a.format(id=attached.agent, cwd=attached.cwd) for a in agents.CLIS[attached.cli].attach)]
    cwd = attached.cwd if os.path.isdir(attached.cwd) else None
    return subprocess.run(argv, cwd=cwd, env=attached.env).returncode
