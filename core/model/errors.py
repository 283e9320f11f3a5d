"""Typed refusals of the engine.

Every error a user can cause is a ``ProcessionError`` whose ``str()`` is one line meant to
be read by a person: the CLI prints it after ``procession: error:``, the monitor shows it in
a notification. Anything that is not a ``ProcessionError`` is a bug and may show a traceback.
A refused call never leaves a trace in the store: the transaction that raised is rolled back.
"""

from __future__ import annotations

from typing import Any

from .text import plural


class ProcessionError(Exception):
    """A call was refused; the message says why in one line."""

    exit_code = 1


class InvalidArgument(ProcessionError):
    """An argument is malformed (bad JSON, unknown runner kind, negative window...)."""


class SessionNotFound(ProcessionError):
    def __init__(self, sid: int | str) -> None:
        super().__init__(f"no session {sid}")
        self.sid = sid


class NotFound(ProcessionError):
    """A named thing other than a session (trigger, checkpoint, memory key...) is missing."""


class IllegalTransition(ProcessionError):
    """The lifecycle table does not allow this call in the session's current state."""

    def __init__(self, call: str, sid: int, state: str, reason: str = "") -> None:
        super().__init__(f"cannot {call} session {sid}: {reason or f'it is {state}'}")
        self.call, self.sid, self.state = call, sid, state


class Answered(ProcessionError):
    """A request was answered already (by another face, a rule, or its run ending): each is
    answered once."""


class NotAllowed(ProcessionError):
    """The caller may not make this call here: an agent's server is scoped to the sessions its
    agent owns and spawned, and to the calls the user allowed it."""


class NoneDone(ProcessionError):
    """A call on several sessions refused for some: it did nothing, for any of them (all or
    none). ``refusals``: one line per session refused, as that call alone would say it; every
    face prints them, then ``NOTHING``."""

    NOTHING = "nothing was done: a call on several sessions acts on all of them or on none"

    def __init__(self, refusals: list[str]) -> None:
        super().__init__(f"{'; '.join(refusals)} ({self.NOTHING})")
        self.refusals = refusals


class ContextTooLarge(ProcessionError):
    """The active context does not fit the window asked for."""


class MergeConflict(ProcessionError):
    """Keys (or a fork's files) changed differently on both sides; nothing was applied.

    ``conflicts`` maps each key to ``(base, ours, theirs)``, with ``MISSING`` for an absent
    value, so that a face can show all three and let the user pick; ``files`` maps each
    conflicting file (a path in the fork's folder) to what both sides did to it.
    """

    exit_code = 3

    def __init__(self, source: int, target: int, conflicts: dict[str, tuple[Any, Any, Any]],
                 files: dict[str, str] | None = None) -> None:
        files = files or {}
        names = ", ".join([*sorted(conflicts), *(f"file {p}" for p in sorted(files))])
        how = "--ours, --theirs or --set KEY=JSON"
        if files:
            how = ("--ours, --theirs (or --ours PATH, --theirs PATH for one file), --set KEY=JSON, or by merging"
                   " the target's branch into the fork's, resolving there, and merging again")
        super().__init__(
            f"merge {source} into {target} has {plural(len(conflicts) + len(files), 'unresolved conflict')}: {names};"
            f" resolve with {how}"
        )
        self.source, self.target, self.conflicts, self.files = source, target, conflicts, files


class SnapshotError(ProcessionError):
    """A snapshot file is not one we wrote, or not intact."""


class WorkspaceError(ProcessionError):
    """The workspace file cannot be used (not SQLite, newer schema, unreadable...)."""


class StoreBusy(ProcessionError):
    """Another process held the workspace for longer than we are willing to wait."""


class StoreUnreachable(StoreBusy):
    """The database a shared workspace lives in cannot be reached (its server stopped, the
    network cut): nothing was changed, and the same call may succeed once it is back (the
    engine keeps what it has to write, and tries again, as for a busy workspace)."""


class StoreFull(WorkspaceError):
    """The disk under the workspace is full or failing: nothing was written, and the same write
    may succeed once there is room (the engine keeps what it has to write, and tries again)."""


class EngineBusy(ProcessionError):
    """Another engine holds the workspace lease."""


class Fenced(ProcessionError):
    """An engine whose host's lease is no longer its own (taken over after an operator said it
    was dead) writes nothing: each of its writes is refused (``store.base.fenced``)."""
