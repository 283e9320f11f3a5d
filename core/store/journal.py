"""The journal read back (``Tx.journal`` writes each call's row): where it ends, what faces
and a person are told of, and what agents waiting on another session look for."""

from __future__ import annotations

from collections.abc import Sequence

from .base import Row, Tx

#: The journal rows of what the engine did by itself that faces tell (``told``).
TOLD = ("actor = 'engine' AND (call = 'notify' OR call = 'activate' AND json_extract(args, '$.why') = 'restart')")


async def tip(tx: Tx) -> int:
    """The journal's last row (0: none yet)."""
    return int(await tx.value("SELECT COALESCE(MAX(id), 0) FROM journal"))


async def told(tx: Tx, upto: int, after: int | None, looked: int) -> list[Row]:
    """The rows of ``TOLD``, oldest first: after row ``after`` up to row ``upto``; or (None)
    since the engines running now started, among the last ``looked`` rows before ``upto``
    (none while no engine runs)."""
    if after is not None:
        return await tx.all(f"SELECT * FROM journal WHERE id > ? AND id <= ? AND {TOLD} ORDER BY id", (after, upto))
    started = await tx.value("SELECT min(started) FROM engines")
    if started is None:
        return []
    return await tx.all(f"SELECT * FROM journal WHERE id > ? AND ts >= ? AND {TOLD} ORDER BY id",
                        (upto - looked, started))


async def newest(tx: Tx, limit: int, sid: int | None = None) -> list[Row]:
    """The newest ``limit`` rows (of session ``sid``, or naming it as their other session,
    when given), oldest first."""
    if sid is None:
        found = await tx.all("SELECT * FROM journal ORDER BY id DESC LIMIT ?", (limit,))
    else:
        found = await tx.all(
            "SELECT * FROM (SELECT * FROM journal WHERE session_id = ? ORDER BY id DESC LIMIT ?) AS own"
            " UNION SELECT * FROM (SELECT * FROM journal WHERE other_id = ? ORDER BY id DESC LIMIT ?) AS other"
            " ORDER BY id DESC LIMIT ?",
            (sid, limit, sid, limit, limit),
        )
    return found[::-1]


async def wakes_since(tx: Tx, since: float) -> int:
    """How many times a trigger woke a session after ``since``."""
    return int(await tx.value("SELECT count(*) FROM journal WHERE call = 'wake' AND ts > ?", (since,)))


async def spawned_as(tx: Tx, sid: int) -> list[int]:
    """The session ``sid`` was spawned as (the spawn's other session), if it was."""
    return [v for (v,) in await tx.tuples(
        "SELECT other_id FROM journal WHERE session_id = ? AND call = 'spawn' AND other_id IS NOT NULL", (sid,))]


async def written_at(tx: Tx, row: int) -> float | None:
    """When journal row ``row`` was written."""
    when = await tx.value("SELECT ts FROM journal WHERE id = ?", (row,))
    return None if when is None else float(when)


async def finished_run(tx: Tx, sid: int, after: int) -> Row | None:
    """The first run of ``sid`` to finish after journal row ``after``: its row, and the
    finish's journal row (``journal_row``)."""
    return await tx.one("SELECT r.*, j.id AS journal_row FROM journal j"
                        " JOIN runs r ON r.id = CAST(json_extract(j.args, '$.run') AS INTEGER)"
                        " WHERE j.session_id = ? AND j.call = 'finish' AND j.id > ? ORDER BY j.id LIMIT 1",
                        (sid, after))


async def first_send(tx: Tx, sid: int, after: int) -> int | None:
    """The journal row of the first message sent to ``sid`` after journal row ``after``."""
    found = await tx.value(
        "SELECT id FROM journal WHERE session_id = ? AND call = 'send' AND id > ? ORDER BY id LIMIT 1", (sid, after))
    return None if found is None else int(found)


async def notable(tx: Tx, after: int) -> list[Row]:
    """The rows after ``after`` a notification may be sent for (a request asked, a run finished,
    a session suspended, a budget's warning), with their session's name, its agent's, and
    whether either is set quiet."""
    return await tx.all(
        "SELECT j.id, j.call, j.actor, j.session_id, j.args, j.outcome, s.name, a.name AS agent,"
        " s.quiet OR a.quiet AS quiet"
        " FROM journal j JOIN sessions s ON s.id = j.session_id JOIN agents a ON a.id = s.agent_id"
        " WHERE j.id > ? AND j.call IN ('ask', 'finish', 'suspend', 'limit') ORDER BY j.id", (after,))


async def answerers(tx: Tx, sid: int, times: Sequence[float]) -> dict[float, str]:
    """Who answered session ``sid``'s requests at each of ``times`` (an ``allow`` or ``deny``
    journals at its transaction's time, which its answer is stamped with too)."""
    if not times:
        return {}
    found = await tx.tuples("SELECT ts, who FROM journal WHERE session_id = ? AND call IN ('allow', 'deny')"
                            f" AND ts IN ({', '.join('?' * len(times))})", (sid, *times))
    return {float(ts): who for ts, who in found}


async def merged_into(tx: Tx, sid: int, after: float, upto: float) -> list[tuple[int, float]]:
    """``(source, when)`` of the sessions merged into ``sid`` between two times."""
    return [(int(r[0]), float(r[1])) for r in await tx.tuples(
        "SELECT other_id, ts FROM journal WHERE session_id = ? AND call = 'merge' AND ts > ? AND ts <= ?"
        " AND other_id IS NOT NULL ORDER BY id", (sid, after, upto))]
