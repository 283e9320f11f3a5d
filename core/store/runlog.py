"""The questions the calls ask of runs once they are written (``rows``' runs part writes
them): which are live, which ran, and what their steps printed (``run_output``)."""

from __future__ import annotations

from typing import Any

from .base import Row, Tx


async def live(tx: Tx, sid: int) -> bool:
    """Whether a run of ``sid`` has not ended."""
    return bool(await tx.value("SELECT 1 FROM runs WHERE session_id = ? AND ended IS NULL", (sid,)))


async def live_counts(tx: Tx) -> tuple[int, int]:
    """How many runs have not ended: of sessions running, and of the others (what a monitor
    calls frozen)."""
    running = int(await tx.value("SELECT count(*) FROM runs r JOIN sessions s ON s.id = r.session_id"
                                 " WHERE r.ended IS NULL AND s.state = 'running'"))
    return running, int(await tx.value("SELECT count(*) FROM runs WHERE ended IS NULL")) - running


async def run_of(tx: Tx, sid: int, run: int | None) -> Row | None:
    """Run ``run`` of ``sid`` (None: its last)."""
    if run is None:
        return await tx.one("SELECT * FROM runs WHERE session_id = ? ORDER BY id DESC LIMIT 1", (sid,))
    return await tx.one("SELECT * FROM runs WHERE session_id = ? AND id = ?", (sid, run))


async def output(tx: Tx, run: int, after: int, last: int | None) -> list[tuple[Any, ...]]:
    """``(id, stream, ts, data)`` of what a run's step printed after log row ``after``, oldest
    first (only the ``last`` rows, when given: a page's tail costs that, whatever the run
    printed)."""
    chunks = await tx.tuples("SELECT id, stream, ts, data FROM run_output WHERE run_id = ? AND id > ?"
                             " ORDER BY id" + (" DESC LIMIT ?" if last is not None else ""),
                             (run, after, *(() if last is None else (last,))))
    return chunks if last is None else chunks[::-1]


async def newest(tx: Tx, limit: int, sid: int | None = None) -> list[Row]:
    """The newest ``limit`` runs (of session ``sid``, when given), oldest first."""
    if sid is None:
        found = await tx.all("SELECT * FROM runs ORDER BY id DESC LIMIT ?", (limit,))
    else:
        found = await tx.all("SELECT * FROM runs WHERE session_id = ? ORDER BY id DESC LIMIT ?", (sid, limit))
    return found[::-1]


async def ended_after(tx: Tx, after: float, limit: int) -> list[Row]:
    """The runs of any session that ended after ``after``, newest first, at most ``limit``
    (found by the index of their ends, whatever the runs)."""
    return await tx.all("SELECT * FROM runs WHERE ended > ? ORDER BY ended DESC LIMIT ?", (after, limit))


async def ended_by(tx: Tx, engine: str, since: float, limit: int) -> list[Row]:
    """The runs engine ``engine`` (its lease's token) ran that ended at ``since`` or later,
    oldest end first, at most ``limit`` (found by the index of their ends)."""
    return await tx.all("SELECT * FROM runs WHERE ended >= ? AND engine = ? ORDER BY ended, id LIMIT ?",
                        (since, engine, limit))


async def before(tx: Tx, sid: int, when: float) -> int | None:
    """Session ``sid``'s last run started at ``when`` or before (what a fork made then, or a
    merge, follows from)."""
    found = await tx.value("SELECT max(id) FROM runs WHERE session_id = ? AND started <= ?", (sid, when))
    return None if found is None else int(found)


async def previous(tx: Tx, sid: int, run: int) -> Row | None:
    """The run of ``sid`` before ``run``."""
    return await tx.one("SELECT * FROM runs WHERE session_id = ? AND id < ? ORDER BY id DESC LIMIT 1", (sid, run))
