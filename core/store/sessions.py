"""The questions the calls ask of sessions: listing them, showing one, their lineage and
their hosts. Reads only; what a call writes of a session is ``rows``'."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterator, Sequence
from typing import Any, Final

from ..model.records import MOVE_GOING, TriggerInfo, Worktree
from .base import Row, Tx, said
from .rows import CONTEXT, PS_SELECT, TRIGGER_COLUMNS, WORKTREE_COLUMNS, trigger_infos, worktree_infos

#: The columns ``listed`` sorts by (the keys of the monitor's columns) and their SQL.
PS_SORTS = {
    "sid": "s.id", "agent": "a.name", "host": "s.host", "name": "s.name", "state": "s.state", "priority": "s.priority",
    "context": f"COALESCE(s.agent_context, {CONTEXT})", "messages": "s.length", "active": "s.last_active",
    "runner": "s.runner", "cpu": "r.cpu", "rss": "r.rss",
}
#: Sessions named in one statement: SQLite takes so many parameters to a statement.
_CHUNK = 500
#: Up to how many names of a base a fork's number is the smallest free one (each candidate
#: one lookup in the index); past it, one past how many there are.
_NAMES_LOOKED = 64


def _changes_sql(indexed: str) -> tuple[str, str, str]:
    """``changed``'s statements: the sessions, their triggers, their worktrees."""
    ids = f"SELECT id FROM sessions{indexed} WHERE rev > ? AND id > ? ORDER BY id LIMIT ?"
    return (PS_SELECT.replace("FROM sessions s ", f"FROM sessions s{indexed} ")
            + " WHERE s.rev > ? AND s.id > ? ORDER BY s.id LIMIT ?",
            f"SELECT {TRIGGER_COLUMNS} FROM triggers WHERE session_id IN ({ids}) ORDER BY id",
            f"SELECT {WORKTREE_COLUMNS} FROM worktrees WHERE removed IS NULL AND session_id IN ({ids})")


#: What ``changed`` reads of the sessions changed since a revision (a monitor's tick): found in
#: the revision index and sorted, a cost in the sessions changed (SQLite, knowing nothing of
#: how many match, would walk every session in SID order: 30 ms at 100,000, three times a tick).
CHANGED_SQL = _changes_sql(" INDEXED BY sessions_rev")
#: What it reads of every session a page at a time (a monitor's first read): in SID order.
LOAD_SQL = _changes_sql("")


def _chunks(sids: Sequence[int]) -> Iterator[Sequence[int]]:
    for start in range(0, len(sids), _CHUNK):
        yield sids[start:start + _CHUNK]


# ---------------------------------------------------------------- listing


def listed(tx: Tx, *, terminated: bool, agent: str | None, state: str | None, sort: str, reverse: bool,
           limit: int | None, size: int) -> AsyncGenerator[list[tuple[Any, ...]], None]:
    """Rows of ``rows.PS_COLUMNS`` (the ended sessions too with ``terminated``; only those of
    ``agent``, in ``state``, when given), sorted by ``sort`` (a key of ``PS_SORTS``; ties by SID) and
    cut at ``limit`` in SQL, at most ``size`` at a time: memory flat in the number of sessions,
    and the cost of a limit of 50 that of 50 rows plus the sort."""
    where: list[str] = []
    params: list[Any] = []
    if not terminated:
        where.append("s.state != 'terminated'")
    if agent is not None:
        where.append("a.name = ?")
        params.append(agent)
    if state is not None:
        where.append("s.state = ?")
        params.append(state)
    order = PS_SORTS[sort]
    direction = " DESC" if reverse else ""
    sql = (PS_SELECT + (" WHERE " + " AND ".join(where) if where else "")
           + f" ORDER BY {order}{direction}" + (f", s.id{direction}" if order != "s.id" else "")
           + (" LIMIT ?" if limit is not None else ""))
    if limit is not None:
        params.append(limit)
    return tx.stream(sql, params, size)


async def listed_row(tx: Tx, sid: int) -> tuple[Any, ...] | None:
    """One session's row of ``rows.PS_COLUMNS``."""
    found = await tx.tuples(f"{PS_SELECT} WHERE s.id = ?", (sid,))
    return found[0] if found else None


async def triggers_of(tx: Tx, sids: Sequence[int]) -> dict[int, list[TriggerInfo]]:
    """The triggers of sessions ``sids`` (as many as one statement takes), by session."""
    marks = ", ".join("?" * len(sids))
    return trigger_infos(await tx.tuples(
        f"SELECT {TRIGGER_COLUMNS} FROM triggers WHERE session_id IN ({marks}) ORDER BY id", sids))


async def worktrees_of(tx: Tx, sids: Sequence[int]) -> dict[int, Worktree]:
    """The folders of their own (``fork --worktree``) sessions ``sids`` work in, by session."""
    marks = ", ".join("?" * len(sids))
    return worktree_infos(await tx.tuples(
        f"SELECT {WORKTREE_COLUMNS} FROM worktrees WHERE removed IS NULL AND session_id IN ({marks})", sids))


async def revision(tx: Tx) -> int:
    """The last change stamp given out: a reader that has seen it has seen every change."""
    return int(await tx.value("SELECT value FROM meta WHERE key = 'rev'"))


async def changed(tx: Tx, since: int, after: int, limit: int,
                  ) -> tuple[list[tuple[Any, ...]], dict[int, list[TriggerInfo]], dict[int, Worktree]]:
    """Rows of ``rows.PS_COLUMNS`` of the sessions changed after revision ``since`` (every
    session for 0), in SID order from ``after`` on, at most ``limit``; their triggers and
    worktrees."""
    sessions, trig_sql, wt_sql = CHANGED_SQL if since else LOAD_SQL
    found = await tx.tuples(sessions, (since, after, limit))
    trigs = trigger_infos(await tx.tuples(trig_sql, (since, after, limit))) if found else {}
    wts = worktree_infos(await tx.tuples(wt_sql, (since, after, limit))) if found else {}
    return found, trigs, wts


async def moving(tx: Tx) -> dict[int, str]:
    """The sessions on their way to another host, and to which."""
    marks = ", ".join("?" * len(MOVE_GOING))
    return dict(await tx.tuples(f"SELECT session_id, target FROM moves WHERE stage IN ({marks})", MOVE_GOING))


async def moving_to(tx: Tx, sid: int) -> str | None:
    """The host ``sid`` is on its way to, if it is moving."""
    found = await tx.value("SELECT target FROM moves WHERE session_id = ? AND stage IN ('packing', 'placing')",
                           (sid,))
    return None if found is None else str(found)


# ---------------------------------------------------------------- showing


async def settings(tx: Tx, sid: int) -> tuple[Any, ...]:
    """What a session's detail shows besides its row of the process table: ``system,
    fail_limit, restart, quiet, its agent's quiet, env, pass_env, agent_ref, tokenizer,
    token_scale, token_samples``."""
    return (await tx.tuples(
        "SELECT s.system, s.fail_limit, s.restart, s.quiet, a.quiet, s.env, s.pass_env, s.agent_ref, s.tokenizer,"
        " s.token_scale, s.token_samples FROM sessions s JOIN agents a ON a.id = s.agent_id WHERE s.id = ?",
        (sid,)))[0]


async def last_move(tx: Tx, sid: int) -> Row | None:
    """``sid``'s last move to another host, if it ever moved."""
    return await tx.one("SELECT session_id, source, target, was, folder, files, stage, problem, said, created, updated"
                        " FROM moves WHERE session_id = ?", (sid,))


async def history_length(tx: Tx, sid: int) -> int:
    """How many messages a session's history holds (0 for no session)."""
    return int(await tx.value("SELECT length FROM sessions WHERE id = ?", (sid,)) or 0)


async def history_end(tx: Tx, sid: int) -> Row | None:
    """A session's ``id, uuid, length, history_tokens``: what ``rows.append`` goes on from."""
    return await tx.one("SELECT id, uuid, length, history_tokens FROM sessions WHERE id = ?", (sid,))


async def context_tokens(tx: Tx, sid: int) -> int:
    return int(await tx.value("SELECT context_tokens FROM sessions WHERE id = ?", (sid,)))


# ---------------------------------------------------------------- lineage


async def fork_name(tx: Tx, agent: int, base: str) -> str:
    """``base`` with the next free number, among ``agent``'s sessions.

    Read in the name index (``base #2`` … sort between ``base #`` and ``base $``): the
    smallest free number, 2 or one past a number taken, each candidate one lookup; among more
    than ``_NAMES_LOOKED`` names of the base (a loop forking on and on), one past how many
    there are, when it is free (the next when they were numbered in turn), in two lookups
    whatever the forks. One statement (``_FORK_NAME``): one round trip."""
    prefix = f"{base} #"
    span = (agent, prefix, f"{base} $")
    n = await tx.value(said(tx, _FORK_NAME), (_NAMES_LOOKED, agent, prefix, len(prefix) + 1, *span, agent, prefix,
                                              *span))
    return f"{prefix}{n}"


#: The smallest number past a fork's name's base that names no session yet: the number is
#: the name's tail (SQLite's ``CAST`` reads the digits it starts with; PostgreSQL's refuses
#: anything but digits, so they are cut out first).
_NEXT_FREE: Final = {
    "sqlite": "SELECT n FROM (SELECT 2 AS n UNION ALL SELECT CAST(substr(name, ?) AS INTEGER) + 1 FROM sessions"
              " WHERE agent_id = ? AND name >= ? AND name < ?) AS c WHERE n >= 2 AND NOT EXISTS"
              " (SELECT 1 FROM sessions WHERE agent_id = ? AND name = ? || c.n) ORDER BY n LIMIT 1",
    "postgresql": "SELECT n FROM (SELECT 2 AS n UNION ALL SELECT CAST(COALESCE(substring(substr(name, CAST(? AS INT))"
                  " from '^[0-9]{1,18}'), '0') AS INTEGER) + 1 FROM sessions"
                  " WHERE agent_id = ? AND name >= ? AND name < ?) AS c WHERE n >= 2 AND NOT EXISTS"
                  " (SELECT 1 FROM sessions WHERE agent_id = ? AND name = ? || c.n) ORDER BY n LIMIT 1",
}

#: ``fork_name``'s question: how many names the base has (``taken``); one past them when there
#: are many and that name is free, else the smallest free number (``_NEXT_FREE``, read only then)
_FORK_NAME: Final = {
    dialect: "SELECT CASE WHEN k > ? AND NOT EXISTS (SELECT 1 FROM sessions WHERE agent_id = ? AND name = ? || (k + 2))"
             f" THEN k + 2 ELSE ({next_free}) END FROM (SELECT count(*) AS k FROM sessions"
             " WHERE agent_id = ? AND name >= ? AND name < ?) AS taken"
    for dialect, next_free in _NEXT_FREE.items()
}


async def parent_and_agent(tx: Tx, sid: int) -> Row | None:
    """A session's ``parent_id`` and its agent's ``name``."""
    return await tx.one("SELECT s.parent_id, a.name FROM sessions s JOIN agents a ON a.id = s.agent_id"
                        " WHERE s.id = ?", (sid,))


async def parent_and_spawner(tx: Tx, sid: int) -> Row | None:
    """A session's ``parent_id`` and ``spawned_by``."""
    return await tx.one("SELECT parent_id, spawned_by FROM sessions WHERE id = ?", (sid,))


async def offspring(tx: Tx, sids: Sequence[int]) -> list[int]:
    """The sessions forked from ``sids``, or spawned as one of them (the spawn's journal row
    names the spawning session as its other one)."""
    found: list[int] = []
    for chunk in _chunks(sids):
        marks = ",".join("?" * len(chunk))
        found += [sid for (sid,) in await tx.tuples(
            f"SELECT id FROM sessions WHERE parent_id IN ({marks})"
            f" UNION SELECT session_id FROM journal WHERE other_id IN ({marks}) AND call = 'spawn'",
            [*chunk, *chunk])]
    return found


async def folders(tx: Tx, sids: Sequence[int]) -> set[str]:
    """The folders sessions ``sids`` work in: each one's own and every file or folder bound to it."""
    found: set[str] = set()
    for chunk in _chunks(sids):
        marks = ",".join("?" * len(chunk))
        found.update(p for (p,) in await tx.tuples(
            f"SELECT cwd FROM sessions WHERE id IN ({marks}) UNION SELECT uri FROM resources"
            f" WHERE session_id IN ({marks}) AND kind IN ('folder', 'file', 'sqlite')", [*chunk, *chunk]))
    return found


# ---------------------------------------------------------------- hosts


async def several_hosts(tx: Tx, here: str) -> bool:
    """Whether a session lives on a host but ``here``: two seeks in the host index, whatever
    the sessions."""
    return bool(await tx.value("SELECT EXISTS (SELECT 1 FROM sessions WHERE host < ?)"
                               " OR EXISTS (SELECT 1 FROM sessions WHERE host > ?)", (here, here)))


async def host_known(tx: Tx, host: str, besides: int) -> bool:
    """Whether the workspace knows ``host``: a session lives there (but ``besides``), or an
    engine ran there."""
    return bool(await tx.value("SELECT 1 FROM sessions WHERE host = ? AND id <> ? UNION ALL SELECT 1 FROM engines"
                               " WHERE host = ? LIMIT 1", (host, besides, host)))


async def hosts_known(tx: Tx, besides: int) -> list[str]:
    """The hosts the workspace knows (``host_known``), by name."""
    return sorted(h for (h,) in await tx.tuples("SELECT host FROM engines UNION SELECT DISTINCT host FROM sessions"
                                                " WHERE id <> ?", (besides,)))
