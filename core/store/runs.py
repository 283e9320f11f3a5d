"""Runs: a step's run started, recorded as it goes, logged, ended."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from .base import Tx


async def insert_run(tx: Tx, sid: int, causes: list[dict[str, Any]], pid: int | None, proc_start: float | None,
                     engine: str, tracker: str | None = None) -> int:
    return await tx.insert(
        "INSERT INTO runs (session_id, cause, started, pid, proc_start, engine, tracker) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (sid, json.dumps(causes), tx.now, pid, proc_start, engine, tracker),
    )


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
