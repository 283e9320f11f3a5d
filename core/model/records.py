"""What the engine hands to its faces: immutable records, ready to show or to dump as JSON."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .states import State


@dataclass(slots=True)
class TriggerInfo:
    """A trigger as ``ps`` lists it. Its spec is kept as JSON text and parsed on use: a big
    workspace lists tens of thousands of triggers and the table never reads their specs."""

    id: int
    session: int
    kind: str
    spec_text: str
    armed: bool
    last_fired: float | None
    fired: int
    pending: bool

    @property
    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = json.loads(self.spec_text)
        return spec

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "session": self.session, "kind": self.kind, "spec": self.spec, "armed": self.armed,
                "last_fired": self.last_fired, "fired": self.fired, "pending": self.pending}


@dataclass(slots=True)
class SessionInfo:
    """One row of the process table: everything ``ps`` shows, no message read.

    Treated as immutable, but not ``frozen``: a frozen dataclass of this size costs ten
    times more to build, and the monitor builds 100,000 of them to open a big workspace.
    Fields are in the order of ``workspace.PS_COLUMNS``.
    """

    id: int
    uuid: str
    name: str
    agent: str
    goal: str
    state: State
    reason: str | None
    priority: int
    parent: int | None
    fork_seq: int
    merged_into: int | None
    runner: str
    context_window: int
    context_tokens: int
    messages: int
    length: int
    created: float
    last_active: float
    armed: bool
    timeout: float | None
    cwd: str
    rev: int
    last_outcome: str | None = None  # how its last run ended
    failures: int = 0  # runs failed in a row
    triggers: tuple[TriggerInfo, ...] = ()
    pid: int | None = None
    cpu: float | None = None
    rss: int | None = None
    run_started: float | None = None
    #: who counted ``context_tokens``: "procession" (its copy of the history) or "agent" (the
    #: agent CLI's own context, as it last reported it, against its own window)
    context_source: str = "procession"
    status: str | None = None  # what a running agent is doing (its last tool call or message)
    spawned_by: int | None = None  # the session that spawned it (an agent, through its MCP server)

    @property
    def last_fired(self) -> float | None:
        return max((t.last_fired for t in self.triggers if t.last_fired), default=None)

    @property
    def unapproved(self) -> bool:
        """Its runner or a trigger is disarmed (a loaded session, or a fork's copied triggers)."""
        return not self.armed or any(not t.armed for t in self.triggers)

    def to_json(self) -> dict[str, Any]:
        data = fields_of(self)
        data["state"] = self.state.value
        data["triggers"] = [t.to_json() for t in self.triggers]
        return data


@dataclass(slots=True, frozen=True)
class Message:
    """A row of a session's history (its own or an ancestor's, for a fork)."""

    seq: int
    role: str
    content: str
    tokens: int
    author: str
    pinned: bool
    created: float
    meta: dict[str, Any] | None = None

    @property
    def protected(self) -> bool:
        """Never archived by compress: pinned messages and system messages."""
        return self.pinned or self.role == "system"


@dataclass(slots=True, frozen=True)
class ContextItem:
    """An entry of the active context: a message, or the summary standing for a fold."""

    seq: int
    role: str
    content: str
    tokens: int
    author: str = "user"
    pinned: bool = False
    fold: int | None = None
    folded: int = 0
    meta: dict[str, Any] | None = None

    @property
    def protected(self) -> bool:
        return self.fold is None and (self.pinned or self.role == "system")

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"seq": self.seq, "role": self.role, "content": self.content, "tokens": self.tokens,
                                "author": self.author}
        if self.pinned:
            data["pinned"] = True
        if self.fold is not None:
            data["summary_of"] = {"fold": self.fold, "messages": self.folded}
        if self.meta:
            data["meta"] = self.meta
            if "tool" in self.meta:  # a tool call of an agent: name, input, output, is_error
                data["tool"] = self.meta["tool"]
        return data


@dataclass(slots=True, frozen=True)
class Fold:
    """A compressed range of the active context (``lo``..``hi`` in history positions)."""

    id: int
    lo: int
    hi: int
    summary: str
    summary_tokens: int
    archived_count: int
    archived_tokens: int
    created: float

    def to_json(self) -> dict[str, Any]:
        return fields_of(self)


@dataclass(slots=True, frozen=True)
class Resource:
    id: int
    kind: str
    uri: str
    mode: str

    def to_json(self) -> dict[str, Any]:
        return fields_of(self)


@dataclass(slots=True, frozen=True)
class Checkpoint:
    id: int
    name: str
    seq: int
    created: float

    def to_json(self) -> dict[str, Any]:
        return fields_of(self)


@dataclass(slots=True, frozen=True)
class JournalEntry:
    id: int
    ts: float
    actor: str
    call: str
    session: int | None
    other: int | None
    args: dict[str, Any]
    outcome: Any

    def to_json(self) -> dict[str, Any]:
        return fields_of(self)


@dataclass(slots=True, frozen=True)
class RunInfo:
    id: int
    session: int
    cause: list[dict[str, Any]]
    started: float
    ended: float | None
    outcome: str | None
    exit_code: int | None
    pid: int | None
    tokens_in: int
    tokens_out: int
    error: str | None
    cache_read: int = 0  # input tokens an agent CLI's model read from its prompt cache
    cache_write: int = 0  # and wrote to it
    status: str | None = None  # what the agent did last

    def to_json(self) -> dict[str, Any]:
        return fields_of(self)


@dataclass(slots=True, frozen=True)
class LogChunk:
    """A piece of what a step printed: ``stream`` out or err (``reply``: an HTTP step's reply as
    it streamed)."""

    id: int
    stream: str
    ts: float
    data: str

    def to_json(self) -> dict[str, Any]:
        return fields_of(self)


@dataclass(slots=True, frozen=True)
class Waited:
    """What ended a wait on a session: ``woke`` is ``run`` (a run of it ended), ``message`` (a
    message arrived in its inbox), ``ended`` (it is terminated) or ``timeout``; with the run
    that ended, if one did, and the messages its history gained during the wait."""

    sid: int
    woke: str
    state: State
    run: RunInfo | None
    messages: tuple[Message, ...]

    def to_json(self) -> dict[str, Any]:
        return {"sid": self.sid, "woke": self.woke, "state": self.state.value,
                "run": self.run.to_json() if self.run else None,
                "messages": [{"seq": m.seq, "role": m.role, "content": m.content, "author": m.author}
                             for m in self.messages]}


@dataclass(slots=True, frozen=True)
class Holder:
    """The engine holding a workspace's lease."""

    token: str
    pid: int
    host: str
    started: float
    heartbeat: float
    slots: int
    proc_start: float | None


@dataclass(slots=True, frozen=True)
class SessionDetail:
    """Everything ``show`` prints about one session."""

    info: SessionInfo
    system: str
    memory: dict[str, Any]
    resources: tuple[Resource, ...]
    context: tuple[ContextItem, ...]
    folds: tuple[Fold, ...]
    checkpoints: tuple[Checkpoint, ...]
    tokenizer: str
    fail_limit: int = 3
    env: dict[str, str] = field(default_factory=dict)  # settings stored with the session
    passed: tuple[str, ...] = ()  # names whose engine value a run is given
    #: the agent CLI's own session: {"cli", "id", "cwd", "transcript", ...}; None until it announced one
    agent_ref: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        data = self.info.to_json()
        data.update(
            system=self.system,
            memory=self.memory,
            resources=[r.to_json() for r in self.resources],
            context=[c.to_json() for c in self.context],
            folds=[f.to_json() for f in self.folds],
            checkpoints=[c.to_json() for c in self.checkpoints],
            tokenizer=self.tokenizer,
            fail_limit=self.fail_limit,
            env=self.env,
            passed=list(self.passed),
            agent_ref=self.agent_ref,
        )
        return data


def fields_of(record: Any) -> dict[str, Any]:
    """A record's fields as a shallow dict: ``asdict`` deep-copies, which costs ten times more
    when ``ps --json`` lists thousands of sessions."""
    return {name: getattr(record, name) for name in record.__slots__}
