"""Agent CLIs as runners: Claude Code (``claude``), Codex (``codex``), opencode (``opencode``).

Each module says how its CLI is started for a turn (``invocation``) and how its event
stream reads (a ``Reader``); ``base`` holds what they share. ``interactive`` is the CLI's
own interactive face, resumed on a session (``attach``)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from typing import Final

from ....model import agents
from ....model.errors import InvalidArgument
from ....model.outcomes import Attached
from . import claude, codex, opencode
from .base import Invocation, McpServer, Reader, Turn

__all__ = ["Invocation", "McpServer", "Reader", "Turn", "interactive", "prepare"]

_KINDS: Final[dict[str, tuple[Callable[[str, Turn], Invocation], type[Reader]]]] = {
    "claude": (claude.invocation, claude.ClaudeReader),
    "codex": (codex.invocation, codex.CodexReader),
    "opencode": (opencode.invocation, opencode.OpencodeReader),
}


def prepare(kind: str, turn: Turn) -> tuple[Invocation, Reader]:
    """How to start agent CLI ``kind`` for ``turn`` (refused in one line if it is not installed),
    and the reader of its events."""
    if kind not in _KINDS:
        raise InvalidArgument(f"the {kind} runner is not available in this version")
    start, reader = _KINDS[kind]
    return start(agents.locate(kind, turn.env), turn), reader(turn)


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
