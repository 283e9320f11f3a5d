"""A fork chain deeper than any SQLite limit: every call, and what the monitor reads and draws.

The chain is 600 segments (each level forked at its parent's end and given one message),
above SQLite's 500 terms of a compound SELECT; the monitor's tree is drawn at 1,200 levels,
above Python's default recursion limit for a recursive walk.
"""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from pathlib import Path

from conftest import Cli, Clock
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from procession import Workspace
from procession.model.records import SessionInfo
from procession.model.states import State
from procession.tui.view import LEVELS, View, ViewSpec

DEPTH = 600


async def deep_chain(db: Path, depth: int = DEPTH) -> int:
    """A workspace whose session ``depth + 1`` ends a chain of ``depth`` forks; its history is
    ``m0 .. m{depth}``, message ``i + 1`` written by level ``i + 1``. The levels are written as
    rows (what ``depth`` forks and sends leave behind), so that the test is fast."""
    ws = await Workspace.open(db, clock=Clock())
    root = (await ws.spawn("root", "a")).sid
    await ws.send(root, "m0")
    await ws.close()
    con = sqlite3.connect(db)
    try:
        cols = [r[1] for r in con.execute("PRAGMA table_info(sessions)") if r[1] != "id"]
        fixed = {"uuid", "name", "parent_id", "fork_seq", "length", "history_tokens", "context_tokens",
                 "context_count", "base_memory", "base_at"}
        kept = [c for c in cols if c not in fixed]
        tokens = con.execute("SELECT tokens FROM messages WHERE session_id = ?", (root,)).fetchone()[0]
        with con:
            for level in range(1, depth + 1):
                sid, length = root + level, level + 1
                con.execute(
                    f"INSERT INTO sessions (id, {', '.join(kept)}, uuid, name, parent_id, fork_seq, length,"
                    " history_tokens, context_tokens, context_count, base_memory, base_at)"
                    f" SELECT ?, {', '.join(kept)}, ?, ?, ?, ?, ?, ?, system_tokens + ?, ?, '{{}}', created"
                    " FROM sessions WHERE id = ?",
                    (sid, str(uuid.uuid4()), f"root #{level + 1}", sid - 1, level, length, length * tokens,
                     length * tokens, length, root))
                con.execute("INSERT INTO messages (session_id, seq, role, content, tokens, cum_tokens, author,"
                            " created) VALUES (?, ?, 'user', ?, ?, ?, 'user', 0)",
                            (sid, length, f"m{level}", tokens, length * tokens))
    finally:
        con.close()
    return root + depth


async def test_every_call_reads_a_600_segment_lineage(db: Path, tmp_path: Path) -> None:
    leaf = await deep_chain(db)
    expected = [f"m{i}" for i in range(DEPTH + 1)]
    ws = await Workspace.open(db, clock=Clock())
    try:
        assert [m.content for m in await ws.history(leaf)] == expected
        assert [m.content for m in await ws.history(leaf, 550, 560)] == expected[550:560]
        assert [i.content for i in (await ws.show(leaf)).context] == expected
        assert [i.content for i in await ws.context(leaf)] == expected
        curve = await ws.context_curve(leaf)  # the monitor's detail reads these too
        assert curve == sorted(curve) and curve[-1] == (await ws.info(leaf)).context_tokens
        await ws.runs(leaf)
        await ws.journal(leaf)

        folded = await ws.compress(leaf, keep_last=8)
        assert folded.fold.archived_count == DEPTH + 1 - 8
        assert [i.content for i in await ws.context(leaf)][1:] == expected[-8:]
        await ws.expand(leaf)
        assert [i.content for i in await ws.context(leaf)] == expected

        saved = await ws.save(leaf, file=str(tmp_path / "deep.json"))
        assert saved.messages == DEPTH + 1
        loaded = await ws.load(str(tmp_path / "deep.json"))
        assert [m.content for m in await ws.history(loaded.sid)] == expected

        child = await ws.fork(leaf)
        await ws.send(child.sid, "after")
        assert [m.content for m in await ws.history(child.sid)] == [*expected, "after"]
        merged = await ws.merge(child.sid, 1)
        assert [m.content for m in await ws.history(1)] == [*expected, "after"]
        assert merged.sid == 1
    finally:
        await ws.close()


async def test_the_cli_reads_a_600_segment_lineage(db: Path, tmp_path: Path) -> None:
    leaf = await deep_chain(db)
    cli = Cli(db, tmp_path)
    lines = cli("history", str(leaf)).stdout.splitlines()
    assert len(lines) == DEPTH + 1 and lines[-1].endswith(f"m{DEPTH}")
    assert len(cli.json("show", str(leaf))["context"]) == DEPTH + 1  # type: ignore[index]
    cli("save", str(leaf), "-o", str(tmp_path / "deep.json"))


def test_the_tree_view_draws_a_1200_level_fork_chain() -> None:
    depth = 1200
    sessions = {
        sid: SessionInfo(sid, f"u{sid}", f"s{sid}", "a", "", State.SLEEPING, None, 0, sid - 1 if sid > 1 else None,
                         0, None, "builtin:digest", 1000, sid, 0, 0, 0.0, float(sid), True, None, "/", 1)
        for sid in range(1, depth + 1)
    }
    view = View(ViewSpec(sort="sid", tree=True))
    view.rebuild(sessions)
    assert view.keys == ["agent:a", *range(1, depth + 1)]
    assert view.prefixes.get(depth) == "… " + "   " * (LEVELS - 1) + "└─ "  # the last levels, and above them …
    assert view.prefixes.get(LEVELS) == "   " * (LEVELS - 1) + "└─ "  # no deeper than it draws: all of it


def _reference(con: sqlite3.Connection, sid: int, lo: int, hi: int) -> list[int]:
    """Positions ``lo < seq <= hi`` of ``sid``'s history, walked by hand: each session owns the
    positions after its fork point up to where the history below it has gone (no further
    than the fork below, nor than the end of the part below)."""
    upto, found, parts = hi, sid, []
    while found is not None:
        parent, fork_seq, length = con.execute("SELECT parent_id, fork_seq, length FROM sessions WHERE id = ?",
                                               (found,)).fetchone()
        upto = min(upto, length)
        parts.append((found, fork_seq, upto))
        upto = min(upto, fork_seq)
        found = parent if upto > 0 else None
    return [seq for session, first, last in reversed(parts) for (seq,) in con.execute(
        "SELECT seq FROM messages WHERE session_id = ? AND seq > ? AND seq <= ? ORDER BY seq",
        (session, max(first, lo), last))]


@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 100), st.integers(0, 3)), min_size=1, max_size=25),
       st.integers(0, 12), st.integers(0, 14))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_read_is_one_statement_and_gives_what_walking_the_forks_by_hand_gives(tmp_path, steps, lo, width):
    """Forks of forks at any point (before what the parent's own fork point holds, at it, after
    it), with messages between: every session's history, whole and in a range, is the
    positions the forks give, in order."""
    db = tmp_path / f"{uuid.uuid4().hex}.db"

    async def build() -> list[int]:
        async with await Workspace.open(db) as ws:
            sids = [(await ws.spawn("root", "a")).sid]
            for pick, at, sends in steps:
                parent = sids[pick % len(sids)]
                length = (await ws.info(parent)).messages
                child = (await ws.fork(parent, at=at % (length + 1))).sid
                for i in range(sends):
                    await ws.send(child, f"{child}.{i}")
                await ws.send(parent, "more")
                sids.append(child)
            return sids

    async def check(sids: list[int]) -> None:
        con = sqlite3.connect(db)
        try:
            async with await Workspace.open(db) as ws:
                for sid in sids:
                    hi = lo + width
                    assert [m.seq for m in await ws.history(sid)] == _reference(con, sid, 0, 2**62)
                    assert [m.seq for m in await ws.history(sid, lo, hi)] == _reference(con, sid, lo, hi)
        finally:
            con.close()

    asyncio.run(check(asyncio.run(build())))
