"""Runners: what executes one step of a session.

This module only knows the *spec* a user writes (``command:...``, ``openai:MODEL[@URL]``,
``builtin:NAME[:ARG]``, ``claude:[MODEL]``, ``codex:[MODEL]``, ``opencode:[PROVIDER/MODEL]``;
an openai spec may end in ``#VAR``, the environment variable that holds its API key) and
checks its syntax when a session is spawned or migrated; the runners themselves live in
``procession.engine.runners``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from .agents import CLIS
from .errors import InvalidArgument

DEFAULT: Final = "builtin:digest"
BUILTINS: Final = {
    "digest": "replies with a digest of the active context (deterministic)",
    "echo": "replies with the last message",
    "sleep": "sleeps ARG seconds (default 5), then replies; for trying suspend and interrupt",
    "fail": "fails with exit status 1",
}


@dataclass(slots=True, frozen=True)
class RunnerSpec:
    kind: str  # command | openai | builtin | claude | codex | opencode
    target: str  # the command line, the model ("" for an agent CLI's default), or the builtin's name
    arg: str = ""  # the base URL of an openai runner, or a builtin's argument

    @property
    def agent(self) -> bool:
        """Whether an agent CLI runs it: it keeps its own session, context and transcript."""
        return self.kind in CLIS


def parse(spec: str) -> RunnerSpec:
    """Check a runner spec's syntax; the spec is stored as the user wrote it."""
    kind, sep, rest = spec.partition(":")
    if kind in CLIS and sep:
        return _agent(spec, kind, rest)
    if not sep or not rest.strip():
        raise InvalidArgument(
            f"bad runner {spec!r}: use command:<shell command>, openai:<model>[@<base url>], builtin:<name>,"
            " or claude:, codex:, opencode: [model]"
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
            raise InvalidArgument(f"unknown runner kind {kind!r}; kinds are command, openai, builtin, "
                                  + ", ".join(CLIS))


def _agent(spec: str, kind: str, model: str) -> RunnerSpec:
    """``claude:``, ``codex:`` or ``opencode:`` with an optional model (empty: the CLI's own default)."""
    if model and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:/@\[\]+-]*", model):
        raise InvalidArgument(f"bad runner {spec!r}: the model is {CLIS[kind].model_hint}, without spaces")
    if kind == "opencode" and model and "/" not in model:
        raise InvalidArgument(f"bad runner {spec!r}: opencode's model is PROVIDER/MODEL, e.g. opencode:anthropic/claude-sonnet-4-5")
    return RunnerSpec(kind, model)
