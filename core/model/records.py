"""What the engine hands to its faces: immutable records, ready to show or to dump as JSON."""

from __future__ import annotations

import json
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from .states import State


class _Missing:
    """An absent key or file (never set, or deleted): distinct from a JSON ``null``."""

    def __repr__(self) -> str:
        return "<missing>"


#: What a merge side holds for a key (or a file) it does not have.
MISSING: Final = _Missing()


def plain_conflicts(conflicts: dict[str, tuple[Any, Any, Any]]) -> dict[str, dict[str, Any]]:
    """Memory conflicts as JSON: ``{key: {base, ours, theirs}}``, an absent side as null."""
    return {k: {"base": None if b is MISSING else b, "ours": None if o is MISSING else o,
                "theirs": None if t is MISSING else t} for k, (b, o, t) in conflicts.items()}


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
    seen_text: str | None = None  # a commit trigger's: the branch tips it last saw, its last commit, a problem

    @property
    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = json.loads(self.spec_text)
        return spec

    @property
    def seen(self) -> dict[str, Any]:
        """What a commit trigger has seen: ``tips`` (branch -> commit), ``last`` (the newest
        commit seen: branch, id, subject) and ``problem`` (its repository or branch is gone)."""
        seen: dict[str, Any] = json.loads(self.seen_text) if self.seen_text else {}
        return seen

    def to_json(self) -> dict[str, Any]:
        data = {"id": self.id, "session": self.session, "kind": self.kind, "spec": self.spec, "armed": self.armed,
                "last_fired": self.last_fired, "fired": self.fired, "pending": self.pending}
        if self.kind == "commit":
            seen = self.seen
            data.update(last_commit=seen.get("last"), problem=seen.get("problem"))
        return data


@dataclass(slots=True, frozen=True)
class Worktree:
    """A fork's own folder (``fork --worktree``): a git worktree on ``branch`` (kind ``git``)
    or a copy of a folder outside git (kind ``copy``); ``path`` is what was made, ``folder``
    the session's folder in it, ``source`` the parent's folder it was made from."""

    kind: str
    path: str
    folder: str
    source: str
    branch: str | None

    @property
    def moves_with(self) -> str:
        """The folder a ``move --map`` of which takes this one along: a worktree beside its
        repository (``REPO.forks/NAME``, as ``fork`` makes it) goes with ``REPO``."""
        parent, _, _ = self.path.rpartition("/")
        return parent.removesuffix(".forks") if self.kind == "git" and parent.endswith(".forks") else self.path

    def to_json(self) -> dict[str, Any]:
        return fields_of(self)


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
    adopted: bool = False  # made from an agent CLI's own session (``adopt``), not started here
    confine: str = "bound"  # how the kernel holds its runs (``model.bounds``): strict, bound, off
    net: str = "any"  # where its runs may connect: any, none, model
    confinement: str | None = None  # what held its last run ("landlock ABI 7", "none: ...", "off: ..."); None: no run yet
    permissions: str = "bound"  # what its agent may do unasked: ask, bound, all
    host: str = ""  # the host its folder is on, whose engine runs it (``model.hosts``)
    #: its host's engine died (and has not come back): its runs wait for that host, never run elsewhere
    host_lost: bool = False
    worktree: Worktree | None = None  # its own folder, when it was forked with one
    #: the agent CLI's own process running this session outside Procession right now (found by
    #: the monitor, never stored): its pid; then ``cpu`` and ``rss`` are that process's
    outside: int | None = None
    #: the largest part of a cap it has spent, of its budgets (its own, its agent's); None: no limit
    spend: float | None = None
    #: the host it is on its way to (``move``, packed or being placed there); None: not moving
    moving: str | None = None

    @property
    def last_fired(self) -> float | None:
        return max((t.last_fired for t in self.triggers if t.last_fired), default=None)

    @property
    def unapproved(self) -> bool:
        """Its runner or a trigger is disarmed (a loaded session, or a fork's copied triggers)."""
        return not self.armed or any(not t.armed for t in self.triggers)

    def to_json(self) -> dict[str, Any]:
        """``sid`` names the session, as in every call's outcome; ``id`` is its old name, kept
        for one release: version 0.2 drops it."""
        data = {"sid": self.id, **fields_of(self)}
        data["state"] = self.state.value
        data["triggers"] = [t.to_json() for t in self.triggers]
        data["worktree"] = self.worktree.to_json() if self.worktree else None
        return data


class Message(NamedTuple):
    """A row of a session's history (its own or an ancestor's, for a fork). A named tuple,
    not a frozen dataclass as the other records are: histories are read a million rows at a
    time, and a tuple is made in a sixth of the time (0.6 against 3.3 µs here)."""

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


class ContextItem(NamedTuple):
    """An entry of the active context: a message, or the summary standing for a fold. A
    named tuple, as ``Message`` is: a context is made of a history's rows."""

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
    who: str | None = None  # user@host of the process that made the call (None: before schema 14)

    def to_json(self) -> dict[str, Any]:
        """``sid`` names its session, as every other output does; ``session`` is its old name."""
        return {"sid": self.session, **fields_of(self)}


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
    cost: float = 0.0  # US dollars: as its CLI reported, else by the price table (``model.prices``)

    def to_json(self) -> dict[str, Any]:
        """``sid`` names its session, as every other output does; ``session`` is its old name."""
        return {"sid": self.session, **fields_of(self)}


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
    message arrived in its inbox), ``waiting`` (it waits for a person's answer), ``ended`` (it
    is terminated) or ``timeout``; with the run
    that ended, if one did, and the messages its history gained during the wait; ``at``: the
    journal row that woke it (or the last one, when nothing in it did), to wait on from."""

    sid: int
    woke: str
    state: State
    run: RunInfo | None
    messages: tuple[Message, ...]
    row: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"sid": self.sid, "woke": self.woke, "state": self.state.value,
                "run": self.run.to_json() if self.run else None,
                "messages": [{"seq": m.seq, "role": m.role, "content": m.content, "author": m.author}
                             for m in self.messages], "row": self.row}


@dataclass(slots=True, frozen=True)
class Request:
    """What an agent asked a person (``model.requests``): the tool and its input as the agent
    gave them, the session and run that asked, since when; its answer once it has one."""

    id: int
    sid: int
    session: str
    agent: str
    run: int | None
    tool: str
    input: Any
    subject: str
    asked: float
    answer: str | None = None
    why: str | None = None
    answered: float | None = None
    answered_by: str | None = None

    def to_json(self) -> dict[str, Any]:
        return fields_of(self)


@dataclass(slots=True, frozen=True)
class Rule:
    """What ``allow --always`` made: the session's agent may call ``tool`` on ``subject`` unasked
    (``model.requests``), as stored; ``reads`` what it matches now (None: nothing, an old rule
    for a program that may run others whose call is gone), ``matches`` that in words: any call,
    any arguments (a program in ``commands.ALONE``), exactly, or nothing."""

    id: int
    sid: int
    tool: str
    subject: str
    made: float
    request: int | None
    reads: str | None
    matches: str

    def to_json(self) -> dict[str, Any]:
        return fields_of(self)


@dataclass(slots=True, frozen=True)
class Budget:
    """A limit (``model.budgets``) and what was spent in its period: ``scope`` session or agent,
    ``name`` its SID or the agent's name, ``caps`` and ``spend`` by figure (tokens, cost,
    seconds, runs), ``used`` each capped figure's part of its cap, ``ends`` when the period does."""

    id: int
    scope: str
    name: str
    per: str
    caps: dict[str, float]
    spend: dict[str, float]
    used: dict[str, float]
    warned: float | None
    ends: float | None

    def to_json(self) -> dict[str, Any]:
        return fields_of(self)


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
    machine: str  # the machine its process runs on (``hosts.machine``)


#: The stages of a move in which the session waits for it, on its old host, running nowhere.
MOVE_GOING: Final = ("packing", "placing")


@dataclass(slots=True, frozen=True)
class MoveInfo:
    """A session's last move to another host (``move``): where from and to, the folder it
    works in there, how far it got (``stage``: packing, placing, clearing, done, failed,
    cancelled), what went wrong (``problem``: why it failed, or why its old folder was kept),
    and what the engines said of it."""

    sid: int
    source: str
    target: str
    was: str
    folder: str
    files: bool
    stage: str
    problem: str | None
    said: tuple[str, ...]
    created: float
    updated: float

    @property
    def going(self) -> bool:
        """Not placed yet: the session waits, on its old host, and runs nowhere meanwhile."""
        return self.stage in MOVE_GOING

    def to_json(self) -> dict[str, Any]:
        return {**fields_of(self), "said": list(self.said)}


@dataclass(slots=True, frozen=True)
class AgentHome:
    """A session's state folder for its CLI, as ``show`` says it: where it is, whether a run
    made it yet, and the settings its CLI changed there since it was seeded."""

    cli: str
    folder: str
    made: bool
    changed: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"cli": self.cli, "folder": self.folder, "made": self.made, "changed": list(self.changed)}


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
    #: how its context figure was counted (``store.tokens.describe``)
    tokenizer: str
    #: what the stored count is multiplied by to give that figure
    token_scale: float = 1.0
    fail_limit: int = 3
    restart: str = "no"  # whether a run that did not finish runs again (``states.Restart``)
    quiet: bool = False  # it sends no notifications
    agent_quiet: bool = False  # nor does any session of its agent
    budgets: tuple[Budget, ...] = ()  # its limits (its own, its agent's) and what was spent
    env: dict[str, str] = field(default_factory=dict)  # settings stored with the session
    passed: tuple[str, ...] = ()  # names whose engine value a run is given
    #: the agent CLI's own session: {"cli", "id", "cwd", "transcript", ...}; None until it announced one
    agent_ref: dict[str, Any] | None = None
    move: MoveInfo | None = None  # its last move to another host
    agent_home: AgentHome | None = None  # its agent CLI's state folder (``model.agent_homes``)

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
            token_scale=self.token_scale,
            fail_limit=self.fail_limit,
            restart=self.restart,
            quiet=self.quiet,
            agent_quiet=self.agent_quiet,
            budgets=[b.to_json() for b in self.budgets],
            env=self.env,
            passed=list(self.passed),
            agent_ref=self.agent_ref,
            move=self.move.to_json() if self.move else None,
            agent_home=self.agent_home.to_json() if self.agent_home else None,
        )
        return data


@dataclass(slots=True, frozen=True)
class FileMerge:
    """What merging a fork's own folder does to the target's files: the fork's ``branch`` merged
    into ``target_branch`` in ``folder`` (git), or the copy's changed files brought into
    ``folder`` (copy). ``changes`` are ``(status, path)`` — A added, M modified, D deleted —
    ``conflicts`` map a path to what both sides did, ``resolved`` a settled path to its side."""

    kind: str
    worktree: str
    branch: str | None
    folder: str
    target_branch: str | None
    changes: tuple[tuple[str, str], ...]
    conflicts: dict[str, str]
    resolved: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        data = fields_of(self)
        data["changes"] = [{"status": st, "path": p} for st, p in self.changes]
        return data


@dataclass(slots=True, frozen=True)
class MergePlan:
    """What ``merge SOURCE TARGET`` would do (``merge --dry-run``): messages joining, memory
    keys set and deleted, memory conflicts (key -> base, ours, theirs), the files."""

    source: int
    target: int
    base: int | None
    messages: int
    memory_set: dict[str, Any]
    memory_deleted: tuple[str, ...]
    conflicts: dict[str, tuple[Any, Any, Any]]
    resolved: dict[str, Any]
    files: FileMerge | None

    @property
    def clean(self) -> bool:
        """Nothing left to settle: the merge would go through."""
        return not self.conflicts and not (self.files and self.files.conflicts)

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target, "base": self.base, "messages": self.messages,
                "memory_set": self.memory_set, "memory_deleted": list(self.memory_deleted),
                "conflicts": plain_conflicts(self.conflicts), "resolved": self.resolved,
                "files": self.files.to_json() if self.files else None, "clean": self.clean}


_GETTERS: dict[type, tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]] = {}


def fields_of(record: Any) -> dict[str, Any]:
    """A record's fields as a shallow dict: ``asdict`` deep-copies, which costs ten times more
    when ``ps --json`` lists thousands of sessions (one ``attrgetter`` a class, not a
    ``getattr`` a field, halves what is left)."""
    kind = type(record)
    found = _GETTERS.get(kind)
    if found is None:
        names = tuple(kind.__slots__)
        found = _GETTERS[kind] = (names, operator.attrgetter(*names) if len(names) > 1
                                  else lambda r: (getattr(r, names[0]),))
    names, get = found
    return dict(zip(names, get(record)))

