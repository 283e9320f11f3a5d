"""The lifecycle of a session: one table of legal transitions, read by every call.

A session is in exactly one ``State``. Each system call that a state matters to has a row
in ``TABLE``: for every state the call is legal in, the state it leads to (``SAME`` keeps
it; ``PRIOR`` returns to the state remembered when the session was suspended). A call that
finds no entry for the current state is refused before anything is written. The monitor
reads the same table (``allowed``) to grey out keys that would be refused.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class State(StrEnum):
    SLEEPING = "sleeping"
    READY = "ready"
    RUNNING = "running"
    SUSPENDED = "suspended"
    TERMINATED = "terminated"

    @property
    def letter(self) -> str:
        """htop-style one-letter code: R running, Q queued, S sleeping, T stopped, Z ended."""
        return _LETTERS[self]


_LETTERS: Final = {
    State.RUNNING: "R",
    State.READY: "Q",
    State.SLEEPING: "S",
    State.SUSPENDED: "T",
    State.TERMINATED: "Z",
}


class Reason(StrEnum):
    """Why a session is terminated."""

    DONE = "done"
    CANCELLED = "cancelled"
    FAILED = "failed"
    MERGED = "merged"


SAME: Final = "same"
PRIOR: Final = "prior"

S, Q, R, T, Z = State.SLEEPING, State.READY, State.RUNNING, State.SUSPENDED, State.TERMINATED
LIVE: Final = (S, Q, R, T)
IDLE: Final = (S, Q, T)

#: call -> {state it is legal in: state it leads to}
TABLE: Final[dict[str, dict[State, State | str]]] = {
    # user calls that move the state
    "activate": {S: Q},
    "suspend": {S: T, Q: T, R: T},
    "resume": {T: PRIOR},
    "interrupt": {R: S, Q: S},
    "cancel": {S: Z, Q: Z, R: Z, T: Z},
    # user calls that keep the state
    "send": {s: SAME for s in LIVE},
    "memory": {s: SAME for s in LIVE},
    "nice": {s: SAME for s in LIVE},
    "bind": {s: SAME for s in LIVE},
    "unbind": {s: SAME for s in LIVE},
    "trigger": {s: SAME for s in LIVE},
    "approve": {s: SAME for s in LIVE},
    "compress": {s: SAME for s in IDLE},
    "expand": {s: SAME for s in IDLE},
    "migrate": {s: SAME for s in IDLE},
    "merge-into": {s: SAME for s in LIVE},  # the target of a merge
    "merge-from": {S: Z, Q: Z, T: Z},  # the source of a merge ends merged
    "fork": {s: SAME for s in State},  # any session, even an ended one, can be forked
    "save": {s: SAME for s in State},
    # the engine's own moves
    "start": {Q: R},
    "finish": {R: S},
    "done": {R: Z},
    "recover": {R: S},
}

#: Why a call is refused, where the bare state ("it is suspended") is not enough.
HINTS: Final[dict[tuple[str, State], str]] = {
    ("activate", Q): "it is ready (already queued)",
    ("activate", R): "it is running already",
    ("activate", T): "it is suspended: resume it first",
    ("suspend", T): "it is suspended already",
    ("resume", S): "it is sleeping, not suspended",
    ("resume", Q): "it is ready, not suspended",
    ("resume", R): "it is running, not suspended",
    ("interrupt", S): "it is sleeping: no step is running",
    ("interrupt", T): "it is suspended: resume it first, or cancel it",
    **{(call, R): "it is running: interrupt it or wait for the step to finish"
       for call in ("compress", "expand", "migrate", "merge-from")},
}


def allowed(call: str, state: State) -> bool:
    """Whether ``call`` is legal for a session in ``state`` (the monitor greys out the rest)."""
    return state in TABLE[call]


def next_state(call: str, state: State, prior: State | None = None) -> State | None:
    """The state ``call`` leads to from ``state``, or ``None`` when the call is illegal."""
    target = TABLE[call].get(state)
    if target is None:
        return None
    if target == SAME:
        return state
    if target == PRIOR:
        return prior or S
    return State(target)


def reason(call: str, state: State) -> str:
    """Why ``call`` is refused in ``state``, in a few words."""
    if state is Z:
        return "it is terminated: fork it to go on from where it ended"
    return HINTS.get((call, state), f"it is {state}")
