"""The agent CLIs a session can be run by (``claude:``, ``codex:``, ``opencode:``), as words:
their names, where they come from, how one is found on this machine.

Finding the executable is here, below the calls, so that ``spawn`` and ``migrate`` can
refuse a runner whose CLI is not installed with the same sentence the engine says when a
run cannot start. How each CLI is driven lives in ``procession.engine.runners.agents``.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Final

from .errors import InvalidArgument


@dataclass(slots=True, frozen=True)
class AgentCli:
    kind: str  # the runner kind, and the executable's name
    title: str
    package: str  # on npm
    model_hint: str  # what the model part of the spec is
    #: the context window of its default model, and of one named (None: its runs say, as they go)
    windows: tuple[int | None, int | None] = (None, None)

    def window(self, model: str) -> int | None:
        """The window a session of this CLI has before a run reports one."""
        return self.windows[1 if model else 0]

    @property
    def override(self) -> str:
        """The environment variable that names the executable (else it is looked up on PATH)."""
        return f"PROCESSION_{self.kind.upper()}"

    def install(self) -> str:
        return f"npm install -g {self.package}"


CLIS: Final = {
    "claude": AgentCli("claude", "Claude Code", "@anthropic-ai/claude-code", "a Claude model (opus, sonnet, ...)",
                       (1_000_000, 200_000)),
    "codex": AgentCli("codex", "Codex CLI", "@openai/codex", "a model of its provider"),
    "opencode": AgentCli("opencode", "opencode", "opencode-ai", "PROVIDER/MODEL"),
}


def locate(kind: str, environ: dict[str, str] | os._Environ[str] | None = None) -> str:
    """The executable of agent CLI ``kind``: ``$PROCESSION_<KIND>`` if set, else ``kind`` on
    PATH; refused in one line, saying how to install it, when there is none."""
    cli = CLIS[kind]
    env = os.environ if environ is None else environ
    named = env.get(cli.override)
    if named:
        if os.path.isfile(named) and os.access(named, os.X_OK):
            return named
        raise InvalidArgument(f"${cli.override} names {named!r}, which is not an executable file")
    found = shutil.which(kind, path=env.get("PATH"))
    if found is None:
        raise InvalidArgument(f"{cli.title} ({kind}) is not installed here: install it with `{cli.install()}`,"
                              f" or name its executable in ${cli.override}")
    return found
