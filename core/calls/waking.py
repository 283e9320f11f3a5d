"""How a session is woken: queued for a run, coalesced into a queued run, or kept pending.

These are not calls of their own: activate, send (inbox triggers), the engine's firings and
the end of a run all wake sessions through them, inside their own transaction.
"""

from __future__ import annotations

import json
from typing import Any

from ..model.calls import Call
from ..model.states import State
from ..store import Row, Tx, rows

#: Causes a queued session remembers; older ones are dropped as newer ones arrive.
MAX_CAUSES = 20


async def queue(tx: Tx, row: Row, causes: list[dict[str, Any]]) -> None:
    """Make the session ready with these causes; one already ready keeps its place."""
    before = json.loads(row["causes"]) if row["causes"] else []
    queued_at = row["queued_at"] if row["state"] == State.READY and row["queued_at"] else tx.now
    await rows.update_session(tx, row["id"], state=State.READY.value, queued_at=queued_at,
                              causes=json.dumps([*before, *causes][-MAX_CAUSES:]))


async def wake(tx: Tx, row: Row, trig: Row, cause: dict[str, Any]) -> str:
    """Fire trigger ``trig`` of session ``row`` and journal it (actor ``trigger``).

    A sleeping session is queued; one already queued keeps its place and gains the cause; a
    running or suspended one keeps the cause on the trigger until its run ends or it is
    resumed, so it fires once then; so does a sleeping one whose failed runs hold it back
    (``not_before``) until the back-off is over. Terminated, unapproved or disarmed: nothing
    happens.
    """
    state = State(row["state"])
    cause = {"kind": trig["kind"], "trigger": trig["id"], **cause}
    if state is State.TERMINATED or not row["armed"] or not trig["armed"]:
        return "ignored"
    held = state is State.SLEEPING and row["not_before"] is not None and row["not_before"] > tx.now
    if state in (State.SLEEPING, State.READY) and not held:
        result = "queued" if state is State.SLEEPING else "coalesced"
        await queue(tx, row, [cause])
    else:
        pending = json.loads(trig["pending"]) if trig["pending"] else []
        await rows.set_pending(tx, trig["id"], [*pending, cause][-MAX_CAUSES:])
        result = "pending"
    await rows.fired(tx, trig["id"])
    await tx.touch(row["id"])
    tx.follow("trigger", Call.WAKE, row["id"], {"trigger": trig["id"], "kind": trig["kind"]},
              {"result": result, "cause": cause})
    return result


async def release_pending(tx: Tx, sid: int) -> None:
    """Deliver causes kept while the session ran or was suspended (and a sleeping session's
    own restart), if it is idle now; a session still running (resumed with its step), or held
    back after failed runs, keeps them for later."""
    row = await rows.session(tx, sid)
    if row["state"] not in (State.SLEEPING, State.READY):
        return
    if row["not_before"] is not None and row["not_before"] > tx.now:
        return
    causes = await rows.take_pending(tx, sid)
    if causes or row["causes"] and row["state"] == State.SLEEPING:  # its own: a restart held back after a failure
        await queue(tx, row, causes)
