"""The workspace file: created safely, opened safely, never damaged by a refusal."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from procession import ProcessionError, Workspace, WorkspaceError
from procession.store import schema

TABLES = {"meta", "agents", "sessions", "messages", "folds", "memory", "resources", "triggers", "checkpoints",
          "runs", "journal", "engines"}


def files_of(path: Path) -> dict[str, bytes]:
    """The workspace file and any SQLite side files next to it, byte for byte."""
    return {p.name: p.read_bytes() for p in path.parent.iterdir() if p.name.startswith(path.name)}


async def expect_refused(path: Path) -> None:
    """Opening ``path`` must raise ``WorkspaceError`` (and a wrongly opened one is closed)."""
    try:
        ws = await Workspace.open(path)
    except WorkspaceError:
        return
    await ws.close()
    pytest.fail(f"{path.name} was opened as a workspace")


async def make_workspace(path: Path) -> None:
    ws = await Workspace.open(path)
    sid = (await ws.spawn("a", "hr")).sid
    await ws.send(sid, "hello")
    await ws.close()


async def test_new_workspace_file_is_private_wal_and_current(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "ws.db"
    ws = await Workspace.open(path)
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        con = sqlite3.connect(path)
        try:
            assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert con.execute("PRAGMA user_version").fetchone()[0] == schema.VERSION
            names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            assert TABLES <= names
            meta = dict(con.execute("SELECT key, value FROM meta"))
            assert {"uuid", "created", "tokenizer", "rev"} <= set(meta)
            assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        finally:
            con.close()
        # foreign keys are enforced on the engine's connection
        async with ws.store.snapshot() as tx:
            assert await tx.value("PRAGMA foreign_keys") == 1
    finally:
        await ws.close()
    # a folder it had to create is the owner's only, too
    assert stat.S_IMODE((tmp_path / "deep" / "er").stat().st_mode) & 0o077 == 0


async def test_reopening_keeps_everything(tmp_path: Path) -> None:
    path = tmp_path / "ws.db"
    await make_workspace(path)
    ws = await Workspace.open(path)
    try:
        assert [m.content for m in await ws.history(1)] == ["hello"]
        assert len(await ws.journal()) == 2
    finally:
        await ws.close()


async def test_newer_schema_is_refused_and_the_file_is_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "ws.db"
    await make_workspace(path)
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA user_version = {schema.VERSION + 1}")
    con.commit()
    con.close()
    before = path.read_bytes()
    with pytest.raises(WorkspaceError) as info:
        await Workspace.open(path)
    assert "newer" in str(info.value) and "\n" not in str(info.value)
    assert path.read_bytes() == before
    con = sqlite3.connect(path)
    try:
        assert con.execute("PRAGMA user_version").fetchone()[0] == schema.VERSION + 1
    finally:
        con.close()


@pytest.mark.parametrize(
    "content",
    [b"just some notes\n", b"\x00" * 4096, b"SQLite format 2\x00" + b"\x00" * 100, b'{"json": true}'],
    ids=["text", "zeros", "near-magic", "json"],
)
async def test_non_sqlite_file_is_refused_unchanged(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(content)
    with pytest.raises(WorkspaceError) as info:
        await Workspace.open(path)
    assert "not" in str(info.value) and "\n" not in str(info.value)
    assert files_of(path) == {"notes.txt": content}


async def test_damaged_sqlite_file_is_refused_with_a_workspace_error(tmp_path: Path) -> None:
    path = tmp_path / "ws.db"
    content = b"SQLite format 3\x00" + os.urandom(8192)
    path.write_bytes(content)
    with pytest.raises(WorkspaceError):
        await Workspace.open(path)
    assert path.read_bytes() == content


async def test_foreign_sqlite_database_is_refused_unchanged(tmp_path: Path) -> None:
    """Pointing --db at another program's SQLite file must not add tables to it."""
    path = tmp_path / "other-app.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE bookmarks (url TEXT)")
    con.execute("INSERT INTO bookmarks VALUES ('https://example.org')")
    con.commit()
    con.close()
    before = path.read_bytes()
    await expect_refused(path)
    assert path.read_bytes() == before


async def test_foreign_sqlite_database_with_a_clashing_table_is_a_workspace_error(tmp_path: Path) -> None:
    path = tmp_path / "other-app.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE meta (k TEXT)")
    con.commit()
    con.close()
    await expect_refused(path)


async def test_missing_file_without_create_is_refused_and_not_made(tmp_path: Path) -> None:
    path = tmp_path / "absent.db"
    with pytest.raises(WorkspaceError):
        await Workspace.open(path, create=False)
    assert list(tmp_path.iterdir()) == []


async def test_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError):
        await Workspace.open(tmp_path)


async def test_empty_file_becomes_a_workspace(tmp_path: Path) -> None:
    path = tmp_path / "ws.db"
    path.touch()
    ws = await Workspace.open(path)
    try:
        assert (await ws.spawn("a", "hr")).sid == 1
    finally:
        await ws.close()


async def test_older_schema_is_migrated(tmp_path: Path) -> None:
    """A file at user_version 0 (made by SQLite, nothing in it yet) gets every migration."""
    path = tmp_path / "ws.db"
    sqlite3.connect(path).close()
    ws = await Workspace.open(path)
    await ws.close()
    con = sqlite3.connect(path)
    try:
        assert con.execute("PRAGMA user_version").fetchone()[0] == schema.VERSION
    finally:
        con.close()


async def test_two_workspaces_on_one_file_see_each_other(tmp_path: Path) -> None:
    path = tmp_path / "ws.db"
    one = await Workspace.open(path)
    two = await Workspace.open(path, actor="tui")
    try:
        sid = (await one.spawn("a", "hr")).sid
        await two.send(sid, "from the other connection")
        assert [m.content for m in await one.history(sid)] == ["from the other connection"]
        assert [(e.actor, e.call) for e in await one.journal()] == [("cli", "spawn"), ("tui", "send")]
    finally:
        await one.close()
        await two.close()



async def test_a_cancelled_call_never_leaves_the_workspace_locked(tmp_path):
    """Cancel tasks at every point of a transaction (BEGIN in flight, body, COMMIT): the
    connection always ends outside a transaction and other processes can write at once."""
    import asyncio
    import sqlite3 as sync_sqlite

    from procession import Workspace

    ws = await Workspace.open(tmp_path / "ws.db")
    sid = (await ws.spawn("s", "a")).sid
    other = sync_sqlite.connect(tmp_path / "ws.db", timeout=0.05, isolation_level=None)
    cancelled = 0
    for i in range(200):
        task = asyncio.ensure_future(ws.send(sid, f"message {i}"))
        for _ in range(i % 7):
            await asyncio.sleep(0)
        if not task.done():
            task.cancel()
            cancelled += 1
        try:
            await task
        except asyncio.CancelledError:
            pass
        assert not ws.store.conn.in_transaction
        other.execute("BEGIN IMMEDIATE")  # raises "database is locked" if our connection kept the lock
        other.execute("ROLLBACK")
    other.close()
    history = await ws.history(sid)
    async with ws.store.snapshot() as tx:
        journaled = await tx.value("SELECT count(*) FROM journal WHERE call = 'send'")
    assert journaled == len(history) and cancelled > 50  # whole calls or none
    await ws.close()


async def test_a_workspace_of_the_first_schema_is_migrated_with_everything_in_it(tmp_path):
    """A workspace made by the first Procession (schema 1) opens in this one: its sessions,
    messages, triggers and runs are all there, references intact, and trigger ids go on from
    the highest one (none is ever given again)."""
    import sqlite3

    from procession import Workspace
    from procession.model import hosts
    from procession.store import schema

    path = tmp_path / "old.db"
    con = sqlite3.connect(path)
    con.executescript(schema.MIGRATIONS[0])
    con.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                    [("uuid", "u"), ("created", "1"), ("tokenizer", "bytes/4"), ("rev", "5")])
    con.execute("INSERT INTO agents (id, name, created) VALUES (1, 'hr', 1)")
    con.execute("INSERT INTO sessions (id, uuid, agent_id, name, state, runner, window, cwd, created, last_active,"
                " length, history_tokens, context_tokens, context_count, system, goal)"
                " VALUES (1, 'u1', 1, 'payroll', 'sleeping', 'builtin:digest', 1000, '/', 1, 1, 1, 7, 7, 1, 'sys', 'g')")
    con.execute("INSERT INTO messages (session_id, seq, role, content, tokens, cum_tokens, created)"
                " VALUES (1, 1, 'user', 'hello', 7, 7, 1)")
    con.execute("INSERT INTO triggers (id, session_id, kind, spec, created) VALUES (7, 1, 'inbox', '{}', 1)")
    con.execute("INSERT INTO runs (session_id, cause, started, ended, outcome) VALUES (1, '[]', 1, 2, 'failed')")
    con.execute("PRAGMA user_version = 1")
    con.commit()
    con.close()
    async with await Workspace.open(path) as ws:
        info = await ws.info(1)
        assert (info.name, info.goal, info.messages, info.last_outcome) == ("payroll", "g", 1, "failed")
        assert info.host == hosts.this() and not info.host_lost  # the machine its file is on
        assert [m.content for m in await ws.history(1)] == ["hello"]
        assert [(f.session, f.seq) for f in await ws.grep("hello")] == [(1, 1)]  # indexed as it was migrated
        assert (await ws.show(1)).system == "sys"
        await ws.trigger_remove(1, 7)
        assert (await ws.trigger_add(1, "inbox")).trigger.id == 8
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA user_version").fetchone()[0] == schema.VERSION
    assert con.execute("PRAGMA foreign_key_check").fetchall() == []
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()


async def test_a_database_bound_as_db_and_as_sqlite_becomes_one_sqlite_binding(tmp_path: Path) -> None:
    """``db`` and ``sqlite`` were two kinds for one thing (one file bound twice): a workspace of
    the schema before has them as one ``sqlite`` binding each; ``db`` is taken as ``sqlite``."""
    path = tmp_path / "ws.db"
    async with await Workspace.open(path) as ws:
        one = (await ws.spawn("a", "x", cwd=str(tmp_path))).sid
        two = (await ws.spawn("b", "x", cwd=str(tmp_path))).sid
    with sqlite3.connect(path) as conn:  # as the schema before this one left them
        conn.executemany("INSERT INTO resources (session_id, kind, uri, mode, created) VALUES (?, ?, ?, 'rw', 0)",
                         [(one, "db", "/x/a.db"), (one, "sqlite", "/x/a.db"), (two, "db", "/x/b.db")])
        # and without what came after it (11: permissions and requests; 12: quiet agents; 13: versions
        # of memory, names indexed; 14: hosts; 15: moves; 17: spawned sessions indexed; 18: devices; 19: answer tokens,
        # runs by end; 20: the search index)
        conn.executescript("DROP TABLE messages_search; DROP TABLE answer_tokens; DROP INDEX runs_ended; DROP TABLE devices; DROP TABLE pairings; DROP INDEX sessions_spawned_by; DROP TABLE moves; DROP INDEX sessions_host; ALTER TABLE sessions DROP COLUMN host; DROP TABLE engines;"
                           " ALTER TABLE journal DROP COLUMN who;"
                           " CREATE TABLE lease (id INTEGER PRIMARY KEY CHECK (id = 1), token TEXT NOT NULL, pid INTEGER"
                           " NOT NULL, host TEXT NOT NULL, started REAL NOT NULL, heartbeat REAL NOT NULL, slots INTEGER"
                           " NOT NULL, proc_start REAL);"
                           " DROP INDEX sessions_name; DROP INDEX sessions_agent_ref; DROP INDEX sessions_memory_from;"
                           " ALTER TABLE sessions DROP COLUMN memory_rev;"
                           " CREATE INDEX sessions_memory_from ON sessions(memory_from) WHERE memory_from IS NOT NULL;"
                           " DROP TABLE memory; CREATE TABLE memory (session_id INTEGER NOT NULL, key TEXT NOT NULL,"
                           " value TEXT NOT NULL, updated REAL NOT NULL, gone INTEGER NOT NULL DEFAULT 0,"
                           " PRIMARY KEY (session_id, key)) WITHOUT ROWID;"
                           " ALTER TABLE sessions DROP COLUMN permissions; ALTER TABLE sessions DROP COLUMN restart;"
                           " ALTER TABLE sessions DROP COLUMN quiet; ALTER TABLE runs DROP COLUMN cost;"
                           " ALTER TABLE agents DROP COLUMN quiet;"
                           " DROP TABLE rules; DROP TABLE requests; DROP TABLE limits; PRAGMA user_version = 9")
    async with await Workspace.open(path) as ws:
        assert [(r.kind, r.uri) for r in (await ws.show(one)).resources] == [("sqlite", "/x/a.db")]
        assert [(r.kind, r.uri) for r in (await ws.show(two)).resources] == [("sqlite", "/x/b.db")]
        assert (await ws.bind(one, "db", str(tmp_path / "c.db"))).resource.kind == "sqlite"
        with pytest.raises(ProcessionError, match="already"):
            await ws.bind(one, "sqlite", str(tmp_path / "c.db"))


async def test_forks_made_before_memory_had_versions_read_and_merge_as_they_did(tmp_path):
    """A workspace of schema 12, where a parent's change was copied into its fork (and kept as
    the fork's merge base), opens with versioned memory: the fork reads what it read, a change
    the parent makes now stays out of it, and a merge takes only the fork's own changes."""
    from procession import Workspace
    from procession.store import schema

    path = tmp_path / "v12.db"
    con = sqlite3.connect(path)
    for script in schema.MIGRATIONS[:12]:
        con.executescript(script)
    con.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                    [("uuid", "u"), ("created", "1"), ("tokenizer", "bytes/4"), ("rev", "9")])
    con.execute("INSERT INTO agents (id, name, created) VALUES (1, 'hr', 1)")
    for sid, parent in ((1, None), (2, 1)):
        con.execute("INSERT INTO sessions (id, uuid, agent_id, name, state, runner, window, cwd, created, last_active,"
                    " parent_id, fork_seq, memory_from, armed) VALUES (?, ?, 1, ?, 'sleeping', 'builtin:digest', 1000,"
                    " '/', 1, 1, ?, 0, ?, 1)", (sid, f"u{sid}", f"s{sid}", parent, parent))
    # the parent had k=1 and j=2 at the fork, then set k=10: schema 12 copied k=1 into the fork
    con.executemany("INSERT INTO memory (session_id, key, value, updated) VALUES (?, ?, ?, 1)",
                    [(1, "k", "10"), (1, "j", "2"), (2, "k", "1")])
    con.execute("INSERT INTO memory_base (session_id, key, value) VALUES (2, 'k', '1')")
    con.execute("PRAGMA user_version = 12")
    con.commit()
    con.close()
    async with await Workspace.open(path) as ws:
        assert (await ws.show(2)).memory == {"k": 1, "j": 2}
        await ws.memory_set(1, "j", 20)
        assert (await ws.show(2)).memory == {"k": 1, "j": 2}
        await ws.memory_set(2, "n", "fork's")
        merged = await ws.merge(2, 1)
        assert set(merged.memory_changed) == {"n"}
        assert (await ws.show(1)).memory == {"k": 10, "j": 20, "n": "fork's"}
