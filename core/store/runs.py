"""Runs: a step's run started, recorded as it launches and as it goes, logged, ended; and the
runs a dead engine left (``orphans``)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from .base import Row, Tx


async def insert_run(tx: Tx, sid: int, causes: list[dict[str, Any]], pid: int | None, proc_start: float | None,
                     engine: str, tracker: str | None = None) -> int:
    return await tx.insert(
        "INSERT INTO runs (session_id, cause, started, pid, proc_start, engine, tracker) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (sid, json.dumps(causes), tx.now, pid, proc_start, engine, tracker),
    )


async def record_prompt(tx: Tx, run: int, prompt_upto: int | None, confinement: str | None) -> None:
    """How far a claimed run's prompt went in the history, and the bounds it runs in."""
    await tx.execute("UPDATE runs SET prompt_upto = ?, confinement = ? WHERE id = ?", (prompt_upto, confinement, run))


async def launched(tx: Tx, sid: int, run: int, pid: int, proc_start: float | None) -> bool:
    """Record a claimed run's process; False when the run was over already (its process is not
    the run's)."""
    changed = await tx.execute("UPDATE runs SET pid = ?, proc_start = ? WHERE id = ? AND session_id = ?"
                               " AND ended IS NULL", (pid, proc_start, run, sid))
    return changed > 0


async def prompt_upto(tx: Tx, run: int) -> int | None:
    """The last message of the history a run's prompt held (None: it was not an agent's run)."""
    found = await tx.value("SELECT prompt_upto FROM runs WHERE id = ?", (run,))
    return None if found is None else int(found)


async def set_status(tx: Tx, run: int, status: str) -> None:
    """What a running step says it is doing, in a line."""
    await tx.execute("UPDATE runs SET status = ? WHERE id = ?", (status, run))


async def add_usage(tx: Tx, run: int, tokens_in: int, tokens_out: int, cache_read: int = 0,
                    cache_write: int = 0, cost: float = 0.0) -> None:
    await tx.execute("UPDATE runs SET tokens_in = tokens_in + ?, tokens_out = tokens_out + ?,"
                     " cache_read = cache_read + ?, cache_write = cache_write + ?,"
                     " cost = CASE WHEN ? > 0 THEN COALESCE(cost, 0) + ? ELSE cost END WHERE id = ?",
                     (tokens_in, tokens_out, cache_read, cache_write, cost, cost, run))


async def sample_runs(tx: Tx, stats: list[tuple[float, int, int]]) -> None:
    """CPU% and RSS of live runs, ``(cpu, rss, run)``; their sessions are stamped changed."""
    await tx.many("UPDATE runs SET cpu = ?, rss = ? WHERE id = ? AND ended IS NULL", stats)
    rev = await tx.rev()
    await tx.many("UPDATE sessions SET rev = ? WHERE id = (SELECT session_id FROM runs WHERE id = ?)",
                  [(rev, run) for _, _, run in stats])


async def log_output(tx: Tx, run: int, chunks: Iterable[tuple[str, float, str]]) -> list[int]:
    """Append ``(stream, time, text)`` chunks to a run's log; returns their row ids."""
    ids = []
    for stream, ts, text in chunks:
        ids.append(await tx.insert("INSERT INTO run_output (run_id, stream, ts, data) VALUES (?, ?, ?, ?)",
                                   (run, stream, ts, text)))
    return ids


async def drop_output(tx: Tx, run: int, upto: int, after: int) -> None:
    """Forget a run's log rows ``after < id <= upto`` (the middle of a flood; head and tail stay)."""
    await tx.execute("DELETE FROM run_output WHERE run_id = ? AND id > ? AND id <= ?", (run, after, upto))


async def end_run(tx: Tx, run: int, outcome: str, exit_code: int | None = None, error: str | None = None,
                  frozen_s: float = 0.0) -> None:
    await tx.execute(
        "UPDATE runs SET ended = ?, outcome = ?, exit_code = ?, error = ?, frozen_s = ?, cpu = NULL WHERE id = ?",
        (tx.now, outcome, exit_code, error, frozen_s, run),
    )


async def orphans(tx: Tx, host: str, token: str) -> list[Row]:
    """The live runs of ``host``'s sessions not started by the engine holding its lease
    (``token``): ``id, session_id, pid, proc_start, tracker``, oldest first."""
    return await tx.all("SELECT r.id, r.session_id, r.pid, r.proc_start, r.tracker FROM runs r"
                        " JOIN sessions s ON s.id = r.session_id"
                        " WHERE r.ended IS NULL AND s.host = ? AND (r.engine IS NULL OR r.engine != ?) ORDER BY r.id",
                        (host, token))
