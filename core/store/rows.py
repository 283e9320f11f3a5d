"""The rows most calls write (sessions, history, memory, resources, triggers, worktrees), and
the row reads they share; the other tables' questions are in modules of their own.

The calls (``procession.calls``) decide what to change; these functions say how, in SQL.
Each takes the open transaction, so a call that uses several of them is still one
transaction. Nothing here checks the lifecycle or the user's input: that is done before.

History rows are append-only (``append``): a message, once written, is never changed, which
is what makes forks copy-on-write and compress reversible.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from typing import Any, Final

from ..model import hosts, limits
from ..model.errors import InvalidArgument, SessionNotFound
from ..model.records import Fold, TriggerInfo, Worktree
from ..model.states import State
from . import search
from .base import Row, Tx, said

#: A session's context as its model counts it (``tokens.scaled``), of a row aliased ``s``.
CONTEXT = "CAST(ROUND(s.context_tokens * s.token_scale) AS INTEGER)"
#: Messages written per ``executemany``: big transcripts go in batches, with progress between.
CHUNK = 10_000
#: SQLite's page cache (KiB) while more than a chunk of messages is appended, instead of its
#: 2 MB: a million-message load went from ~5.6 to ~4.6 s with it (fewer, larger writes of
#: dirty pages to the WAL), and the connection gets its own size back after.
BULK_CACHE_KIB = 16 * 1024

#: A session's row, its agent's name, and whether a message wakes it (it has an inbox trigger):
#: a message sent to it needs no statement of its own to know (on PostgreSQL, a round trip).
_SESSION = ("SELECT s.*, a.name AS agent, EXISTS (SELECT 1 FROM triggers t WHERE t.session_id = s.id"
            " AND t.kind = 'inbox') AS inbox FROM sessions s JOIN agents a ON a.id = s.agent_id")
#: The columns of ``SessionInfo``, in its field order (triggers come from their own table). A
#: session run by an agent CLI has the context and window the agent last reported; any other
#: its stored count as its model counts it.
PS_COLUMNS = (
    "s.id, s.uuid, s.name, a.name, s.goal, s.state, s.reason, s.priority, s.parent_id, s.fork_seq,"
    f" s.merged_into, s.runner, COALESCE(s.agent_window, s.window), COALESCE(s.agent_context, {CONTEXT}),"
    " s.context_count, s.length, s.created, s.last_active,"
    " s.armed, s.timeout, s.cwd, s.rev, s.last_outcome, s.failures, r.pid, r.cpu, r.rss, r.started,"
    " s.agent_context IS NOT NULL, r.status, s.spawned_by,"
    " CASE WHEN s.agent_ref IS NOT NULL AND json_extract(s.agent_ref, '$.adopted') IS NOT NULL THEN 1 ELSE 0 END,"
    " s.confine, s.net, s.confinement, s.permissions, s.host"
)
PS_SELECT = (
    f"SELECT {PS_COLUMNS} FROM sessions s JOIN agents a ON a.id = s.agent_id"
    " LEFT JOIN runs r ON r.session_id = s.id AND r.ended IS NULL"
)
TRIGGER_COLUMNS = ("id, session_id, kind, spec, armed, last_fired, fired, pending IS NOT NULL,"
                   " CASE WHEN kind = 'commit' THEN state END")
#: A key's new version (a value, or ``gone``): replaces one of the same transaction.
_MEMORY_PUT = (
    "INSERT INTO memory (session_id, key, rev, value, updated, gone) VALUES (?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (session_id, key, rev) DO UPDATE SET value = excluded.value, updated = excluded.updated,"
    " gone = excluded.gone"
)
#: A session's working memory as it reads, as of a change stamp (the second parameter): the
#: newest version of each key, its own rows over those of the sessions it inherits from
#: (``memory_from``, nearest first, each as of when the fork below it was made), deleted
#: keys left out.
_MEMORY_VIEW = """
    WITH RECURSIVE chain(id, cut, depth) AS (
        SELECT ?, ?, 0
        UNION ALL
        SELECT s.memory_from, s.memory_rev, c.depth + 1 FROM sessions s JOIN chain c ON s.id = c.id
        WHERE s.memory_from IS NOT NULL
    )
    SELECT key, value FROM (
        SELECT m.key, m.value, m.gone, row_number() OVER (PARTITION BY m.key ORDER BY c.depth, m.rev DESC) AS nearest
        FROM chain c JOIN memory m ON m.session_id = c.id AND m.rev <= c.cut{where}
    ) AS v WHERE nearest = 1 AND gone = 0
"""
#: Later than any change stamp: a session's memory as it reads now.
_NOW = 2**63 - 1
_MESSAGE = (
    "INSERT INTO messages (session_id, seq, role, content, tokens, cum_tokens, author, pinned, meta, created)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_FOLD = (
    "INSERT INTO folds (session_id, lo, hi, summary, summary_tokens, archived_count, archived_tokens, created)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


# ---------------------------------------------------------------- sessions


async def session(tx: Tx, sid: int) -> Row:
    """A session's row (with its agent's name), or ``SessionNotFound``."""
    row = await tx.one(f"{_SESSION} WHERE s.id = ?", (sid,))
    if row is None:
        raise SessionNotFound(sid)
    return row


async def known_agent(tx: Tx, name: str) -> int:
    """The agent of this name (refused in one line if there is none)."""
    found = await tx.value("SELECT id FROM agents WHERE name = ?", (limits.name(name, "agent name"),))
    if found is None:
        raise InvalidArgument(f"no agent {name}")
    return int(found)


async def agent_id(tx: Tx, name: str) -> int:
    """The agent of this name, made on first use."""
    found = await tx.value("SELECT id FROM agents WHERE name = ?", (name,))
    if found is not None:
        return int(found)
    return await tx.insert("INSERT INTO agents (name, created) VALUES (?, ?)", (name, tx.now))


async def insert_session(tx: Tx, system_tokens: int, **cols: Any) -> int:
    """A new session row, sleeping, stamped changed; returns its SID. An ``id`` among ``cols``
    is the SID taken for it beforehand (``next_sid``): the row then waits to be sent with what
    follows (``Tx.later``: no round trip of its own on PostgreSQL)."""
    base = {
        "uuid": str(uuid.uuid4()), "state": State.SLEEPING.value, "created": tx.now, "last_active": tx.now,
        "rev": await tx.rev(), "system_tokens": system_tokens, "context_tokens": system_tokens,
        "host": hosts.this(),
    }
    base.update(cols)
    names = ", ".join(base)
    marks = ", ".join("?" for _ in base)
    statement = f"INSERT INTO sessions ({names}) VALUES ({marks})"
    if "id" not in cols:
        return await tx.insert(statement, list(base.values()))
    await tx.later(statement, list(base.values()))
    return int(cols["id"])


async def next_sid(tx: Tx) -> int:
    """The SID the next session made in this transaction is to have (``insert_session``'s
    ``id``): read with the call's other reads, it costs no round trip of its own."""
    return int(await tx.value(said(tx, _NEXT_SID)))


#: The next SID: SQLite's own choice for a row without one (its highest plus one: the table
#: has no AUTOINCREMENT, and the writers' lock is held), PostgreSQL's sequence of the column
_NEXT_SID: Final = {
    "sqlite": "SELECT coalesce(max(id), 0) + 1 FROM sessions",
    "postgresql": "SELECT nextval(pg_get_serial_sequence('sessions', 'id'))",
}


async def update_session(tx: Tx, sid: int, **cols: Any) -> None:
    """Change columns of one session and stamp it changed (and active now)."""
    cols["rev"] = await tx.rev()
    cols["last_active"] = tx.now
    assignments = ", ".join(f"{k} = ?" for k in cols)
    host = await tx.value(f"UPDATE sessions SET {assignments} WHERE id = ? RETURNING host", [*cols.values(), sid])
    if host is not None:  # the engine that runs it is told; no other is
        tx.concerns(str(host))


async def workdir(tx: Tx, sid: int) -> str:
    """Where a session works: its first bound folder, else the folder it was spawned in."""
    found = await tx.value("SELECT uri FROM resources WHERE session_id = ? AND kind = 'folder' ORDER BY id LIMIT 1",
                           (sid,))
    return str(found) if found is not None else str((await session(tx, sid))["cwd"])


async def ancestry(tx: Tx, sid: int) -> list[Row]:
    """``sid`` and its ancestors, nearest first: what lineage and merge walk up."""
    return await tx.all(
        """
        WITH RECURSIVE chain(id, parent_id, fork_seq, length, base_memory, base_at, memory_from, depth) AS (
            SELECT id, parent_id, fork_seq, length, base_memory, coalesce(base_at, created), memory_from, 0
            FROM sessions WHERE id = ?
            UNION ALL
            SELECT s.id, s.parent_id, s.fork_seq, s.length, s.base_memory, coalesce(s.base_at, s.created),
                   s.memory_from, c.depth + 1
            FROM sessions s JOIN chain c ON s.id = c.parent_id
        )
        SELECT * FROM chain ORDER BY depth
        """,
        (sid,),
    )


async def ready_sessions(tx: Tx, host: str, limit: int, only: set[int] | None) -> list[Row]:
    """``host``'s sessions waiting for a slot (of ``only``, when given), but those moving to
    another host: highest priority first, oldest first within one; what a run is started with."""
    among = f" AND id IN ({','.join(str(int(s)) for s in only)})" if only is not None else ""
    return await tx.all(
        f"SELECT id, runner, cwd, timeout, COALESCE(agent_context, {CONTEXT}) AS context_tokens,"
        " COALESCE(agent_window, window) AS window, env, pass_env, confine, net, permissions, uuid, agent_ref"
        " FROM sessions s"
        f" WHERE host = ? AND state = 'ready' AND armed = 1{among} AND NOT EXISTS (SELECT 1 FROM moves m"
        " WHERE m.session_id = s.id AND m.stage IN ('packing', 'placing'))"
        " ORDER BY priority DESC, queued_at ASC, id ASC LIMIT ?",
        (host, limit),
    )


async def moving(tx: Tx, sid: int) -> bool:
    """Whether a session is being packed or placed for another host (no run starts meanwhile)."""
    return bool(await tx.value("SELECT 1 FROM moves WHERE session_id = ? AND stage IN ('packing', 'placing')", (sid,)))


async def held_until(tx: Tx, host: str) -> float | None:
    """When the first of ``host``'s sessions held back after failed runs may take the wakes it
    was kept (its triggers', or its own restart); None while none is."""
    found = await tx.value("SELECT min(not_before) FROM sessions WHERE host = ? AND state = 'sleeping' AND"
                           " not_before IS NOT NULL AND (causes IS NOT NULL OR EXISTS (SELECT 1 FROM triggers t"
                           " WHERE t.session_id = sessions.id AND t.pending IS NOT NULL))", (host,))
    return None if found is None else float(found)


async def held_over(tx: Tx, host: str, now: float) -> list[int]:
    """``host``'s sleeping sessions whose back-off after failed runs is over at ``now``."""
    return [r["id"] for r in await tx.all("SELECT id FROM sessions WHERE host = ? AND state = 'sleeping'"
                                          " AND not_before <= ?", (host, now))]


async def suspended_for(tx: Tx, reason: str) -> list[int]:
    """The sessions suspended for ``reason`` (a ``Reason``)."""
    return [sid for (sid,) in await tx.tuples("SELECT id FROM sessions WHERE state = 'suspended' AND reason = ?",
                                              (reason,))]


async def stray_running(tx: Tx, host: str) -> list[int]:
    """``host``'s sessions said to be running with no live run (their engine died between
    ending the run and putting them to sleep)."""
    return [r["id"] for r in await tx.all(
        "SELECT id FROM sessions s WHERE host = ? AND state = 'running'"
        " AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.session_id = s.id AND r.ended IS NULL)", (host,)
    )]


async def states(tx: Tx, sids: Sequence[int]) -> dict[int, str]:
    """The state of each of ``sids`` still there (a session purged is not)."""
    marks = ",".join("?" * len(sids))
    return {r["id"]: r["state"] for r in await tx.all(f"SELECT id, state FROM sessions WHERE id IN ({marks})",
                                                      list(sids))}


async def last_rev(tx: Tx) -> int:
    """The newest change stamp: a watcher that read changes up to it asks next for what came after."""
    return int(await tx.value("SELECT value FROM meta WHERE key = 'rev'"))


async def changed(tx: Tx, since: int) -> list[int]:
    """The sessions changed after change stamp ``since`` (every one for 0)."""
    return [r[0] for r in await tx.tuples("SELECT id FROM sessions WHERE rev > ?", (since,))]


async def changed_agents(tx: Tx, since: int) -> list[Row]:
    """Of the sessions changed after ``since``, what says whether their agent's transcript is
    followed here: ``id, state, host, agent_ref``."""
    return await tx.all("SELECT id, state, host, agent_ref FROM sessions WHERE rev > ?", (since,))


async def agent_reference(tx: Tx, sid: int) -> Row | None:
    """What finds a session's agent CLI and its transcript: ``uuid, agent_ref, env``."""
    return await tx.one("SELECT uuid, agent_ref, env FROM sessions WHERE id = ?", (sid,))


# ---------------------------------------------------------------- history


async def append(tx: Tx, row: Row, messages: Iterable[tuple[Any, ...]], count: Any,
                 progress: Any = None, total: int = 0) -> int:
    """Append ``(role, content, author, pinned, meta[, created])`` messages to a session.

    Tokens are counted here (``count``), once; the session's totals move by what was added,
    so no listing needs to read a message again. Returns how many were appended.
    """
    first: int = row["length"]
    cum: int = row["history_tokens"]
    seq, before = first, cum
    batch: list[tuple[Any, ...]] = []
    sid, now, dumps = row["id"], tx.now, json.dumps
    cache = None
    try:
        for m in messages:  # a million in a load: indexed, since unpacking the optional time made a list each
            content, meta = m[1], m[4]
            tokens = count(content)
            seq += 1
            cum += tokens
            stored = dumps(meta) if meta is not None else None  # an empty meta is kept as given
            batch.append((sid, seq, m[0], content, tokens, cum, m[2], int(m[3]), stored, m[5] if len(m) > 5 else now))
            if len(batch) >= CHUNK:
                if cache is None:  # a long append: a cache it does not spill to the WAL every few rows
                    cache = await tx.widen_cache(BULK_CACHE_KIB)
                await tx.many(_MESSAGE, batch)
                await search.take(tx, sid, batch[0][1] - 1, seq)
                batch.clear()
                if progress:
                    progress(seq - first, total)
        if batch:
            await tx.many(_MESSAGE, batch)
            await search.take(tx, sid, batch[0][1] - 1, seq)
    finally:
        if cache is not None:
            await tx.restore_cache(cache)
    n, added = seq - first, cum - before
    if progress:
        progress(n, total)
    if n:
        await tx.later(
            "UPDATE sessions SET length = ?, history_tokens = ?, context_tokens = context_tokens + ?,"
            " context_count = context_count + ?, rev = ?, last_active = ? WHERE id = ?",
            (seq, cum, added, n, await tx.rev(), now, sid),
        )
    return n


async def insert_fold(tx: Tx, sid: int, lo: int, hi: int, summary: str, summary_tokens: int,
                      archived_count: int, archived_tokens: int, created: float | None = None) -> int:
    return await tx.insert(_FOLD, (sid, lo, hi, summary, summary_tokens, archived_count, archived_tokens,
                                   tx.now if created is None else created))


async def copy_folds(tx: Tx, sid: int, folds: Sequence[Fold]) -> None:
    await tx.many(_FOLD, [(sid, f.lo, f.hi, f.summary, f.summary_tokens, f.archived_count, f.archived_tokens,
                           f.created) for f in folds])


async def expand_fold(tx: Tx, fold: int) -> None:
    await tx.execute("UPDATE folds SET expanded = ? WHERE id = ?", (tx.now, fold))


async def mark_stopped(tx: Tx, sid: int, run: int, upto: int, outcome: str) -> None:
    """The messages a run stored after its prompt (``upto``) say how it was stopped (``outcome``):
    what an agent said before it was stopped reads as such."""
    await tx.execute(said(tx, _STOPPED), (outcome, sid, upto, run))


#: A run's messages marked with how it ended, in each database's JSON.
_STOPPED: Final = {
    "sqlite": "UPDATE messages SET meta = json_set(meta, '$.outcome', ?)"
              " WHERE session_id = ? AND seq > ? AND json_extract(meta, '$.run') = ?",
    "postgresql": "UPDATE messages SET meta = jsonb_set(meta::jsonb, '{outcome}', to_jsonb(CAST(? AS TEXT)))::text"
                  " WHERE session_id = ? AND seq > ? AND (meta::jsonb ->> 'run') = CAST(? AS TEXT)",
}


# ---------------------------------------------------------------- memory


async def memory(tx: Tx, sid: int, upto: int = _NOW) -> dict[str, str]:
    """A session's working memory (as of change stamp ``upto``), each value as its canonical
    JSON text."""
    return {r[0]: r[1] for r in await tx.tuples(_MEMORY_VIEW.format(where=""), (sid, upto))}


async def memory_value(tx: Tx, sid: int, key: str) -> str | None:
    return (await _memory_of(tx, sid, [key])).get(key)


async def _memory_of(tx: Tx, sid: int, keys: Sequence[str]) -> dict[str, str]:
    """What a session's memory holds of ``keys``."""
    found: dict[str, str] = {}
    for start in range(0, len(keys), 500):  # SQLite takes so many parameters to a statement
        part = keys[start:start + 500]
        where = f" AND m.key IN ({', '.join('?' for _ in part)})"
        found.update((r[0], r[1]) for r in await tx.tuples(_MEMORY_VIEW.format(where=where), (sid, _NOW, *part)))
    return found


async def put_memory(tx: Tx, sid: int, values: dict[str, str]) -> None:
    """Set keys (canonical JSON texts), replacing what was there."""
    await _new_versions(tx, sid, [(k, v, 0) for k, v in values.items()])


async def delete_memory(tx: Tx, sid: int, keys: Iterable[str]) -> int:
    """Delete keys; returns how many were there. A deleted key's version stays, marked gone,
    where an older one would show through: one the session inherits, or one a fork reads."""
    present = list(await _memory_of(tx, sid, list(dict.fromkeys(keys))))
    if present:
        await _new_versions(tx, sid, [(k, "null", 1) for k in present])
    return len(present)


async def _new_versions(tx: Tx, sid: int, versions: list[tuple[str, str, int]]) -> None:
    """Write ``(key, value, gone)`` as the keys' newest versions: one row each, however many
    forks read the session's memory. The versions a fork reads (those up to the newest stamp
    a fork was made at) stay; the newer ones, read by this session only, are replaced."""
    if not versions:
        return
    pinned = await tx.value("SELECT max(memory_rev) FROM sessions WHERE memory_from = ?", (sid,))
    pinned = -1 if pinned is None else int(pinned)
    await tx.many("DELETE FROM memory WHERE session_id = ? AND key = ? AND rev > ?",
                  [(sid, key, pinned) for key, _, _ in versions])
    inherits = await tx.value("SELECT memory_from FROM sessions WHERE id = ?", (sid,)) is not None
    rev, now = await tx.rev(), tx.now
    await tx.many(_MEMORY_PUT, [(sid, key, rev, value, now, gone) for key, value, gone in versions
                                if not gone or inherits or pinned >= 0])


async def memory_source(tx: Tx, row: Row) -> tuple[int, int]:
    """Where a copy-on-write fork of ``row`` reads its memory, and as of which change stamp:
    its parent as of now; or, when the parent holds no row of its own, where the parent reads
    it, as of the parent's stamp (the same memory, one link shorter: a chain of forks that
    never set a key reads its memory in one step, whatever its depth)."""
    if row["memory_from"] is not None and await tx.value(
            "SELECT 1 FROM memory WHERE session_id = ? LIMIT 1", (row["id"],)) is None:
        return int(row["memory_from"]), int(row["memory_rev"])
    return int(row["id"]), await tx.rev()


async def fork_base(tx: Tx, sid: int) -> dict[str, str]:
    """The memory a copy-on-write fork started from: its parent's as of the fork's stamp
    (``memory_rev``); a fork made before versions existed kept what its parent changed since
    in ``memory_base``."""
    parent, upto = (await tx.tuples("SELECT memory_from, memory_rev FROM sessions WHERE id = ?", (sid,)))[0]
    base = await memory(tx, int(parent), int(upto))
    for key, value in await tx.tuples("SELECT key, value FROM memory_base WHERE session_id = ?", (sid,)):
        if value is None:
            base.pop(key, None)
        else:
            base[key] = value
    return base


# ---------------------------------------------------------------- resources


async def resources(tx: Tx, sid: int) -> list[Row]:
    return await tx.all("SELECT id, kind, uri, mode FROM resources WHERE session_id = ? ORDER BY id", (sid,))


async def insert_resource(tx: Tx, sid: int, kind: str, uri: str, mode: str) -> int:
    return await tx.insert("INSERT INTO resources (session_id, kind, uri, mode, created) VALUES (?, ?, ?, ?, ?)",
                           (sid, kind, uri, mode, tx.now))


async def insert_resources(tx: Tx, sid: int, items: Iterable[tuple[str, str, str]]) -> None:
    """Bind several ``(kind, uri, mode)`` at once; one already bound is left as it is."""
    await tx.many("INSERT INTO resources (session_id, kind, uri, mode, created) VALUES (?, ?, ?, ?, ?)"
                  " ON CONFLICT DO NOTHING",
                  [(sid, kind, uri, mode, tx.now) for kind, uri, mode in items])


async def copy_resources(tx: Tx, source: int, target: int, *, outside: str | None = None,
                         counted: bool = True) -> int:
    """Bind ``source``'s resources to ``target`` too, in the order they were bound (the first
    folder is where a step runs), but for those under the folder ``outside`` (a merged fork's
    own folder, about to go); returns how many were new to it (``counted``; else 0, and the
    copy waits for the next statement: ``Tx.later``)."""
    keep = ""
    params: list[Any] = [target, tx.now, source]
    if outside is not None:
        keep = " AND NOT (uri = ? OR substr(uri, 1, length(?) + 1) = ? || '/')"
        params += [outside, outside, outside]
    sql = ("INSERT INTO resources (session_id, kind, uri, mode, created)"
           f" SELECT ?, kind, uri, mode, ? FROM resources WHERE session_id = ?{keep} ORDER BY id"
           " ON CONFLICT DO NOTHING")
    if not counted:
        await tx.later(sql, params)
        return 0
    return max(await tx.execute(sql, params), 0)


async def delete_resource(tx: Tx, resource: int) -> None:
    await tx.execute("DELETE FROM resources WHERE id = ?", (resource,))


# ---------------------------------------------------------------- triggers


def trigger_infos(rows: Iterable[Sequence[Any]]) -> dict[int, list[TriggerInfo]]:
    """Rows of ``TRIGGER_COLUMNS`` as records, by session."""
    by_session: dict[int, list[TriggerInfo]] = {}
    for r in rows:
        by_session.setdefault(r[1], []).append(TriggerInfo(r[0], r[1], r[2], r[3], bool(r[4]), r[5], r[6], bool(r[7]),
                                                           r[8]))
    return by_session


async def triggers(tx: Tx, sid: int, kind: str | None = None) -> list[Row]:
    if kind is None:
        return await tx.all("SELECT * FROM triggers WHERE session_id = ? ORDER BY id", (sid,))
    return await tx.all("SELECT * FROM triggers WHERE session_id = ? AND kind = ? ORDER BY id", (sid, kind))


async def insert_trigger(tx: Tx, sid: int, kind: str, spec: dict[str, Any], armed: bool,
                         state: dict[str, Any] | None = None) -> int:
    return await tx.insert(
        "INSERT INTO triggers (session_id, kind, spec, armed, created, state) VALUES (?, ?, ?, ?, ?, ?)",
        (sid, kind, json.dumps(spec), int(armed), tx.now, json.dumps(state) if state is not None else None),
    )


async def insert_triggers(tx: Tx, sid: int, items: Iterable[tuple[str, dict[str, Any]]]) -> None:
    """Add several triggers, disarmed (a loaded session's)."""
    await tx.many("INSERT INTO triggers (session_id, kind, spec, armed, created) VALUES (?, ?, ?, 0, ?)",
                  [(sid, kind, json.dumps(spec), tx.now) for kind, spec in items])


async def copy_triggers(tx: Tx, source: int, target: int) -> None:
    """Copy ``source``'s triggers to ``target``, disarmed (a fork's)."""
    await tx.later(
        "INSERT INTO triggers (session_id, kind, spec, armed, created)"
        " SELECT ?, kind, spec, 0, ? FROM triggers WHERE session_id = ?",
        (target, tx.now, source),
    )


async def delete_trigger(tx: Tx, trigger: int) -> None:
    await tx.execute("DELETE FROM triggers WHERE id = ?", (trigger,))


async def arm_triggers(tx: Tx, sid: int) -> None:
    await tx.execute("UPDATE triggers SET armed = 1 WHERE session_id = ?", (sid,))


async def fired(tx: Tx, trigger: int) -> None:
    await tx.execute("UPDATE triggers SET fired = fired + 1, last_fired = ? WHERE id = ?", (tx.now, trigger))


async def set_pending(tx: Tx, trigger: int, causes: list[dict[str, Any]]) -> None:
    await tx.execute("UPDATE triggers SET pending = ? WHERE id = ?", (json.dumps(causes), trigger))


async def take_pending(tx: Tx, sid: int) -> list[dict[str, Any]]:
    """The causes a session's triggers kept while it could not run; they are cleared."""
    rows = await tx.all("SELECT pending FROM triggers WHERE session_id = ? AND pending IS NOT NULL", (sid,))
    if not rows:
        return []
    await tx.execute("UPDATE triggers SET pending = NULL WHERE session_id = ?", (sid,))
    return [c for r in rows for c in json.loads(r["pending"])]


# ---------------------------------------------------------------- worktrees


WORKTREE_COLUMNS = "session_id, kind, path, folder, source, branch"


def worktree_infos(rows: Iterable[Sequence[Any]]) -> dict[int, Worktree]:
    """Rows of ``WORKTREE_COLUMNS`` as records, by session."""
    return {r[0]: Worktree(r[1], r[2], r[3], r[4], r[5]) for r in rows}


async def worktree(tx: Tx, sid: int) -> Row | None:
    """A session's own folder (``fork --worktree``), while it is there."""
    return await tx.one("SELECT * FROM worktrees WHERE session_id = ? AND removed IS NULL", (sid,))


async def insert_worktree(tx: Tx, sid: int, kind: str, path: str, folder: str, source: str, repo: str | None,
                          branch: str | None, base: str) -> None:
    await tx.execute("INSERT INTO worktrees (session_id, kind, path, folder, source, repo, branch, created, base)"
                     " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", (sid, kind, path, folder, source, repo, branch, tx.now, base))


async def worktree_removed(tx: Tx, sid: int) -> None:
    await tx.execute("UPDATE worktrees SET removed = ? WHERE session_id = ? AND removed IS NULL", (tx.now, sid))
    await tx.touch(sid)


async def relocate(tx: Tx, sid: int, old: str, new: str) -> None:
    """Point a session's bound files and folders under ``old`` to the same places under ``new``."""
    old, new = old.rstrip("/"), new.rstrip("/")
    await tx.execute(
        "UPDATE resources SET uri = ? || substr(uri, length(?) + 1) WHERE session_id = ?"
        " AND kind IN ('file', 'folder', 'sqlite') AND (uri = ? OR substr(uri, 1, length(?) + 1) = ? || '/')",
        (new, old, sid, old, old, old))


# ---------------------------------------------------------------- checkpoints


async def insert_checkpoint(tx: Tx, sid: int, name: str, seq: int, state: dict[str, Any]) -> int:
    return await tx.insert("INSERT INTO checkpoints (session_id, name, seq, state, created) VALUES (?, ?, ?, ?, ?)",
                           (sid, name, seq, json.dumps(state), tx.now))


# ---------------------------------------------------------------- runs


async def live_run(tx: Tx, sid: int, run: int) -> bool:
    return await tx.one("SELECT id FROM runs WHERE id = ? AND session_id = ? AND ended IS NULL", (run, sid)) is not None


async def withdraw(tx: Tx, *, run: int | None = None, session: int | None = None) -> None:
    """Withdraw what a run (or any run of a session) asked and nobody answered: it ended first."""
    column, value = ("run_id", run) if run is not None else ("session_id", session)
    await tx.execute(f"UPDATE requests SET answer = 'withdrawn', answered = ?, answered_by = 'its run ended'"
                     f" WHERE {column} = ? AND answer IS NULL", (tx.now, value))


async def forget_carried(tx: Tx, sid: int, run: int) -> None:
    """An answer carried to ``run`` (answered before it started) and not asked for again is not
    kept for later runs."""
    await tx.execute("UPDATE requests SET carried = 0 WHERE session_id = ? AND carried = 1 AND answered <"
                     " (SELECT started FROM runs WHERE id = ?)", (sid, run))


async def outside_run(tx: Tx, sid: int, cli: str, started: float, ended: float, usage: tuple[int, int, int, int]) -> int:
    """A run the agent's own CLI made outside Procession (found by ``adopt`` or ``sync``): its
    span and its token use, so that the session's figures count what its agent spent."""
    return await tx.insert(
        "INSERT INTO runs (session_id, cause, started, ended, outcome, tokens_in, tokens_out, cache_read, cache_write)"
        " VALUES (?, ?, ?, ?, 'outside', ?, ?, ?, ?)",
        (sid, json.dumps([{"kind": "outside", "cli": cli}]), started, ended, *usage))


# ---------------------------------------------------------------- the lease


async def lease(tx: Tx, host: str) -> Row | None:
    """The lease of ``host``'s engine, if one was taken and not given back."""
    return await tx.one("SELECT token, pid, host, started, heartbeat, slots, proc_start, machine FROM engines"
                        " WHERE host = ?", (host,))


async def leases(tx: Tx) -> list[Row]:
    """Every host's engine lease, by host."""
    return await tx.all("SELECT token, pid, host, started, heartbeat, slots, proc_start, machine FROM engines"
                        " ORDER BY host")


# ---------------------------------------------------------------- requests


async def asked(tx: Tx, ids: Sequence[int]) -> list[Row]:
    """The requests ``ids`` (``id, tool, subject, input``), read whole: the journal keeps a
    shortened input."""
    return await tx.all(f"SELECT id, tool, subject, input FROM requests WHERE id IN ({','.join('?' * len(ids))})",
                        ids)


# ---------------------------------------------------------------- limits


async def limit_period(tx: Tx, limit: int) -> str:
    """The period a limit caps spend over (``per``)."""
    return str(await tx.value("SELECT per FROM limits WHERE id = ?", (limit,)))


async def set_warned(tx: Tx, limit: int, start: float) -> None:
    """A limit's warning told for the period that began at ``start``: not told again in it."""
    await tx.execute("UPDATE limits SET warned = ? WHERE id = ?", (start, limit))
