"""What each system call returns: one record per kind of call, with the notes it leaves.

Every accepted call returns an ``Outcome``: the session it acted on (or made) in ``sid``,
what it did in typed fields, and ``notes``, the things a person should know that the call
did not refuse ("3 triggers copied disarmed", "the source session ends: merged into 4",
"the context is still over its window"). Notes are worded here, in the core, once; faces
show them and never word a note of their own. A note may name the call that would follow
it up (``Note.call``): each face says how to make that call in its own terms (a command
line, a key).

``journal()`` is what the journal keeps of an outcome: its fields, without the notes (those
are words for the person who made the call) and without long content.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Final

from .calls import Call
from .records import Budget, Checkpoint, Fold, Resource, TriggerInfo
from .states import State


@dataclass(slots=True, frozen=True)
class Note:
    """Something a person should know about a call that went through."""

    text: str
    call: Call | None = None  # the call that would follow this up, on ``sid``
    sid: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "call": self.call, "sid": self.sid}


def _plain(value: Any) -> Any:
    if hasattr(value, "to_json"):
        return value.to_json()
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


@dataclass(slots=True, frozen=True)
class Outcome:
    """The common part of every call's result."""

    sid: int
    notes: tuple[Note, ...] = field(default=(), kw_only=True)
    #: the call's own journal row: what happened after it comes later (``wait --since ROW``)
    row: int = field(default=0, kw_only=True)

    def journal(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self) if f.name not in _OWN}

    def to_json(self) -> dict[str, Any]:
        return self.journal() | {"notes": [n.to_json() for n in self.notes], "row": self.row}


#: What an outcome says of itself, not of what the call did: not in its journal row.
_OWN: Final = frozenset({"notes", "row"})


@dataclass(slots=True, frozen=True)
class Spawned(Outcome):
    """A new session (spawn)."""


@dataclass(slots=True, frozen=True)
class Forked(Outcome):
    """``sid`` is the new session; it shares ``parent``'s history up to ``at``; forked with a
    worktree, it works in ``worktree`` (on ``branch``, in git)."""

    parent: int
    at: int
    worktree: str | None = None
    branch: str | None = None


@dataclass(slots=True, frozen=True)
class Loaded(Outcome):
    """``sid`` is the new session, made from ``source`` (a snapshot file, or ``SID:CHECKPOINT``)."""

    source: str
    messages: int


@dataclass(slots=True, frozen=True)
class Adopted(Outcome):
    """``sid`` holds the agent CLI's own session ``agent`` (of ``cli``), read from ``path``,
    working in ``cwd`` (as its transcript says); ``already``: it was adopted (or run) before as
    ``sid``, and nothing was made; ``held``: its folder is one no run is given unasked (a system
    folder, the home folder, a folder of keys), so it waits for ``approve``."""

    cli: str
    agent: str
    path: str
    messages: int
    already: bool = False
    cwd: str = ""
    held: bool = False


@dataclass(slots=True, frozen=True)
class Adoption:
    """What ``adopt`` did: a result per transcript it took (made, or already held), the
    ones it left out, ``(path, why)``, and where it looked (``--all``, ``--since``)."""

    cli: str
    results: tuple[Adopted, ...]
    left: tuple[tuple[str, str], ...] = ()
    looked: str = ""

    @property
    def made(self) -> int:
        return sum(1 for r in self.results if not r.already)

    def to_json(self) -> dict[str, Any]:
        return {"cli": self.cli, "adopted": [r.to_json() for r in self.results],
                "left": [{"path": p, "why": w} for p, w in self.left], "looked": self.looked}


@dataclass(slots=True, frozen=True)
class Synced(Outcome):
    """``messages`` appended from the agent's own transcript (0: nothing new); ``branched``:
    the transcript's conversation left the one the session holds (rewound in the CLI)."""

    messages: int
    branched: bool = False


@dataclass(slots=True, frozen=True)
class Attached(Outcome):
    """The agent's own CLI may open ``agent`` (of ``cli``) in ``cwd`` now; ``held``: attach
    suspended the session for it, and detaching resumes it; ``length``: how long its history
    was then (what the CLI adds comes after it)."""

    cli: str
    agent: str
    cwd: str
    held: bool
    env: dict[str, str] = field(default_factory=dict, repr=False)  # what the CLI is started with: never journaled
    length: int = 0

    def journal(self) -> dict[str, Any]:
        return {"sid": self.sid, "cli": self.cli, "agent": self.agent, "cwd": self.cwd, "held": self.held}


@dataclass(slots=True, frozen=True)
class Moved(Outcome):
    """A lifecycle call: the state the session is in now."""

    state: State


@dataclass(slots=True, frozen=True)
class Sent(Outcome):
    """``count`` messages appended; the last one is at ``seq``."""

    seq: int
    count: int


@dataclass(slots=True, frozen=True)
class MemoryChanged(Outcome):
    set: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()


@dataclass(slots=True, frozen=True)
class Compressed(Outcome):
    """``fold``: the one made, or (``masked`` tool outputs) the folds made, as one."""

    fold: Fold
    context_tokens: int
    window: int
    masked: int = 0


@dataclass(slots=True, frozen=True)
class Expanded(Outcome):
    """``expand``: the fold undone (``undone``: the folds one compress made, taken as one) and
    how many compressed ranges are still in force."""

    fold: Fold
    context_tokens: int
    undone: int = 1
    in_force: int = 0


@dataclass(slots=True, frozen=True)
class Updated(Outcome):
    """``set``: the names of the settings that changed (of agent ``agent``'s, ``sid`` 0)."""

    changed: tuple[str, ...]
    agent: str | None = None


@dataclass(slots=True, frozen=True)
class EnvChanged(Outcome):
    """``env``: the session's environment after the call (passed names carry no value), and
    the names a run also takes of the engine's environment (``environ.taken``)."""

    env: dict[str, str]
    passed: tuple[str, ...]
    taken: tuple[str, ...] = ()


@dataclass(slots=True, frozen=True)
class Recounted(Outcome):
    """``set --tokenizer``: how the context is counted now, and what it comes to."""

    tokenizer: str
    context_tokens: int
    window: int


@dataclass(slots=True, frozen=True)
class Niced(Outcome):
    priority: int


@dataclass(slots=True, frozen=True)
class Migrated(Outcome):
    runner: str
    window: int
    context_tokens: int
    tokenizer: str
    fold: Fold | None = None  # the compress that made the context fit, if one was needed
    #: moved to another agent CLI: its new reference ({}: none yet, the first run's prompt carries
    #: the history), and the one it replaced (kept here, so the journal keeps it)
    agent: dict[str, Any] | None = None
    left: dict[str, Any] | None = None


@dataclass(slots=True, frozen=True)
class Moving(Outcome):
    """A move to host ``target`` asked for (``stage`` packing), or a step of it done by an
    engine (placing, clearing, done, failed); ``cancelled``: a move not yet placed, taken back;
    ``waiting``: hosts whose engine must start before it can go on."""

    source: str
    target: str
    folder: str
    files: bool
    stage: str
    cancelled: bool = False
    waiting: tuple[str, ...] = ()  # the hosts of the two whose engine did not run when it was asked


@dataclass(slots=True, frozen=True)
class Merged(Outcome):
    """``source`` merged into ``sid``; ``base`` is the common ancestor (None: unrelated); a
    source forked with a worktree also changed ``files`` (``"M path"``), by ``commit`` in git."""

    source: int
    base: int | None
    messages: int
    memory_changed: tuple[str, ...]
    resources_added: int
    resolved: dict[str, Any]
    files: tuple[str, ...] = ()
    commit: str | None = None


@dataclass(slots=True, frozen=True)
class Saved(Outcome):
    """A checkpoint in the store, or a snapshot file (``file``, its size and content hash)."""

    checkpoint: Checkpoint | None = None
    file: str | None = None
    messages: int = 0
    bytes: int = 0
    sha256: str = ""


@dataclass(slots=True, frozen=True)
class Approved(Outcome):
    """What approving armed: the runner, and the triggers that were disarmed."""

    runner: str
    triggers: tuple[TriggerInfo, ...]


@dataclass(slots=True, frozen=True)
class Bound(Outcome):
    resource: Resource


@dataclass(slots=True, frozen=True)
class Unbound(Outcome):
    resource: Resource


@dataclass(slots=True, frozen=True)
class TriggerAdded(Outcome):
    trigger: TriggerInfo


@dataclass(slots=True, frozen=True)
class TriggerRemoved(Outcome):
    trigger: TriggerInfo


@dataclass(slots=True, frozen=True)
class Asked(Outcome):
    """``ask``: the request made, and its answer when one was given at once (by the session's
    permissions, a rule, or an answer carried over from a run that ended waiting)."""

    request: int
    answer: str | None
    why: str | None = None
    by: str | None = None


@dataclass(slots=True, frozen=True)
class Answered(Outcome):
    """``allow`` or ``deny``: the request, the answer, the rule ``--always`` made, the other
    requests it answered too, and the state the session is in now (still waiting while it
    has other requests open; ready when the run that asked is gone and goes on in a new one)."""

    request: int
    answer: str
    state: State
    rule: int | None = None
    also: tuple[int, ...] = ()


@dataclass(slots=True, frozen=True)
class Forgot(Outcome):
    """``forget``: the rule removed."""

    rule: int
    tool: str
    subject: str


@dataclass(slots=True, frozen=True)
class Limited(Outcome):
    """``limit``: the budgets over the session (or the agent) now, and the sessions a raised
    limit resumed. ``sid`` 0: an agent's limit."""

    agent: str | None
    budgets: tuple[Budget, ...]
    resumed: tuple[int, ...] = ()
    cleared: bool = False


#: What a device's outcome holds that no journal row may: the secrets it hands out once.
_SECRET: Final = frozenset({"secret", "csrf"})


@dataclass(slots=True, frozen=True)
class _Secrets(Outcome):
    """An outcome that hands out secrets (``_SECRET``): its journal row keeps the rest."""

    def journal(self) -> dict[str, Any]:
        return {k: v for k, v in Outcome.journal(self).items() if k not in _SECRET}


@dataclass(slots=True, frozen=True)
class Pairing(_Secrets):
    """``pair``: a one-time link's ``secret`` (said once, to the person who asked; stored only
    as its hash), the device it will pair and until when it may be used. ``sid`` 0."""

    name: str
    read_only: bool
    expires: float
    secret: str


@dataclass(slots=True, frozen=True)
class Paired(_Secrets):
    """``paired``: the device made by a pairing link, its cookie's ``secret`` and its CSRF
    token (handed to the browser once; stored only as the secret's hash). ``sid`` 0."""

    device: int
    name: str
    read_only: bool
    secret: str
    csrf: str


@dataclass(slots=True, frozen=True)
class Revoked(Outcome):
    """``revoke``: the device that may no longer reach the web face. ``sid`` 0."""

    device: int
    name: str


@dataclass(slots=True, frozen=True)
class Dead(Outcome):
    """``host --dead``: the engine an operator said is dead, whose lease is given up (another
    engine may take the host over; it, if it comes back, changes nothing). ``sid`` 0."""

    host: str
    pid: int
    machine: str
    silent: float  # seconds since it was last heard, by the workspace's clock


@dataclass(slots=True, frozen=True)
class Teamed(Outcome):
    """``team add`` / ``team remove``: the person's database role made (``read_only``: it may
    only read) or taken off the workspace. ``sid`` 0."""

    name: str
    added: bool
    read_only: bool = False
