"""The questions the calls ask of a session's history: its messages, read through
copy-on-write lineage, and its folds. Reads only; messages are appended by ``rows.append``."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from typing import Any, Final

from ..model.records import Fold
from .base import Tx, said

#: What ``history_pages`` reads of a message, in this order.
COLUMNS = "seq, role, content, tokens, author, pinned, created, meta"
#: Which rows of a range a fold hides none of: what the active context keeps inside a fold.
PROTECTED = "(m.pinned != 0 OR m.role = 'system')"
#: History positions ``:lo < seq <= :hi`` of session ``:sid``, in order, in one statement: the
#: lineage walked up from the session only as far as ``:lo`` (each ancestor's part ends where
#: the fork below it starts, or lower, where the part below it ends), its parts put oldest
#: first, and each part read in the ``(session, seq)`` index. The rows come in the order of
#: that loop (the parts, a ``CROSS JOIN``'s outer loop, then the index within each): sorting
#: them instead would hold a million-message history before its first row. PostgreSQL promises
#: no order without one: there it is sorted (by ``seq``: the parts' ranges follow each other).
#: ``{where}``: more of a row to match.
_READ = f"""
    WITH RECURSIVE chain(id, parent_id, lo, hi, depth) AS (
        SELECT id, parent_id, fork_seq, min(length, :hi), 0 FROM sessions WHERE id = :sid
        UNION ALL
        SELECT s.id, s.parent_id, s.fork_seq, min(c.lo, c.hi), c.depth + 1
        FROM sessions s JOIN chain c ON s.id = c.parent_id WHERE c.lo > :lo
    ),
    parts AS MATERIALIZED (
        SELECT id, max(lo, :lo) AS lo, hi FROM chain WHERE hi > max(lo, :lo) ORDER BY depth DESC LIMIT -1
    )
    SELECT {", ".join("m." + c for c in COLUMNS.split(", "))}
    FROM parts p CROSS JOIN messages m ON m.session_id = p.id AND m.seq > p.lo AND m.seq <= p.hi{{where}}
"""
#: How the parts come in order: SQLite's loop over them in their order gives it; PostgreSQL's
#: plan may not, so it says so.
_IN_ORDER: Final = {"sqlite": "", "postgresql": " ORDER BY m.seq"}
#: Later than any history position: the whole history.
_END = 2**63 - 1


def history_pages(tx: Tx, sid: int, lo: int, hi: int | None, *, size: int,
                  protected: bool) -> AsyncGenerator[list[tuple[Any, ...]], None]:
    """Rows of ``COLUMNS`` of history positions ``lo < seq <= hi`` of ``sid`` (all of it from
    ``lo`` on for None), in order, at most ``size`` at a time (only the protected ones with
    ``protected``): one statement whatever the lineage's depth (``_READ``)."""
    where = f" AND {PROTECTED}" if protected else ""
    params = {"sid": sid, "lo": lo, "hi": _END if hi is None else hi}
    return tx.stream(_READ.format(where=where) + said(tx, _IN_ORDER), params, size)


async def cum_tokens(tx: Tx, sid: int, seq: int) -> int | None:
    """Sum of the tokens of history positions 1..``seq`` (None: there is no position ``seq``):
    one indexed lookup in the session that wrote position ``seq``, found by going up the
    lineage only as far as it (a fork at the end of a deep chain reads its own row, whatever
    the depth)."""
    value = await tx.value(
        """
        WITH RECURSIVE up(id, parent_id, fork_seq) AS (
            SELECT id, parent_id, fork_seq FROM sessions WHERE id = ?
            UNION ALL
            SELECT s.id, s.parent_id, s.fork_seq FROM sessions s JOIN up ON s.id = up.parent_id
            WHERE up.fork_seq >= ?
        )
        SELECT m.cum_tokens FROM up JOIN messages m ON m.session_id = up.id AND m.seq = ?
        WHERE up.fork_seq < ? LIMIT 1
        """,
        (sid, seq, seq, seq),
    )
    return None if value is None else int(value)


async def folds_in_force(tx: Tx, sid: int) -> list[Fold]:
    """The session's folds in force, oldest first."""
    rows = await tx.all(
        "SELECT id, lo, hi, summary, summary_tokens, archived_count, archived_tokens, created"
        " FROM folds WHERE session_id = ? AND expanded IS NULL ORDER BY id",
        (sid,),
    )
    return [Fold(*row) for row in rows]


async def unprotected(tx: Tx, sid: int, lo: int, hi: int) -> tuple[int, int]:
    """How many unprotected messages ``lo..hi`` of a session's own segment holds, and their tokens."""
    found = await tx.one("SELECT count(*), coalesce(sum(tokens), 0) FROM messages WHERE session_id = ?"
                         " AND seq BETWEEN ? AND ? AND pinned = 0 AND role != 'system'", (sid, lo, hi))
    assert found is not None  # an aggregate's row
    return int(found[0]), int(found[1])


async def last_said(tx: Tx, sid: int, cli: str) -> int | None:
    """The newest of a session's own messages its runner, or its agent CLI ``cli``, wrote."""
    own = await tx.value("SELECT seq FROM messages WHERE session_id = ? AND author IN ('runner', ?)"
                         " ORDER BY seq DESC LIMIT 1", (sid, cli))  # from the end: the newest is near it
    return None if own is None else int(own)


async def written_by(tx: Tx, sid: int, cli: str, after: int) -> int:
    """How many of a session's own messages after position ``after`` its agent CLI ``cli``
    wrote: what the CLI's transcript gave it (``sync``, or an engine following it)."""
    return int(await tx.value("SELECT count(*) FROM messages WHERE session_id = ? AND seq > ? AND author = ?",
                              (sid, after, cli)))


async def held_at(tx: Tx, sid: int, when: float) -> int | None:
    """The newest of a session's own messages made at ``when`` or before."""
    held = await tx.value("SELECT seq FROM messages WHERE session_id = ? AND created <= ? ORDER BY seq DESC LIMIT 1",
                          (sid, when))
    return None if held is None else int(held)


async def stored_by_run(tx: Tx, sid: int, run: int) -> list[tuple[Any, ...]]:
    """``(role, content)`` of the messages run ``run`` stored itself after its prompt, in order."""
    upto = await tx.value("SELECT prompt_upto FROM runs WHERE id = ?", (run,))
    return await tx.tuples(said(tx, _BY_RUN), (sid, upto or 0, run))


#: The messages a run stored itself after its prompt (a message's ``meta`` names its run).
_BY_RUN: Final = {
    "sqlite": "SELECT role, content FROM messages WHERE session_id = ? AND seq > ? AND json_extract(meta, '$.run') = ?"
              " ORDER BY seq",
    "postgresql": "SELECT role, content FROM messages WHERE session_id = ? AND seq > ?"
                  " AND (meta::jsonb ->> 'run') = CAST(? AS TEXT) ORDER BY seq",
}


async def tool_calls(tx: Tx, sid: int, runs: Sequence[int]) -> list[tuple[Any, ...]]:
    """``(seq, meta, created)`` of session ``sid``'s tool calls made by ``runs``, in order: read
    from the first of their prompts on (by the history's index), not the whole history."""
    if not runs:
        return []
    marks = ", ".join("?" * len(runs))
    return await tx.tuples(said(tx, _TOOLS).format(marks=marks), (sid, *runs, *runs))


#: A session's tool calls of some runs (a tool call's ``meta`` names its run), after the
#: earliest of their prompts (what a run stores comes after its prompt).
_AFTER_PROMPTS: Final = "seq > (SELECT coalesce(min(coalesce(prompt_upto, 0)), 0) FROM runs WHERE id IN ({marks}))"
_TOOLS: Final = {
    "sqlite": f"SELECT seq, meta, created FROM messages WHERE session_id = ? AND role = 'tool' AND {_AFTER_PROMPTS}"
              " AND json_extract(meta, '$.run') IN ({marks}) ORDER BY seq",
    "postgresql": f"SELECT seq, meta, created FROM messages WHERE session_id = ? AND role = 'tool' AND {_AFTER_PROMPTS}"
                  " AND CAST(meta::jsonb ->> 'run' AS BIGINT) IN ({marks}) ORDER BY seq",
}
