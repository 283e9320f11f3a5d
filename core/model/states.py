"""The lifecycle of a session: one table of legal transitions, read by every call.

A session is in exactly one ``State``. Each system call that a state matters to has a row
in ``TABLE``: for every state the call is legal in, the state it leads to (``SAME`` keeps
it; ``PRIOR`` returns to the state remembered when the session was suspended). A call that
finds no entry for the current state is refused before anything is written. The monitor
reads the same table (``allowed``) to grey out keys that would be refused. The table is
keyed by ``Call``, so a call has the same name here as in the journal and in every face.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from .calls import Call


class State(StrEnum):
    SLEEPING = "sleeping"
    READY = "ready"
    RUNNING = "running"
    WAITING = "waiting"
    SUSPENDED = "suspended"
    TERMINATED = "terminated"

    @property
    def letter(self) -> str:
        """htop-style one-letter code: R running, W waiting for a person, Q queued, S sleeping,
        T stopped, Z ended."""
        return _LETTERS[self]


_LETTERS: Final = {
    State.RUNNING: "R",
    State.WAITING: "W",
    State.READY: "Q",
    State.SLEEPING: "S",
    State.SUSPENDED: "T",
    State.TERMINATED: "Z",
}


class Reason(StrEnum):
    """Why a session is terminated; or why it is suspended by something other than a person:
    ``FAILING`` (the engine: its runs keep failing), ``ATTACHED`` (its agent's own CLI is open
    on it, ``attach``: no run may start meanwhile), ``BUDGET`` (the engine: a run would go over
    its budget, ``model.budgets``; resumed by a raised limit or a new period), ``ABSENT`` (the
    engine: its folder is not on this machine, as when an engine of another machine took its
    host over; resumed, or moved to a host where it is, by a person)."""

    DONE = "done"
    CANCELLED = "cancelled"
    FAILED = "failed"
    MERGED = "merged"
    FAILING = "failing"
    ATTACHED = "attached"
    BUDGET = "budget"
    ABSENT = "absent"


class Restart(StrEnum):
    """Whether a session's run is run again when it ended without finishing, like a service
    manager's restart policy: ``NO``; ``ON_FAILURE`` when it was lost (its engine died: a crash,
    a power cut), failed or timed out (after the back-off of failed runs; ``fail_limit`` still
    suspends it); ``ALWAYS`` also when its engine stopped under it (a reboot, ``procession run``
    stopped). An agent CLI resumes its own session."""

    NO = "no"
    ON_FAILURE = "on-failure"
    ALWAYS = "always"


SAME: Final = "same"
PRIOR: Final = "prior"

S, Q, R, W, T, Z = State.SLEEPING, State.READY, State.RUNNING, State.WAITING, State.SUSPENDED, State.TERMINATED
LIVE: Final = (S, Q, R, W, T)
IDLE: Final = (S, Q, T)

#: call -> {state it is legal in: state it leads to}. A call that changes a second session
#: checks it against ``SECOND`` (a merge's target).
TABLE: Final[dict[Call, dict[State, State | str]]] = {
    # user calls that move the state
    Call.ACTIVATE: {S: Q},
    Call.SUSPEND: {S: T, Q: T, R: T, W: T},
    Call.RESUME: {T: PRIOR},
    Call.INTERRUPT: {R: S, Q: S, W: S},
    Call.CANCEL: {S: Z, Q: Z, R: Z, W: Z, T: Z},
    # a person's answer to what its agent asked: on with its run (or, the run gone, queued again)
    Call.ALLOW: {W: R},
    Call.DENY: {W: R},
    Call.MERGE: {S: Z, Q: Z, T: Z},  # the source of a merge ends merged
    Call.ATTACH: {S: T, Q: T, T: SAME},  # held while the agent's own CLI is open on it
    Call.SYNC: {S: SAME, Q: SAME, T: SAME},
    # user calls that keep the state
    **{call: {s: SAME for s in LIVE} for call in (Call.SEND, Call.MEMORY, Call.NICE, Call.BIND, Call.UNBIND,
                                                  Call.TRIGGER, Call.APPROVE, Call.SET,
                                                  Call.ENV, Call.FORGET, Call.LIMIT)},
    **{call: {s: SAME for s in IDLE} for call in (Call.COMPRESS, Call.EXPAND, Call.MIGRATE, Call.MOVE)},
    # any session, even an ended one, can be forked, saved, or loaded again from a checkpoint
    **{call: {s: SAME for s in State} for call in (Call.FORK, Call.SAVE, Call.LOAD)},
    # the engine's own moves
    Call.START: {Q: R},
    Call.ASK: {R: W, W: SAME},
    Call.FINISH: {R: S, W: S},
    Call.RECOVER: {R: S},
}
SECOND: Final[dict[Call, dict[State, State | str]]] = {
    Call.MERGE: {s: SAME for s in LIVE},
}

#: Why a call is refused, where the bare state ("it is suspended") is not enough.
HINTS: Final[dict[tuple[Call, State], str]] = {
    (Call.ACTIVATE, Q): "it is ready (already queued)",
    (Call.ACTIVATE, R): "it is running already",
    (Call.ACTIVATE, T): "it is suspended: resume it first",
    (Call.SUSPEND, T): "it is suspended already",
    (Call.RESUME, S): "it is sleeping, not suspended",
    (Call.RESUME, Q): "it is ready, not suspended",
    (Call.RESUME, R): "it is running, not suspended",
    (Call.INTERRUPT, S): "it is sleeping: no step is running",
    **{(call, s): f"it is {s}: nothing it asked waits for an answer" for call in (Call.ALLOW, Call.DENY)
       for s in (S, Q, R)},
    **{(call, T): "it is suspended: resume it first" for call in (Call.ALLOW, Call.DENY)},
    (Call.INTERRUPT, T): "it is suspended: resume it first, or cancel it",
    (Call.SYNC, R): "a step of it is running: what the agent does arrives through the run",
    **{(call, s): f"it is {s}: interrupt it or wait for the step to finish"
       for call in (Call.COMPRESS, Call.EXPAND, Call.MIGRATE, Call.MOVE, Call.MERGE, Call.ATTACH) for s in (R, W)},
    (Call.SYNC, W): "a step of it is waiting for an answer: allow or deny it (procession pending)",
}


def allowed(call: Call, state: State) -> bool:
    """Whether ``call`` is legal for a session in ``state`` (the monitor greys out the rest).
    A call the table does not name (spawn) is legal in every state."""
    table = TABLE.get(call)
    return table is None or state in table


def next_state(call: Call, state: State, prior: State | None = None, *,
               table: dict[Call, dict[State, State | str]] = TABLE) -> State | None:
    """The state ``call`` leads to from ``state``, or ``None`` when the call is illegal."""
    target = table[call].get(state) if call in table else SAME
    if target is None:
        return None
    if target == SAME:
        return state
    if target == PRIOR:
        return prior or S
    return State(target)


def reason(call: Call, state: State) -> str:
    """Why ``call`` is refused in ``state``, in a few words."""
    if state is Z:
        return "it is terminated: fork it to go on from where it ended"
    return HINTS.get((call, state), f"it is {state}")
