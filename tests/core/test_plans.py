"""The query plans that keep costs flat: what a tick, a fork or a look outside reads is found in
an index, never by walking every session (the figures are bench/flat.py's and bench/monitor.py's)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from procession import Workspace
from procession.store import agents, sessions


def plan(db: Path, sql: str, params: tuple[object, ...]) -> str:
    con = sqlite3.connect(db)
    try:
        return " | ".join(row[3] for row in con.execute(f"EXPLAIN QUERY PLAN {sql}", params))
    finally:
        con.close()


async def test_a_tick_reads_the_changed_sessions_through_the_revision_index(tmp_path: Path) -> None:
    db = tmp_path / "ws.db"
    async with await Workspace.open(db) as ws:
        for i in range(20):
            await ws.spawn(f"s{i}", "a")
    for sql in sessions.CHANGED_SQL:
        found = plan(db, sql, (5, 0, -1))
        assert "sessions_rev" in found, found
        assert "SCAN s " not in found + " " and "SCAN sessions" not in found, found
    # the first read, every session a page at a time, goes in SID order (a page costs a page)
    assert "SEARCH s USING INTEGER PRIMARY KEY" in plan(db, sessions.LOAD_SQL[0], (0, 0, 100))


async def test_a_fork_finds_its_name_and_a_monitor_the_agents_sessions_in_an_index(tmp_path: Path) -> None:
    db = tmp_path / "ws.db"
    async with await Workspace.open(db) as ws:
        await ws.spawn("review", "a")
    names = plan(db, "SELECT count(*) FROM sessions WHERE agent_id = ? AND name >= ? AND name < ?",
                 (1, "review #", "review $"))
    assert "INDEX sessions_name" in names, names
    assert "INDEX sessions_agent_ref" in plan(db, agents.AGENT_REFS, ())
