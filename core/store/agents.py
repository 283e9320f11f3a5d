"""The questions the calls ask of agents (the ``agents`` table) and of the references agent
sessions keep to their CLI's own sessions (``sessions.agent_ref``)."""

from __future__ import annotations

from typing import Any, Final

from .base import Tx

#: The CLI's session ids (``agent``) the sessions (``sid``) stand for: each one's own (a fork
#: waiting for its first run holds its parent's reference, to fork it: not counted), and those
#: it held before it migrated to another CLI (``was``). Parameters: the CLI, twice.
HELD: Final = (
    "SELECT json_extract(agent_ref, '$.id') AS agent, id AS sid FROM sessions WHERE agent_ref IS NOT NULL"
    " AND json_extract(agent_ref, '$.cli') = ? AND json_extract(agent_ref, '$.fork') IS NULL"
    " UNION ALL SELECT json_extract(w.value, '$.id'), s.id FROM sessions s, json_each(s.agent_ref, '$.was') w"
    " WHERE s.agent_ref IS NOT NULL AND json_extract(w.value, '$.cli') = ?"
)
#: The sessions an agent CLI holds, not ended and not running a step here: found in their own
#: index (a monitor asks every 3 s; the other sessions are not read).
AGENT_REFS: Final = ("SELECT id, agent_ref FROM sessions WHERE agent_ref IS NOT NULL"
                     " AND state NOT IN ('terminated', 'running')")


async def holder(tx: Tx, cli: str, ident: str, *, besides: int | None = None) -> int | None:
    """The first session that stands for the CLI's session ``ident`` (``HELD``), but ``besides``
    (a session that moves: it is the one that holds it)."""
    found = await tx.value(f"SELECT MIN(sid) FROM ({HELD}) AS held WHERE agent = ? AND sid <> ?",
                           (cli, cli, ident, -1 if besides is None else besides))
    return int(found) if found is not None else None


async def holders(tx: Tx, cli: str) -> dict[str, int]:
    """Every session id of ``cli`` a session holds, or held before a migrate -> the first
    session holding it."""
    found = await tx.tuples(f"SELECT agent, MIN(sid) FROM ({HELD}) AS held GROUP BY agent", (cli, cli))
    return {str(ident): int(sid) for ident, sid in found}


async def agent_refs(tx: Tx) -> list[tuple[Any, ...]]:
    """``(sid, agent_ref)`` of the sessions ``AGENT_REFS`` finds."""
    return await tx.tuples(AGENT_REFS)


async def agent_sessions(tx: Tx, agent: str) -> set[int]:
    """The sessions of the agent named ``agent``."""
    return {sid for (sid,) in await tx.tuples(
        "SELECT s.id FROM sessions s JOIN agents a ON a.id = s.agent_id WHERE a.name = ?", (agent,))}


async def agent_quiet(tx: Tx, agent: int) -> bool:
    """Whether the agent's sessions send no notifications."""
    return bool(await tx.value("SELECT quiet FROM agents WHERE id = ?", (agent,)))


async def set_agent_quiet(tx: Tx, agent: int, quiet: bool) -> None:
    await tx.execute("UPDATE agents SET quiet = ? WHERE id = ?", (int(quiet), agent))
