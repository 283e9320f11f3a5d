"""The two stores: a workspace copied from SQLite into PostgreSQL and back, losing nothing; what
each store refuses, in one line, with nothing changed."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import HANG_S, Clock, engine_on, sql, until
from procession import InvalidArgument, Workspace, WorkspaceError
from procession.model.errors import StoreUnreachable
from procession.store import open_store
from procession.store import dialect, schema
from procession.store.dialect import translate


async def _populate(path: Path | str) -> int:
    """A workspace holding every kind of row: forks, folds, memory versions, triggers,
    checkpoints, resources, journal."""
    ws = await Workspace.open(path, clock=Clock())
    try:
        sid = (await ws.spawn("payroll", "hr", goal="pay", system="be exact")).sid
        for i in range(30):
            await ws.send(sid, f"message {i} " + "é" * i, role="user" if i % 2 else "assistant")
        await ws.memory_set(sid, "rate", {"x": 1.5})
        fork = (await ws.fork(sid)).sid
        await ws.memory_set(fork, "rate", 2)
        await ws.send(fork, "fork's own")
        await ws.compress(sid, keep_last=4, summary="the first messages, summed up")
        await ws.save(sid, "before")
        await ws.trigger_add(sid, "inbox")
        await ws.bind(sid, "folder", str(Path.cwd()))
        return sid
    finally:
        await ws.close()


async def _view(path: Path | str, sid: int) -> Any:
    ws = await Workspace.open(path, create=False)
    try:
        info = await ws.show(sid)
        return ([(m.seq, m.role, m.content, m.tokens) for m in await ws.history(sid)], info.memory,
                [(s.id, s.name, s.state, s.context_tokens) for s in await ws.ps(all=True)],
                [(e.id, e.ts, e.call, e.actor, e.session, e.args, e.outcome) for e in await ws.journal(limit=1000)])
    finally:
        await ws.close()


async def test_a_workspace_goes_to_postgresql_and_back_losing_nothing(cli, tmp_path, postgres) -> None:
    source = tmp_path / "laptop.db"
    sid = await _populate(source)
    url = postgres.workspace()
    there = cli.json("migrate-store", str(source), url)
    back = cli.json("migrate-store", url, str(tmp_path / "back.db"))
    assert there["rows"] > 60 and there["tables"] == back["tables"]  # the same rows, hash by hash
    assert there["tables"]["messages"]["rows"] == 31
    before = await _view(source, sid)
    assert await _view(url, sid) == before
    assert await _view(tmp_path / "back.db", sid) == before
    # the copy goes on where the source would: new ids after the copied ones
    ws = await Workspace.open(url)
    try:
        assert (await ws.spawn("next", "hr")).sid == 3
        assert await ws.memory_get(sid, "rate") == {"x": 1.5}
    finally:
        await ws.close()


async def test_a_copy_into_a_workspace_that_holds_something_is_refused(cli, tmp_path, postgres) -> None:
    source = tmp_path / "a.db"
    await _populate(source)
    url = postgres.workspace()
    ws = await Workspace.open(url)
    await ws.spawn("mine", "ops")
    await ws.close()
    before = sql(url, "SELECT count(*) FROM journal")
    done = cli("migrate-store", str(source), url, check=False)
    assert done.returncode != 0 and "is not empty" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert sql(url, "SELECT count(*) FROM journal") == before


async def test_what_postgresql_cannot_hold_refuses_the_whole_copy(cli, tmp_path, postgres) -> None:
    source = tmp_path / "nul.db"
    ws = await Workspace.open(source)
    sid = (await ws.spawn("bytes", "ops")).sid
    await ws.send(sid, "a tool printed \x00 here")
    await ws.close()
    url = postgres.workspace()
    done = cli("migrate-store", str(source), url, check=False)
    assert done.returncode != 0 and "NUL" in done.stderr and "nothing was copied" in done.stderr
    assert sql(url, "SELECT count(*) FROM messages") == [(0,)]
    # and a file made for a refused copy is not left behind
    back = tmp_path / "never.db"
    done = cli("migrate-store", str(tmp_path / "missing.db"), str(back), check=False)
    assert done.returncode != 0 and "no workspace" in done.stderr and not back.exists()


async def test_postgresql_refuses_a_foreign_database_and_a_newer_workspace(postgres) -> None:
    url = postgres.workspace()
    sql(url, "CREATE TABLE invoices (id integer)")
    with pytest.raises(WorkspaceError, match="another program"):
        await open_store(url)
    url = postgres.workspace()
    await (await open_store(url)).close()  # made
    sql(url, "UPDATE meta SET value = '999' WHERE key = 'schema'")
    with pytest.raises(WorkspaceError, match="newer Procession"):
        await open_store(url)
    with pytest.raises(StoreUnreachable, match="cannot open the workspace database .*: it cannot be reached"):
        await open_store("postgresql://procession@127.0.0.1:1/none")
    with pytest.raises(WorkspaceError, match=r"no schema of .*'s search_path \(team_b\) is in the database: make it"
                                             r" first \(CREATE SCHEMA name AUTHORIZATION role\)"):
        await open_store(postgres.url("team_b"))  # a schema not made yet: one line, as any refusal


async def test_an_engine_started_while_the_server_is_down_waits_for_it_then_runs(postgres, tmp_path) -> None:
    """A daemon started before its database (a reboot, an outage) waits, says so once, and
    goes on once the server is there; stopped while it waits, it ends cleanly."""
    url = postgres.workspace()
    ws = await Workspace.open(url)
    sid = (await ws.spawn("early", "ops", runner="builtin:echo", cwd=str(tmp_path))).sid
    await ws.close()
    said = {name: tmp_path / f"{name}.err" for name in ("gave_up", "engine")}
    postgres.down()
    try:
        procs = {name: subprocess.Popen([sys.executable, "-m", "procession", "--db", url, "run", "--grace", "0.3"],
                                        stderr=path.open("w")) for name, path in said.items()}
        await until(lambda: all("waiting for it" in path.read_text() for path in said.values()))
        procs["gave_up"].send_signal(signal.SIGTERM)
        assert procs["gave_up"].wait(timeout=HANG_S) == 0
        err = said["gave_up"].read_text()
        assert err.count("cannot be reached") == 1 and "Traceback" not in err
    finally:
        postgres.up()
    engine = procs["engine"]
    ws = await Workspace.open(url)
    try:
        await ws.send(sid, "after the outage")
        await ws.activate(sid)
        assert (await ws.wait(sid, HANG_S)).run.outcome == "ok"  # type: ignore[union-attr]
    finally:
        engine.send_signal(signal.SIGTERM)
        engine.wait(timeout=HANG_S)
        await ws.close()
    err = said["engine"].read_text()
    assert engine.returncode == 0 and err.count("cannot be reached") == 1, err
    assert "the workspace database is reached: going on" in err and "Traceback" not in err


async def test_an_engine_whose_server_goes_as_it_starts_waits_for_it_and_is_still_stopped_meanwhile(
        postgres, tmp_path) -> None:
    """The server gone between the command's first look and the engine's own connection (a
    chaos run's engine ended, exit 1, there): the engine waits for it and takes the lease once
    it is back; another, told to stop while it waits, ends with nothing to shut down."""
    from procession.engine import Engine

    url = postgres.workspace()
    await (await Workspace.open(url)).close()
    postgres.down()
    stops = [asyncio.Event(), asyncio.Event()]
    engines = [Engine(url, slots=1, grace=0.1), Engine(url, slots=1, grace=0.1)]
    serving = [asyncio.ensure_future(engine.serve(stop)) for engine, stop in zip(engines, stops)]
    try:
        await asyncio.sleep(1.5)  # two of its waits, at least
        assert not any(task.done() for task in serving)
        stops[1].set()
        await asyncio.wait_for(serving[1], HANG_S)  # stopped while it waited: no error, nothing to release
        assert engines[1].ledger is None
    finally:
        postgres.up()
    try:
        await until(lambda: sql(url, "SELECT pid FROM engines") == [(os.getpid(),)], timeout=HANG_S)
        assert not serving[0].done()
    finally:
        stops[0].set()
        await asyncio.wait_for(serving[0], HANG_S)


async def test_an_engine_stopped_after_it_took_its_lease_but_before_it_started_gives_the_lease_back(
        tmp_path, monkeypatch) -> None:
    """SIGTERM while a start-up step after the lease runs (recovering a dead engine's runs, a
    long one): the engine ends at once, and the next one finds no claim left (a CI run found
    one, when a stop came at that moment)."""
    from procession.engine import Engine

    db = tmp_path / "ws.db"
    await (await Workspace.open(db)).close()
    recovering = asyncio.Event()

    async def slow_recover(self: Engine) -> None:
        recovering.set()
        await asyncio.sleep(3600)

    monkeypatch.setattr(Engine, "_recover", slow_recover)
    stop = asyncio.Event()
    serving = asyncio.ensure_future(Engine(db, slots=1, grace=0.1).serve(stop))
    await asyncio.wait_for(recovering.wait(), HANG_S)
    assert sql(db, "SELECT count(*) FROM engines") == [(1,)]
    stop.set()
    await asyncio.wait_for(serving, HANG_S)
    assert sql(db, "SELECT count(*) FROM engines") == [(0,)]


async def test_a_postgresql_workspace_of_an_older_schema_is_upgraded_only_when_asked_and_no_older_engine_runs(
        postgres) -> None:
    """Made by the release before moves (schema 14): no call brings it up to date by itself (a
    plain ``ps`` of a newer Procession used to, under every older engine's feet); ``procession
    upgrade`` does, once, keeping every row, refusing while an engine of the older Procession is
    heard (it is named) and naming those not heard; a role that may only read is told to let a
    writer upgrade it."""
    url = postgres.workspace()
    ws = await Workspace.open(url)
    sid = (await ws.spawn("kept", "ops")).sid
    await ws.close()
    for statement in ("DROP TABLE moves", "DROP INDEX sessions_spawned_by", "DROP TABLE devices", "DROP TABLE pairings",
                      "DROP TABLE answer_tokens", "DROP INDEX runs_ended", "DROP INDEX messages_search",
                      "ALTER TABLE messages DROP COLUMN said", "UPDATE meta SET value = '14' WHERE key = 'schema'",
                      # an engine of the older Procession, on another machine, beating now
                      "INSERT INTO engines (host, token, pid, started, heartbeat, slots, proc_start, machine)"
                      " VALUES ('old', 't', 77, 0, EXTRACT(EPOCH FROM clock_timestamp()), 2, NULL, 'elsewhere')"):
        sql(url, statement)
    plain = subprocess.run([sys.executable, "-m", "procession", "--db", url, "ps"], capture_output=True, text=True,
                           timeout=HANG_S)
    assert plain.returncode != 0 and "Traceback" not in plain.stderr
    assert "older Procession's schema (14" in plain.stderr and "procession upgrade" in plain.stderr
    refused = subprocess.run([sys.executable, "-m", "procession", "--db", url, "upgrade"], capture_output=True,
                             text=True, timeout=HANG_S)
    assert refused.returncode != 0 and "host old (engine pid 77 on machine elsewhere)" in refused.stderr
    assert sql(url, "SELECT value FROM meta WHERE key = 'schema'") == [("14",)]  # neither changed anything
    viewer = postgres.viewer(url)
    sql(url, "UPDATE engines SET heartbeat = heartbeat - 60")  # not heard for a minute
    with pytest.raises(WorkspaceError, match="a role that may write must open it once first"):
        await open_store(viewer, upgrade=True)
    done = subprocess.run([sys.executable, "-m", "procession", "--db", url, "upgrade"], capture_output=True,
                          text=True, timeout=HANG_S)
    assert done.returncode == 0, done.stderr
    assert f"upgraded the workspace from schema 14 to {schema.VERSION}" in done.stdout
    assert "not heard, and of the older Procession if it comes back: host old (engine pid 77" in done.stdout
    again = subprocess.run([sys.executable, "-m", "procession", "--db", url, "upgrade"], capture_output=True,
                           text=True, timeout=HANG_S)
    assert again.returncode == 0 and "nothing to do" in again.stdout
    ws = await Workspace.open(url)
    try:
        assert (await ws.info(sid)).name == "kept" and await ws.move_info(sid) is None
        assert sql(url, "SELECT value FROM meta WHERE key = 'schema'") == [(str(schema.VERSION),)]
    finally:
        await ws.close()
    assert dialect.schema_ddl(schema.VERSION) == []  # nothing to add to a workspace of this version


async def test_an_engine_whose_workspace_a_newer_procession_upgraded_stops_saying_so(postgres, tmp_path) -> None:
    url = postgres.workspace()
    await (await Workspace.open(url)).close()
    engine = subprocess.Popen([sys.executable, "-m", "procession", "--db", url, "run"], stderr=subprocess.PIPE,
                              text=True)
    try:
        await until(lambda: _engines(url))
        sql(url, f"UPDATE meta SET value = '{schema.VERSION + 1}' WHERE key = 'schema'")  # as a newer upgrade leaves it
        _, said = engine.communicate(timeout=HANG_S)
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait()
    assert engine.returncode != 0 and "Traceback" not in said
    assert f"upgraded to schema {schema.VERSION + 1} by a newer Procession" in said
    assert sql(url, "SELECT count(*) FROM engines") == [(0,)]  # it gave its lease back


async def _engines(url: str) -> bool:
    return bool(sql(url, "SELECT count(*) FROM engines")[0][0])


async def test_values_postgresql_would_take_differently_are_refused_as_sqlite_refuses_them(postgres) -> None:
    ws = await Workspace.open(postgres.workspace())
    try:
        sid = (await ws.spawn("x", "ops")).sid
        with pytest.raises(InvalidArgument, match="out of range"):
            await ws.info(2**70)
        with pytest.raises(InvalidArgument, match="lone surrogate"):
            await ws.send(sid, "half \ud800 a pair")
        assert [m.content for m in await ws.history(sid)] == []
    finally:
        await ws.close()


async def test_a_viewer_role_reads_and_its_monitor_opens_read_only(cli, postgres, monitor) -> None:
    url = postgres.workspace()
    sid = await _populate(url)
    viewer = postgres.viewer(url)
    ws = await Workspace.open(viewer)
    try:
        assert ws.store.readonly and (await ws.info(sid)).name == "payroll"
        with pytest.raises(WorkspaceError, match="read-only for this database role"):
            await ws.send(sid, "may I?")
    finally:
        await ws.close()
    done = cli("--db", viewer, "send", str(sid), "may I?", check=False)
    assert done.returncode != 0 and "read-only" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    app = await monitor(viewer)
    async with app.run_test() as pilot:
        await pilot.pause()
        assert app.readonly
    assert sql(url, "SELECT count(*) FROM messages WHERE content = 'may I?'") == [(0,)]


async def test_a_select_only_role_cannot_take_the_write_lock_and_holds_up_no_writer(postgres) -> None:
    """A role given SELECT only, trying the writers' lock (through Procession, or by hand), is
    refused at once in one line; what it may hold (an advisory lock on the workspace's old
    key) keeps no writer of another role waiting."""
    import psycopg

    from procession.store.postgres import WRITE_LOCK

    url = postgres.workspace()
    sid = await _populate(url)
    viewer = postgres.viewer(url)
    with psycopg.connect(viewer) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(WRITE_LOCK)
        conn.rollback()
        conn.execute("SELECT pg_advisory_xact_lock(1886547811, hashtext(current_schema()))")  # held till the end
        async with await Workspace.open(viewer) as reader, await Workspace.open(url) as writer:
            with pytest.raises(WorkspaceError, match=r"read-only for this database role; nothing was changed$"):
                async with reader.store.tx():
                    await writer.send(sid, "while a reader tries to write")  # never reached: refused at once
            await writer.send(sid, "while a reader holds the old lock")
    assert sql(url, "SELECT content FROM messages WHERE content LIKE 'while%'") == [
        ("while a reader holds the old lock",)]


async def test_a_server_that_goes_away_and_comes_back(postgres, tmp_path) -> None:
    """Calls while the database is down are refused in one line, changing nothing; an engine
    (a process of its own, as the server is not its child) waits it out, saying so once; once
    it is back both go on, on connections of their own."""
    url = postgres.workspace()
    ws = await Workspace.open(url)
    engine = subprocess.Popen([sys.executable, "-m", "procession", "--db", url, "run", "--grace", "0.3"],
                              stderr=subprocess.PIPE, text=True)
    try:
        sid = (await ws.spawn("steady", "ops", runner="builtin:echo", cwd=str(tmp_path))).sid
        await ws.activate(sid)
        await ws.wait(sid, HANG_S)  # the engine is at work, in its loop
        postgres.down()
        try:
            with pytest.raises(StoreUnreachable, match="cannot be reached"):
                await ws.send(sid, "into the void")
            await asyncio.sleep(1.5)  # the engine's loop and heartbeat meet the outage a few times meanwhile
        finally:
            postgres.up()
        await ws.send(sid, "hello again")
        await ws.activate(sid)
        waited = await ws.wait(sid, HANG_S)
        assert waited.run is not None and waited.run.outcome == "ok"
        assert "hello again" in [m.content for m in await ws.history(sid)]
        assert len(await ws.runs(sid)) == 2
    finally:
        engine.send_signal(signal.SIGTERM)
        _, err = engine.communicate(timeout=HANG_S)
        await ws.close()
    assert engine.returncode == 0, err
    said = err.count("engine loop: the workspace database")
    assert 1 <= said <= 3 and "engine loop: going on" in err and "Traceback" not in err  # said as it changed


@pytest.mark.parametrize(("sqlite", "postgresql"), [
    ("SELECT max(a, :lo) FROM t WHERE b = ? LIMIT -1", "SELECT GREATEST(a, %(lo)s) FROM t WHERE b = %s LIMIT ALL"),
    ("SELECT window FROM s INDEXED BY s_rev WHERE name LIKE '50%'", "SELECT \"window\" FROM s WHERE name LIKE '50%%'"),
    ("SELECT CAST(x AS INTEGER), CAST(y AS REAL), max(z) FROM t", "SELECT CAST(x AS BIGINT), CAST(y AS DOUBLE PRECISION), max(z) FROM t"),
    ("SELECT json_extract(spec, '$.session') = CAST(? AS TEXT)", "SELECT (spec::jsonb ->> 'session') = CAST(%s AS TEXT)"),
    ("SELECT a(?) /* a note */, 'it''s ? /* no note */' LIMIT ?",
     "SELECT a(%s) , 'it''s ? /* no note */' LIMIT NULLIF(GREATEST(%s, -1), -1)"),
    ("SELECT 1 WHERE 2 IN () OR 3 NOT IN ()", "SELECT 1 WHERE 2 = ANY ('{}') OR 3 <> ALL ('{}')"),
])
def test_statements_are_said_in_postgresql(sqlite: str, postgresql: str) -> None:
    assert translate(sqlite) == postgresql


async def test_a_copy_starts_with_no_engine_claim(cli, db, live, tmp_path) -> None:
    """Copied while its engine ran, a workspace carried that engine's claim (issue 35): the
    copy's ``activate`` said ``ready`` and nothing ran, an engine there was refused. The copy
    has no claim: ``activate`` says no engine runs it, and an engine started there runs it."""
    sid = (await live.spawn("s", "a", runner="command:echo ran", cwd=str(tmp_path))).sid
    copy = tmp_path / "copy.db"
    async with engine_on(db):
        cli("migrate-store", str(db), str(copy))
    assert sql(copy, "SELECT count(*) FROM engines") == [(0,)]
    activated = cli("activate", str(sid), "--db", str(copy))
    assert "no engine runs on this workspace" in activated.stderr, activated.stderr
    ws = await Workspace.open(copy)
    try:
        async with engine_on(copy):
            await until(lambda: ws.history(sid))
        assert [m.content for m in await ws.history(sid)] == ["ran"]
    finally:
        await ws.close()


async def test_an_engine_hears_its_own_hosts_commits_and_those_of_every_hosts_concern_not_the_others(
        postgres) -> None:
    """Ten hosts' engines on one database each looked at every commit of the other nine: a
    commit now names the hosts it concerns (an engine's own, and the host of each session it
    changed), an engine hears only its own host's and those that concern every host (any
    call's but an engine's, a write whose reach is not known), and a face hears them all."""
    from procession.store import engines, rows
    from support.hosts import spawn_on

    url = postgres.workspace()
    async with await Workspace.open(url) as setup:
        north = await spawn_on(setup, "north", "n", "command:true")
        south = await spawn_on(setup, "south", "s", "command:true")
    async with await Workspace.open(url) as south_engine, await Workspace.open(url) as north_engine, \
            await Workspace.open(url) as face:
        async with south_engine.store.tx() as tx:
            await engines.put_lease(tx, "south-token", os.getpid(), "south", 2, None, "here")
        south_engine.store.fence = ("south", "south-token")
        north_engine.store.interest = "north"
        heard = [await north_engine.store.data_version(), await face.store.data_version()]

        async def told() -> list[int]:
            await asyncio.sleep(0.3)  # a notification comes after its commit: given its time
            now = [await north_engine.store.data_version(), await face.store.data_version()]
            moved = [a - b for a, b in zip(now, heard)]
            heard[:] = now
            return moved

        async with south_engine.store.tx() as tx:  # south's engine changes a session of its own
            await rows.update_session(tx, south, failures=1)
        assert await told() == [0, 1]
        async with south_engine.store.tx() as tx:  # ...and one of north's (a message woke it, say)
            await rows.update_session(tx, north, failures=1)
        assert await told() == [1, 1]
        async with south_engine.store.tx() as tx:  # a table every host's engine acts on
            await tx.execute("UPDATE triggers SET armed = 1 WHERE session_id = ?", (south,))
        assert await told() == [1, 1]
        await face.send(south, "a person's call, about south's session")
        assert await told() == [1, 1]

        waiting = asyncio.ensure_future(north_engine.store.hear(5.0))  # waits through south's own...
        async with south_engine.store.tx() as tx:
            await rows.update_session(tx, south, failures=2)
        await asyncio.sleep(0.5)
        assert not waiting.done()
        async with south_engine.store.tx() as tx:  # ...and wakes for north's
            await rows.update_session(tx, north, failures=2)
        await asyncio.wait_for(waiting, HANG_S)


@pytest.mark.parametrize("store_kind", ["sqlite", "postgresql"], indirect=True)
async def test_a_write_nobody_waits_for_that_fails_refuses_its_whole_transaction(db) -> None:
    """A write whose answer nobody reads (``Tx.later``) waits, on PostgreSQL, to go with the
    next statement or with the commit: what it meets is raised all the same, by that statement
    or by the commit, and nothing of the transaction is kept, on either store."""
    async with await Workspace.open(db) as ws:
        sid = (await ws.spawn("x", "ops", goal="as it was")).sid
        for ending in ("a read after it", "the commit"):
            with pytest.raises(Exception, match="(?i)not.null"):  # the database's own refusal, whichever
                async with ws.store.tx() as tx:
                    await tx.later("UPDATE sessions SET goal = ? WHERE id = ?", ("changed", sid))
                    await tx.later("INSERT INTO messages (session_id) VALUES (?)", (sid,))  # no seq, no role
                    if ending == "a read after it":
                        await tx.all("SELECT id FROM sessions")
            assert (await ws.info(sid)).goal == "as it was", ending
        assert await ws.history(sid) == []
        sent = await ws.send(sid, "still fine: 100% of it, 'quoted' and \\ back")
        assert [m.content for m in await ws.history(sid)] == ["still fine: 100% of it, 'quoted' and \\ back"]
        assert sent.row == (await ws.journal(limit=1))[0].id


async def _said(postgres: Any, ws: Workspace, call: Any) -> list[str]:
    """The messages ``call`` sent, in the server's own log of what the connection sent."""
    conn = ws.store.conn  # type: ignore[attr-defined]
    log = postgres.root / "server.log"
    await conn.execute("SET log_statement = 'all'")
    start = log.stat().st_size
    await call()
    await conn.execute("SET log_statement = 'none'")
    lines = log.read_bytes()[start:].decode().splitlines()
    return [line for line in lines if f"[{conn.info.backend_pid}]" in line
            and ("statement: " in line or "execute " in line) and "log_statement" not in line]


async def test_a_send_on_postgresql_is_two_round_trips(postgres) -> None:
    """A call's round trips are what it costs on a shared database (issue 38): a ``send`` reads
    its session with the transaction's beginning (its stamp and its journal row's id taken
    there), and sends its writes (the message, the session's totals, the journal row) with the
    commit. Counted in the server's own log of what this connection sent. Neither message is
    planned again: each statement runs the plan its connection prepared at the first send."""
    async with await Workspace.open(postgres.workspace()) as ws:
        conn = ws.store.conn  # type: ignore[attr-defined]
        sid = (await ws.spawn("x", "ops")).sid
        await ws.send(sid, "warm")
        sent: list[Any] = []
        said = await _said(postgres, ws, lambda: _into(sent, ws.send(sid, "one message")))
        assert len(said) == 2, "\n".join(said)
        assert "COMMIT" in said[1] and "PREPARE" not in said[0] + said[1]
        run = re.findall(r"EXECUTE (\w+)", said[1])
        cur = await conn.execute("SELECT statement FROM pg_prepared_statements WHERE name = ANY(%s)", (run,))
        prepared = [row[0] for row in await cur.fetchall()]
        assert len(prepared) == len(run) == 3 and any(" AS INSERT INTO journal " in p for p in prepared)
        assert sent[0].row == (await ws.journal(limit=1))[0].id
        assert [m.content for m in await ws.history(sid)] == ["warm", "one message"]


async def test_a_fork_on_postgresql_is_three_round_trips_whatever_it_reads(postgres) -> None:
    """A ``fork`` reads its parent with the beginning; then its name, the parent's folds and
    triggers, the tokens up to the fork point, the agent's side and the child's SID, all asked
    together (``Tx.together``): one message; then sends the child's row and what it inherits
    with the journal row and the commit."""
    async with await Workspace.open(postgres.workspace()) as ws:
        sid = (await ws.spawn("x", "ops")).sid
        await ws.send_many(sid, [{"role": "user", "content": f"m{n}"} for n in range(30)])
        await ws.trigger_add(sid, "inbox")
        await ws.compress(sid, keep_last=20, summary="the first ten")
        await ws.fork(sid)
        said = await _said(postgres, ws, lambda: ws.fork(sid, at=20))
        assert len(said) == 3, "\n".join(said)
        forks = [s for s in await ws.ps() if s.parent == sid]
        assert [f.name for f in forks] == ["x #2", "x #3"]
        assert [m.content for m in await ws.history(forks[1].id)] == [f"m{n}" for n in range(20)]


async def _into(found: list[Any], call: Any) -> None:
    found.append(await call)


async def test_what_a_connection_prepared_outlives_a_rollback_and_only_so_many_are_kept(postgres, monkeypatch) -> None:
    """The store prepares each statement once per connection. psycopg, which prepares only a
    load's statement for its rows, answers a rollback by letting go of every statement the
    connection prepared (``DEALLOCATE ALL``) when it prepared them itself: after a load and a
    refused call, a ``send`` still runs the plans prepared before, none prepared again. And a
    connection keeps only ``PREPARED`` of them: the least recently used go as a later call
    begins."""
    from procession.store import postgres as pg

    async def prepared() -> dict[str, str]:
        cur = await conn.execute("SELECT name, statement FROM pg_prepared_statements")
        return dict(await cur.fetchall())

    async with await Workspace.open(postgres.workspace()) as ws:
        conn = ws.store.conn  # type: ignore[attr-defined]
        sid = (await ws.spawn("x", "ops")).sid
        await ws.send(sid, "warm")
        await ws.send_many(sid, [{"role": "user", "content": f"m{n}"} for n in range(20)])
        before = await prepared()
        assert any(not name.startswith("procession_") for name in before)  # the load's, psycopg's
        with pytest.raises(InvalidArgument):
            await ws.send(sid, "a NUL \0 is refused")
        await ws.send(sid, "after")
        assert await prepared() == before
        assert [m.content for m in await ws.history(sid)][-2:] == ["m19", "after"]

        monkeypatch.setattr(pg, "PREPARED", 4)
        for n in range(12):
            await ws.spawn(f"s{n}", "ops")
            await ws.send(sid, f"m{n}")
        ours = [name for name in await prepared() if name.startswith("procession_")]
        assert len(ours) <= 4 + 8  # and those a call prepared itself, until the next call begins
        assert len(await ws.history(sid)) == 1 + 20 + 1 + 12


#: Values a statement binds, each as SQLite gives it back: texts a binder could get wrong
#: (quotes, backslashes, what looks like SQL, a placeholder, a long one), numbers at their
#: edges, bytes that are not text
_AWKWARD = ["it's", "'); DROP TABLE meta; --", "back\\slash \\' \\x00 E'\\n'", "ends in a backslash\\", "\\",
            "$$ dollars $q$", "100% %s %% ?", "é 漢字 🎉 e\u0301 \u200b", "line\nbreak\ttab\rend", "x'\\" * 50_000, "",
            0, 1, -1, 2**63 - 1, -(2**63), 1.5, -0.0, 1e308, 5e-324, float("inf"), float("-inf"), b"",
            b"\x00'\\\xff\\x41", None]


async def _round_trip(ws: Workspace, values: list[Any]) -> tuple[list[Any], list[str]]:
    """``values`` read back through a statement (``SELECT ?``), and the texts of them written
    in a transaction and read back."""
    async with ws.store.snapshot() as tx:
        read = [(await tx.all("SELECT ?", (value,)))[0][0] for value in values]
        assert tuple((await tx.all("SELECT ?, ?, ?", ("it's\\", 7, b"'")))[0]) == ("it's\\", 7, b"'")
    async with ws.store.tx() as tx:
        for n, text in enumerate(value for value in values if isinstance(value, str)):
            await tx.later("INSERT INTO meta (key, value) VALUES (?, ?)", (f"test{n}", text))
    async with ws.store.snapshot() as tx:
        written = [r[0] for r in await tx.all("SELECT value FROM meta WHERE key LIKE 'test%' ORDER BY"
                                              " CAST(substr(key, 5) AS INTEGER)")]
    return read, written


async def test_every_kind_of_value_comes_back_as_it_went_on_both_stores(postgres, tmp_path) -> None:
    """A statement's values are written into the message as constants (``_literal``, faster
    than psycopg's binding): each comes back exactly as SQLite gives it back, read and written,
    and a text that looks like SQL stays a text, also where the server stops reading strings as
    standard under an open connection (``standard_conforming_strings``: a reload of its settings
    can turn it off between two messages; a backslash would then end a plain string)."""
    for where, plain in ((tmp_path / "ws.db", False), (postgres.workspace(), False), (postgres.workspace(), True)):
        async with await Workspace.open(where) as ws:
            if isinstance(where, str):
                assert ws.store.prepared().literal  # type: ignore[attr-defined]
            if plain:
                await ws.store.conn.execute("SET standard_conforming_strings = off")  # type: ignore[attr-defined]
            read, written = await _round_trip(ws, _AWKWARD)
            assert await ws.ps() == []
        assert [(type(v), v) for v in read] == [(type(v), v) for v in _AWKWARD], where
        assert str(read[_AWKWARD.index(1.5) + 1]) == "-0.0"  # its sign kept
        assert written == [value for value in _AWKWARD if isinstance(value, str)], where


async def test_where_a_connection_speaks_another_encoding_psycopg_binds_the_values(postgres) -> None:
    """An operator's address may ask for another encoding than UTF-8 (the store's own asks for
    UTF-8): there psycopg binds the values, in it, and they come back as they went."""
    texts = ["it's é", "'); DROP TABLE meta; --", "back\\slash \\' E'\\n'", "ends\\"]
    async with await Workspace.open(postgres.workspace() + "&client_encoding=LATIN1") as ws:
        assert not ws.store.prepared().literal  # type: ignore[attr-defined]
        read, written = await _round_trip(ws, [*texts, 7, b"\x00'"])
    assert read == [*texts, 7, b"\x00'"] and written == texts


async def test_a_call_cancelled_anywhere_on_postgresql_is_whole_or_not_at_all_and_holds_no_lock(postgres) -> None:
    """Calls cancelled while each of their messages is with the server (the beginning and the
    read, then the writes and the commit), and at turns of the loop between: psycopg has the
    server cancel what the connection was doing, the store rolls back what is left; each call
    is then done whole, journal row and message, or not at all, the connection is left outside
    a transaction and the writers' lock is free at once for another connection. One cancelled
    while the server waits for the lock is cancelled there: its connection kept, the next call
    not cancelled by what was left of it."""
    import psycopg

    from procession.store.postgres import WRITE_LOCK

    url = postgres.workspace()
    async with await Workspace.open(url) as ws:
        store: Any = ws.store
        sid = (await ws.spawn("s", "a")).sid
        sent_by_store, at = store.sent, {"message": 0, "cancel": -1}

        async def sent(message: Any) -> Any:  # the call's task cancelled as its message goes
            at["message"] += 1
            if at["message"] == at["cancel"]:
                asyncio.current_task().cancel()  # type: ignore[union-attr]
            return await sent_by_store(message)

        store.sent = sent
        other = await psycopg.AsyncConnection.connect(url, autocommit=True)
        try:
            cancelled = 0
            for i in range(60):
                at.update(message=0, cancel=1 + i % 2 if i < 30 else -1)
                task = asyncio.ensure_future(ws.send(sid, f"message {i}"))
                for _ in range(i % 12 if i >= 30 else 0):
                    await asyncio.sleep(0)
                if i >= 30 and not task.done():
                    task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    cancelled += 1
                assert store.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
                async with other.transaction():
                    await other.execute("SET LOCAL lock_timeout = '1s'")
                    await other.execute(WRITE_LOCK)  # refused after 1 s if the cancelled call kept it
            # one cancelled while the server waits for the writers' lock: the server cancels it
            conn, pid = store.conn, store.conn.info.backend_pid
            async with other.transaction():
                await other.execute(WRITE_LOCK)
                task = asyncio.ensure_future(ws.send(sid, "never"))
                await until(lambda: _waits_for_a_lock(other, pid))
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                assert store.conn is conn and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            await ws.send(sid, "after")  # no cancel left over for it
            sent_texts = [m.content for m in await ws.history(sid)]
            journaled = [e.args["text"] for e in await ws.journal(limit=1000) if e.call == "send"]
        finally:
            await other.close()
    assert cancelled >= 30  # each of the first 30, at its first message or at its commit
    assert "never" not in sent_texts and sent_texts[-1] == "after"
    assert sorted(journaled) == sorted(sent_texts) and len(set(sent_texts)) == len(sent_texts)  # whole calls or none


async def _waits_for_a_lock(conn: Any, pid: int) -> bool:
    cur = await conn.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,))
    return (await cur.fetchone()) == ("Lock",)


async def test_a_writer_waits_for_the_writers_lock_so_long_then_is_busy_and_waits_on_no_other_lock_so(
        postgres, monkeypatch) -> None:
    """A write transaction waits for the writers' lock ``BUSY_TIMEOUT_S`` at most (1 s here),
    then is told the workspace is busy, nothing changed; once it holds the lock, no other wait
    of it is cut short (its stamp sets the wait back as it takes the row): a session's row held
    by another connection for longer is waited for."""
    import psycopg

    from procession.model.errors import StoreBusy
    from procession.store import postgres as pg

    for name in ("WRITE_BEGIN", "RESERVING"):
        monkeypatch.setattr(pg, name, tuple(s.replace(f"'{pg.BUSY_TIMEOUT_S}s'", "'1s'") for s in getattr(pg, name)))
    url = postgres.workspace()
    async with await Workspace.open(url) as ws:
        sid = (await ws.spawn("x", "ops")).sid
        other = await psycopg.AsyncConnection.connect(url, autocommit=True)
        try:
            async with other.transaction():
                await other.execute(pg.WRITE_LOCK)
                with pytest.raises(StoreBusy, match="stayed locked by another writer"):
                    await ws.send(sid, "refused")
            async with other.transaction():
                await other.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", (sid,))
                waiting = asyncio.ensure_future(ws.send(sid, "waited for"))
                await asyncio.sleep(2)
                assert not waiting.done()
            await waiting
        finally:
            await other.close()
        assert [m.content for m in await ws.history(sid)] == ["waited for"]
