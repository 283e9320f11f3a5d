"""What a run's trace holds, read from the store: the run, its session, the tool calls it made
and what let each run (``allowed``), what it waited for a person on, and the runs it follows
from in other sessions (its fork's parent, the forks merged into it). The engine turns one
into OpenTelemetry spans (``engine.tracing``); nothing here knows OpenTelemetry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .allowed import ToolUse
from .records import RunInfo

#: How a run follows from another session's run.
FORKED: str = "forked from"
MERGED: str = "merged from"


@dataclass(slots=True, frozen=True)
class Link:
    """Another session's run this one follows from: ``uuid`` names the session (its trace),
    ``run`` the run (None: the session had run none yet; linked to the session itself)."""

    kind: str
    uuid: str
    session: int
    run: int | None
    at: int | None = None  # a fork's point in its parent's history


@dataclass(slots=True, frozen=True)
class RunTrace:
    run: RunInfo
    uuid: str
    name: str
    agent: str
    host: str
    runner: str
    tools: tuple[ToolUse, ...] = ()
    asked: tuple[dict[str, Any], ...] = ()  # requests no tool call answers to (withdrawn, refused before any call)
    links: tuple[Link, ...] = field(default_factory=tuple)
