"""``@syscall``: what makes a method one atomic, checked, journaled system call.

A call body never opens its own transaction, loads its session or checks the lifecycle
table: the decorator does, the same way for every call, before the body runs. The body gets
an ``Act`` (the transaction, the checked session row, the state the call leads it to, and a
list of notes) and returns an ``Outcome``. The decorator then writes the call's journal
row in the same transaction, commits, and only after the commit runs what the body asked to
happen outside the store (``Act.after``: renaming a snapshot file into place), so that no
file work is done while the workspace is locked and nothing is done for a call that rolled
back.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, TypeVar

from ..model import states
from ..model.calls import Call
from ..model.errors import IllegalTransition, InvalidArgument, NoneDone, ProcessionError
from ..model.outcomes import Note, Outcome
from ..model.states import State
from ..store import Row, Store, Tx, rows

if TYPE_CHECKING:
    from .base import Calls



#: An all-or-none batch of calls in progress (``Workspace.each``): the one transaction every
#: call of it runs in, and what they asked to do once it commits.
BATCH: ContextVar[tuple[Tx, list[Callable[[], None]]] | None] = ContextVar("batch", default=None)


class Journaled(Protocol):
    """What a call returns: user calls an ``Outcome``; the engine's calls records of their own."""

    def journal(self) -> Any: ...


P = ParamSpec("P")
O = TypeVar("O", bound=Journaled)
T = TypeVar("T")
C = TypeVar("C", bound="Calls")


async def all_or_none(store: Store, calls: Sequence[Callable[[], Awaitable[T]]],
                      refused: list[ProcessionError] | None = None, *, single: bool = False) -> list[T]:
    """``calls`` (each a system call made as ``@syscall`` makes it) in one transaction: all of
    them, or none. One raises a refusal and the others are still made, to be said too, then
    the transaction rolls back: ``NoneDone`` names each refusal (with ``refused``, found before,
    first); for a ``single`` session, its own refusal is raised as it is. What the calls asked
    to do outside the store (``Act.after``) is done once it commits."""
    async def body(tx: Tx) -> tuple[list[T], list[Callable[[], None]]]:
        after: list[Callable[[], None]] = []
        token = BATCH.set((tx, after))
        try:
            made, these = [], list(refused or ())  # a body tried again starts afresh
            for call in calls:
                try:
                    made.append(await call())
                except ProcessionError as exc:
                    these.append(exc)
            if single and these:
                raise these[0]
            if these:
                raise NoneDone([str(exc) for exc in these])
            return made, after
        finally:
            BATCH.reset(token)

    made, after = await store.atomic(body)
    for action in after:
        action()
    return made


def transition(row: Row, call: Call, table: dict[Call, dict[State, State | str]] = states.TABLE) -> State:
    """The state ``call`` leads the session in ``row`` to, or ``IllegalTransition``."""
    state = State(row["state"])
    prior = State(row["resume_to"]) if row["resume_to"] else None
    target = states.next_state(call, state, prior, table=table)
    if target is None:
        raise IllegalTransition(call, row["id"], state, states.reason(call, state))
    return target


class Act:
    """One call in progress."""

    __slots__ = ("tx", "call", "actor", "row", "target", "other", "notes", "_after")

    def __init__(self, tx: Tx, call: Call, actor: str) -> None:
        self.tx = tx
        self.call = call
        self.actor = actor
        self.row: Row = None  # type: ignore[assignment]  # set before the body runs when checked
        self.target: State = State.SLEEPING
        self.other: Row | None = None
        self.notes: list[Note] = []
        self._after: list[Callable[[], None]] = []

    @property
    def now(self) -> float:
        return self.tx.now

    def note(self, text: str, call: Call | None = None, sid: int | None = None) -> None:
        self.notes.append(Note(text, call, sid))

    def after(self, action: Callable[[], None]) -> None:
        """Do ``action`` once the call has committed (never if it is refused)."""
        self._after.append(action)

    async def reload(self) -> Row:
        """The checked session's row as this transaction has changed it so far."""
        self.row = await rows.session(self.tx, self.row["id"])
        return self.row


def syscall(
    call: Call, *, session: str | None = "sid", other: str | None = None, check: str | None = "",
    second: str | None = None,
) -> Callable[[Callable[Concatenate[C, Act, P], Awaitable[O]]], Callable[Concatenate[C, P], Awaitable[O]]]:
    """Make a method one atomic, journaled system call.

    ``session`` and ``other`` name the arguments holding the SIDs the journal row is about
    (``"result"``: the SID of the outcome, for calls that make a session); with no ``other``
    of its own, the row's is the session the calls are made as (``Calls.acting``), if any. ``check`` names
    the argument whose session is loaded and checked against the lifecycle table before the
    body runs (default: ``session``; ``None``: nothing to check), ``second`` one checked
    against ``states.SECOND`` (a merge's target).
    """
    checked = session if check == "" else check
    sessions = {name for name in (session, other, checked, second) if name and name != "result"}

    def wrap(fn: Callable[Concatenate[C, Act, P], Awaitable[O]]) -> Callable[Concatenate[C, P], Awaitable[O]]:
        @functools.wraps(fn)
        async def method(self: C, /, *args: P.args, **kwargs: P.kwargs) -> O:
            names, ints = parameters(fn)
            arguments: dict[str, Any] = dict(zip(names, args)) | kwargs
            check_ints(call, ints, arguments, sessions)

            async def body(tx: Tx) -> tuple[Act, O]:
                act = Act(tx, call, self.actor)
                tx.will_journal()
                if checked and checked != "result":
                    act.row = await rows.session(tx, arguments[checked])
                    act.target = transition(act.row, call)
                if second:
                    act.other = await rows.session(tx, arguments[second])
                    transition(act.other, call, states.SECOND)
                result = await fn(self, act, *args, **kwargs)
                if act.notes and isinstance(result, Outcome):
                    result = dataclasses.replace(result, notes=result.notes + tuple(act.notes))
                named = arguments | {"result": getattr(result, "sid", None)}
                second_sid = named.get(other) if other else None
                row = await tx.journal(self.actor, call, named.get(session) if session else None,
                                      journal_args(arguments), result.journal(),
                                      self.acting if second_sid is None else second_sid, self.who)
                if isinstance(result, Outcome):
                    result = dataclasses.replace(result, row=row)
                return act, result

            batch = BATCH.get()
            if batch is not None:  # one call of several, in their one transaction
                act, result = await body(batch[0])
                batch[1].extend(act._after)
                return result
            act, result = await self.store.atomic(body)
            for action in act._after:
                action()
            return result

        method.call = call  # type: ignore[attr-defined]
        return method

    return wrap


@functools.cache  # read on first use, once per call: inspect costs import time for every call
def parameters(fn: Callable[..., Any]) -> tuple[list[str], dict[str, bool]]:
    """The names of a call body's arguments (past ``self`` and the ``Act``), and those of them
    annotated ``int`` or ``int | None`` (mapped to whether None is allowed). Those are checked
    before the call runs: SQLite would take a ``bool`` (``activate(True)`` acting on session 1)
    and refuse anything else with a driver's error naming neither the call nor the argument."""
    found = list(inspect.signature(fn).parameters.values())[2:]
    ints: dict[str, bool] = {}
    for p in found:
        text = p.annotation if isinstance(p.annotation, str) else inspect.formatannotation(p.annotation)
        if text in ("int", "int | None"):
            ints[p.name] = text != "int"
    return [p.name for p in found], ints


def check_ints(call: Call, ints: dict[str, bool], arguments: dict[str, Any], sessions: set[str]) -> None:
    """Refuse, in one line naming the call and the argument, a value given for an ``int``
    argument (``ints``, from ``parameters``) that is not one; an outcome record given where its
    session belongs (``activate(spawned)``) is told what to pass instead."""
    for name, optional in ints.items():
        value = arguments.get(name)
        if name not in arguments or isinstance(value, int) and not isinstance(value, bool) or value is None and optional:
            continue
        session = name in sessions
        hint = " (an outcome record: pass its .sid)" if session and isinstance(value, Outcome) else ""
        raise InvalidArgument(f"{call}: {name} must be {'a session id (int)' if session else 'an int'},"
                              f" not {type(value).__name__}{hint}")


def journal_args(arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments of a call as its journal row keeps them: long texts shortened, no content."""
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        if callable(value):
            continue
        if hasattr(value, "journal"):
            value = value.journal()
        if isinstance(value, str) and len(value) > 200:
            value = f"{value[:200]}… ({len(value)} chars)"
        elif isinstance(value, (list, tuple)) and len(value) > 20:
            value = f"<{len(value)} items>"
        elif isinstance(value, dict) and len(value) > 20:
            value = f"<{len(value)} keys>"
        elif isinstance(value, Iterator):
            value = "<streamed>"  # read by the call as it went: its outcome says how many
        elif is_dataclass(value) and not isinstance(value, type):
            value = asdict(value)
        elif isinstance(value, Path):
            value = str(value)
        out[key] = value
    return out
