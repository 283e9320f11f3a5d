"""What is read back of the journal (``Tx.journal`` writes it): where it ends, and what happened
after a row that a person is told of."""

from __future__ import annotations

from .base import Row, Tx


async def tip(tx: Tx) -> int:
    """The newest journal row's id (0 for none): a reader that starts here sees only what
    happens from now on."""
    return int(await tx.value("SELECT COALESCE(MAX(id), 0) FROM journal"))


async def notable(tx: Tx, after: int) -> list[Row]:
    """The rows after ``after`` a notification may be sent for (a request asked, a run finished,
    a session suspended, a budget's warning), with their session's name, its agent's, and
    whether either is set quiet."""
    return await tx.all(
        "SELECT j.id, j.call, j.actor, j.session_id, j.args, j.outcome, s.name, a.name AS agent,"
        " s.quiet OR a.quiet AS quiet"
        " FROM journal j JOIN sessions s ON s.id = j.session_id JOIN agents a ON a.id = s.agent_id"
        " WHERE j.id > ? AND j.call IN ('ask', 'finish', 'suspend', 'limit') ORDER BY j.id", (after,))
