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
from typing import Final, Literal

from ....model import agents, runner_spec
from ....model.errors import InvalidArgument
from ....model.outcomes import Attached
from ....model.runner_spec import RunnerSpec
from . import acp, claude, codex, codex_app, opencode, opencode_serve
from .base import Conversation, Invocation, McpServer, Reader, Turn

__all__ = ["Conversation", "Invocation", "McpServer", "Reader", "Turn", "asks", "endpoints", "interactive", "locate", "prepare",
           "state"]

#: How a CLI's run asks a person: through the engine's MCP server (``engine.asking``, always
#: given), over its own stdin (``Turn.decide``, given when its session's permissions are ask), or
#: not at all.
Asks = Literal["mcp", "talk", ""]


@dataclass(slots=True, frozen=True)
class _Cli:
    """What the engine knows of one agent CLI's own runner: how to start it, how its events
    read, where it keeps its state (folders it writes, files it reads) and where its model is."""

    invocation: Callable[[str, Turn], Invocation]
    reader: Callable[[Turn], Reader]
    state: Callable[[dict[str, str]], tuple[list[str], list[str]]]
    endpoints: Callable[[dict[str, str]], list[str]]
    asks: Asks = ""


def _codex_reader(turn: Turn) -> Reader:
    return codex_app.CodexAppReader(turn) if turn.decide is not None else codex.CodexReader(turn)


def _opencode_reader(turn: Turn) -> Reader:
    return opencode_serve.OpencodeServeReader(turn) if turn.decide is not None else opencode.OpencodeReader(turn)


_KINDS: Final[dict[str, _Cli]] = {
    "claude": _Cli(claude.invocation, claude.ClaudeReader, claude.state, claude.endpoints, asks="mcp"),
    "codex": _Cli(codex.invocation, _codex_reader, codex.state, codex.endpoints, asks="talk"),
    "opencode": _Cli(opencode.invocation, _opencode_reader, opencode.state, opencode.endpoints, asks="talk"),
}


def _cli(kind: str) -> _Cli:
    if kind not in _KINDS:
        raise InvalidArgument(f"the {kind} runner is not available in this version")
    return _KINDS[kind]


def prepare(spec: RunnerSpec, turn: Turn, exe: str) -> tuple[Invocation, Reader]:
    """How to start the agent of ``spec`` (its executable ``exe``, from ``locate``) for
    ``turn``, and the reader of its events."""
    if spec.kind == runner_spec.ACP:
        argv = agents.acp_program(spec.cli, spec.acp_command, turn.env)
        return acp.invocation(turn, [exe, *argv[1:]], spec.cli), acp.AcpReader(turn, spec.cli)
    cli = _cli(spec.kind)
    return cli.invocation(exe, turn), cli.reader(turn)


def asks(spec: RunnerSpec) -> Asks:
    """How a run of ``spec`` asks a person (``Asks``): an ACP agent over its stdin."""
    if spec.kind == runner_spec.ACP:
        return "talk"
    return _KINDS[spec.kind].asks if spec.kind in _KINDS else ""


def locate(spec: RunnerSpec, env: dict[str, str]) -> str:
    """The executable the agent of ``spec`` runs as (refused in one line if it is not installed)."""
    if spec.kind == runner_spec.ACP:
        return agents.acp_program(spec.cli, spec.acp_command, env)[0]
    _cli(spec.kind)
    return agents.locate(spec.kind, env)


def state(cli: str, env: dict[str, str]) -> tuple[list[str], list[str]]:
    """The folders agent CLI ``cli`` keeps its state in (made here if missing: a confined run
    could not make them), and the files of its configuration it reads: its runner's, else its
    descriptor's (the folders its variables name)."""
    if cli in _KINDS:
        folders, files = _KINDS[cli].state(env)
    else:
        homes = agents.CLIS[cli].homes if cli in agents.CLIS else {}
        folders, files = [env[name] for name in homes if env.get(name)], []
    for folder in folders:
        os.makedirs(folder, exist_ok=True)
    return folders, files


def endpoints(cli: str, env: dict[str, str]) -> list[str]:
    """Where agent CLI ``cli`` finds its model (``--net model`` lets a run reach those ports):
    its runner's, else its descriptor's variables or default (an ACP program named by its
    command: none known, its bound MCP servers' only)."""
    if cli in _KINDS:
        return _KINDS[cli].endpoints(env)
    if cli not in agents.CLIS:
        return []
    names, default = agents.CLIS[cli].endpoint
    return [env[name] for name in names if env.get(name)] or [default]


def interactive(attached: Attached) -> int:
    """Run the agent CLI's interactive face resumed on the attached session, in this terminal,
    in the session's folder (Claude Code finds a session only from the folder it ran in) with
    its environment, until the person quits it; its exit status. Blocks: faces call it where
    nothing else needs the terminal (the monitor suspended)."""
    exe = agents.locate(attached.cli, attached.env)
    argv = {"claude": [exe, "--resume", attached.agent], "codex": [exe, "resume", attached.agent]}.get(
        attached.cli, [exe, attached.cwd, "--session", attached.agent])
    cwd = attached.cwd if os.path.isdir(attached.cwd) else None
    return subprocess.run(argv, cwd=cwd, env=attached.env).returncode
