"""Runners: what executes one step of a session.

This module only knows the *spec* a user writes (``command:...``, ``openai:MODEL[@URL]``,
``builtin:NAME[:ARG]``, ``claude:[MODEL]``, ``codex:[MODEL]``, ``opencode:[PROVIDER/MODEL]``,
``acp:AGENT[:MODEL]`` or ``acp:command:PROG ARGS``;
an openai spec may end in ``#VAR``, the environment variable that holds its API key) and
checks its syntax when a session is spawned or migrated; the runners themselves live in
``procession.engine.runners``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from .agents import ACP as ACP_CLIS, CLIS
from .errors import InvalidArgument

DEFAULT: Final = "builtin:digest"
ACP: Final = "acp"
COMMAND: Final = "command:"
BUILTINS: Final = {
    "digest": "replies with a digest of the active context (deterministic)",
    "echo": "replies with the last message",
    "sleep": "sleeps ARG seconds (default 5), then replies; for trying suspend and interrupt",
    "fail": "fails with exit status 1",
}


@dataclass(slots=True, frozen=True)
class RunnerSpec:
    kind: str  # command | openai | builtin | acp | claude | codex | opencode
    #: the command line, the model ("" for an agent CLI's default), or the builtin's name
    target: str
    #: the base URL of an openai runner, a builtin's argument, an acp runner's agent CLI (``agents.ACP``)
    #: or ``command:PROG ARGS``
    arg: str = ""

    @property
    def agent(self) -> bool:
        """Whether an agent CLI runs it: it keeps its own session, context and transcript."""
        return self.kind in CLIS or self.kind == ACP

    @property
    def cli(self) -> str:
        """The agent CLI whose state and sessions its runs have: the runner's kind, an ``acp:``
        runner's agent (the same folders and transcripts as its headless runner's), or ``acp``
        for a program named by its command line (no state folder of its own)."""
        if self.kind == ACP:
            return ACP if self.arg.startswith(COMMAND) else self.arg
        return self.kind

    @property
    def acp_command(self) -> str:
        """``acp:command:PROG ARGS``'s command line ("" for any other)."""
        return self.arg[len(COMMAND):] if self.kind == ACP and self.arg.startswith(COMMAND) else ""


def parse(spec: str) -> RunnerSpec:
    """Check a runner spec's syntax; the spec is stored as the user wrote it."""
    kind, sep, rest = spec.partition(":")
    if kind in CLIS and sep:
        if not CLIS[kind].headless:
            raise InvalidArgument(f"bad runner {spec!r}: {CLIS[kind].title} runs over ACP: acp:{kind}[:MODEL]")
        return _agent(spec, kind, rest)
    if kind == ACP and sep:
        return _acp(spec, rest)
    if not sep or not rest.strip():
        raise InvalidArgument(
            f"bad runner {spec!r}: use command:<shell command>, openai:<model>[@<base url>], builtin:<name>,"
            " claude:, codex:, opencode: [model], or acp:AGENT[:MODEL]"
        )
    match kind:
        case "command":
            return RunnerSpec("command", rest)
        case "openai":
            main, _, key_env = rest.partition("#")
            model, _, url = main.partition("@")
            if not model.strip():
                raise InvalidArgument(f"bad runner {spec!r}: the model name is missing")
            if url and not url.startswith(("http://", "https://")):
                raise InvalidArgument(f"bad runner {spec!r}: the base URL must start with http:// or https://")
            if key_env and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key_env):
                raise InvalidArgument(f"bad runner {spec!r}: #{key_env} is not an environment variable name")
            url = url.rstrip("/") if url else ""
            return RunnerSpec("openai", model.strip(), f"{url}#{key_env}" if key_env else url)
        case "builtin":
            name, _, arg = rest.partition(":")
            if name not in BUILTINS:
                raise InvalidArgument(f"unknown builtin runner {name!r}; builtins are {', '.join(BUILTINS)}")
            if name == "sleep" and arg:
                try:
                    float(arg)
                except ValueError:
                    raise InvalidArgument(f"bad runner {spec!r}: builtin:sleep takes seconds") from None
            return RunnerSpec("builtin", name, arg)
        case _:
            raise InvalidArgument(f"unknown runner kind {kind!r}; kinds are command, openai, builtin, acp, "
                                  + ", ".join(k for k in CLIS if CLIS[k].headless))


def _agent(spec: str, kind: str, model: str) -> RunnerSpec:
    """``claude:``, ``codex:`` or ``opencode:`` with an optional model (empty: the CLI's own default)."""
    if model and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:/@\[\]+-]*", model):
        raise InvalidArgument(f"bad runner {spec!r}: the model is {CLIS[kind].model_hint}, without spaces")
    if kind == "opencode" and model and "/" not in model:
        raise InvalidArgument(f"bad runner {spec!r}: opencode's model is PROVIDER/MODEL, e.g. opencode:anthropic/claude-sonnet-4-5")
    return RunnerSpec(kind, model)


def _acp(spec: str, rest: str) -> RunnerSpec:
    """``acp:AGENT[:MODEL]`` (an agent CLI that speaks ACP, ``agents.ACP``), or
    ``acp:command:PROG ARGS`` (any other program that does)."""
    if rest.startswith(COMMAND):
        if not rest[len(COMMAND):].strip():
            raise InvalidArgument(f"bad runner {spec!r}: acp:command: takes the agent's command line")
        return RunnerSpec(ACP, "", rest)
    agent, _, model = rest.partition(":")
    if agent not in ACP_CLIS:
        raise InvalidArgument(f"bad runner {spec!r}: the ACP agents are {', '.join(ACP_CLIS)}, or"
                              " acp:command:PROG ARGS for any other")
    if model and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:/@\[\]+-]*", model):
        raise InvalidArgument(f"bad runner {spec!r}: the model is {CLIS[agent].model_hint}, without spaces")
    return RunnerSpec(ACP, model, agent)
