"""Triggers as the engine reads them to decide which fire, and what they remember between
firings (``set_trigger_state``); a call's own trigger rows are ``rows``'."""

from __future__ import annotations

import json
from typing import Any

from .base import Row, Tx, said


async def trigger(tx: Tx, trigger: int) -> Row | None:
    """A trigger's row, while it is there (its session may have deleted it since it was read)."""
    return await tx.one("SELECT * FROM triggers WHERE id = ?", (trigger,))


async def after(tx: Tx, sid: int) -> list[Row]:
    """The ``after`` triggers waiting on session ``sid``'s runs."""
    return await tx.all(said(tx, _AFTER), (sid,))


#: The ``after`` triggers naming a session (its id a JSON number, compared as text there).
_AFTER = {"sqlite": "SELECT * FROM triggers WHERE kind = 'after' AND json_extract(spec, '$.session') = ?",
          "postgresql": "SELECT * FROM triggers WHERE kind = 'after' AND (spec::jsonb ->> 'session') = CAST(? AS TEXT)"}


async def changed(tx: Tx, since: int, host: str) -> list[Row]:
    """The triggers that may fire (armed, of approved sessions that have not ended) of ``host``'s
    sessions changed after revision ``since``: a trigger's change always stamps its session."""
    return await tx.all(
        "SELECT t.id, t.session_id, t.kind, t.spec, t.created, t.last_fired, t.state FROM triggers t"
        " JOIN sessions s ON s.id = t.session_id"
        " WHERE s.rev > ? AND s.host = ? AND t.armed = 1 AND s.armed = 1 AND s.state != 'terminated'"
        " ORDER BY t.id", (since, host),
    )


async def live_commit(tx: Tx, trigger: int) -> Row | None:
    """A commit trigger's spec and state, while it may fire (armed, of an approved session that
    has not ended)."""
    return await tx.one("SELECT t.spec, t.state FROM triggers t JOIN sessions s ON s.id = t.session_id"
                        " WHERE t.id = ? AND t.kind = 'commit' AND t.armed = 1 AND s.armed = 1"
                        " AND s.state != 'terminated'", (trigger,))


async def set_trigger_state(tx: Tx, trigger: int, state: dict[str, Any]) -> None:
    await tx.execute("UPDATE triggers SET state = ? WHERE id = ?", (json.dumps(state), trigger))
