"""Budgets: the limits on what sessions may spend (``limits``: one row a session's or an
agent's limit), the sessions each holds, and what those spent.

An owner is ``("session_id", SID)`` or ``("agent_id", AGENT_ID)``: the column of ``limits``
that names it, and its value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..model.states import Reason
from .base import Row, Tx

#: The sessions a limit holds, as ``held(id)``: those ``seed`` names and, at any depth, the
#: sessions forked from them or spawned by them.
_HELD = ("WITH RECURSIVE held(id) AS ({seed} UNION SELECT s.id FROM sessions s JOIN held h"
         " ON s.parent_id = h.id OR s.spawned_by = h.id) ")
#: Where a limit's sessions start: a session's, from it; an agent's, from its sessions.
_SEEDS = {"session_id": "SELECT id FROM sessions WHERE id = ?",
          "agent_id": "SELECT id FROM sessions WHERE agent_id = ?"}
#: The spend of runs started since ``?`` (the period's start), of the sessions ``held``.
_SPEND = ("SELECT COALESCE(SUM(tokens_in + tokens_out), 0), COALESCE(SUM(cost), 0),"
          " COALESCE(SUM(MAX(0, COALESCE(ended, ?) - started - frozen_s)), 0), COUNT(*) FROM runs"
          " WHERE started >= ? AND (outcome IS NULL OR outcome != 'outside') AND session_id IN (SELECT id FROM held)")


# ---------------------------------------------------------------- the limits


async def limit_of(tx: Tx, owner: tuple[str, int]) -> Row | None:
    """``owner``'s limit (it has one at most)."""
    return await tx.one(f"SELECT * FROM limits WHERE {owner[0]} = ?", (owner[1],))


async def every_limit(tx: Tx) -> list[Row]:
    return await tx.all("SELECT * FROM limits ORDER BY id")


async def limits_over(tx: Tx, sessions: list[int], agents: list[int]) -> list[Row]:
    """The limits of any of ``sessions`` or ``agents``."""
    s_marks, a_marks = ",".join("?" * len(sessions)), ",".join("?" * len(agents))
    return await tx.all(f"SELECT * FROM limits WHERE session_id IN ({s_marks}) OR agent_id IN ({a_marks})",
                        [*sessions, *agents])


async def put_limit(tx: Tx, owner: tuple[str, int], caps: Mapping[str, float | None], per: str) -> None:
    """``owner``'s limit, made now or changed: its caps (``tokens``, ``cost``, ``seconds``,
    ``runs``) and period, warned of nothing yet."""
    await tx.execute(
        f"INSERT INTO limits ({owner[0]}, tokens, cost, seconds, runs, per, made) VALUES (?, ?, ?, ?, ?, ?, ?)"
        f" ON CONFLICT ({owner[0]}) DO UPDATE SET tokens = excluded.tokens, cost = excluded.cost,"
        " seconds = excluded.seconds, runs = excluded.runs, per = excluded.per, warned = NULL",
        (owner[1], caps["tokens"], caps["cost"], caps["seconds"], caps["runs"], per, tx.now))


async def drop_limit(tx: Tx, limit: int) -> None:
    await tx.execute("DELETE FROM limits WHERE id = ?", (limit,))


# ---------------------------------------------------------------- what they hold, and what it spent


async def held(tx: Tx, owner: tuple[str, int]) -> list[int]:
    """The sessions ``owner``'s limit holds."""
    return [sid for (sid,) in await tx.tuples(_HELD.format(seed=_SEEDS[owner[0]]) + "SELECT id FROM held",
                                              (owner[1],))]


async def spend(tx: Tx, owner: tuple[str, int], now: float, start: float) -> tuple[Any, ...]:
    """What the sessions ``owner``'s limit holds spent in the runs started from ``start`` (those
    made outside Procession left out) until ``now``: tokens, cost, seconds and runs."""
    return (await tx.tuples(_HELD.format(seed=_SEEDS[owner[0]]) + _SPEND, (owner[1], now, start)))[0]


async def lineage(tx: Tx, sid: int) -> tuple[list[int], list[int]]:
    """Session ``sid`` and every session it was forked from or spawned by, at any depth; and
    the agents of those."""
    sessions: set[int] = set()
    agents: set[int] = set()
    frontier = {sid}
    while frontier:
        sessions |= frontier
        marks = ",".join("?" * len(frontier))
        found = await tx.tuples(f"SELECT agent_id, parent_id, spawned_by FROM sessions WHERE id IN ({marks})",
                                sorted(frontier))
        agents.update(a for a, _, _ in found)
        frontier = {up for _, *ups in found for up in ups if up is not None} - sessions
    return sorted(sessions), sorted(agents)


async def budget_suspended(tx: Tx) -> list[Row]:
    """The sessions suspended over a budget: their ids, and the states they resume to."""
    return await tx.all("SELECT id, resume_to FROM sessions WHERE state = 'suspended' AND reason = ?",
                        (Reason.BUDGET.value,))


async def agent_named(tx: Tx, name: str) -> int | None:
    found = await tx.value("SELECT id FROM agents WHERE name = ?", (name,))
    return None if found is None else int(found)


async def agent_name(tx: Tx, agent: int) -> str:
    return str(await tx.value("SELECT name FROM agents WHERE id = ?", (agent,)))
