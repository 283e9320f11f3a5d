"""The questions ``grep`` asks: which messages hold every term, best first, and which forks share one.

Each store answers from its own full-text index, never by reading the messages (schema 20):
SQLite's FTS5 table over the messages' content (``messages_search``, ranked by BM25, its
snippet cut by FTS5), PostgreSQL's GIN index over each message's terms (``messages.said``,
ranked by ``ts_rank``, its snippet cut by ``ts_headline`` for the hits shown only).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from ..model.search import END, START, Query
from .base import Row, Tx, said
from .dialect import SEARCH_TEXT

#: Whether a hit is folded away in its session's context: inside a compress's fold in force,
#: and not a message a compress keeps (pinned, or the system's).
_ARCHIVED: Final = ("(m.pinned = 0 AND m.role <> 'system' AND EXISTS (SELECT 1 FROM folds f WHERE"
                    " f.session_id = m.session_id AND f.expanded IS NULL AND m.seq BETWEEN f.lo AND f.hi))")
_SHOWN: Final = "m.session_id, s.name, a.name, s.host, m.seq, m.role, m.author, m.created"
#: Words around the hits a snippet holds.
SNIPPET_WORDS: Final = 16

#: How many of the newest messages holding the words are ranked: a word in most of a million
#: messages would have each of them scored to find the best few (0.7 s here on PostgreSQL,
#: 0.8 s on SQLite); the best of the newest ``RANKED`` are shown instead, found walking back
#: from the newest (the narrowing options reach older ones).
RANKED: Final = 2_000
_JOINS: Final = " JOIN sessions s ON s.id = m.session_id JOIN agents a ON a.id = s.agent_id"

_FIND: Final = {
    # each of the newest hits scored once (BM25: ~30 µs a phrase's hit), the best of them cut
    # into snippets: ``rank``, whose ORDER BY scores as it sorts, took twice the time
    "sqlite": "WITH best AS (SELECT id, score FROM (SELECT messages_search.rowid AS id, bm25(messages_search) AS score"
              f" FROM messages_search JOIN messages m ON m.id = messages_search.rowid{_JOINS}"
              f" WHERE messages_search MATCH ?{{where}} ORDER BY messages_search.rowid DESC LIMIT {RANKED})"
              " ORDER BY score, id LIMIT ?)"
              f" SELECT {_SHOWN}, snippet(messages_search, 0, char(2), char(3), '…', {SNIPPET_WORDS}), -best.score,"
              f" {_ARCHIVED} FROM best JOIN messages_search ON messages_search.rowid = best.id"
              f" JOIN messages m ON m.id = best.id{_JOINS} WHERE messages_search MATCH ? ORDER BY best.score, best.id",
    # the query written out where it is used, not taken from a CTE: so the planner reads how
    # many messages hold its words (a word in most walks back from the newest; a rare one uses the index)
    "postgresql": "WITH hits AS (SELECT r.id, ts_rank(r.said, {query}) AS rank FROM (SELECT m.id, m.said FROM messages m"
                  f"{_JOINS} WHERE m.said @@ {{query}}{{where}} ORDER BY m.id DESC LIMIT {RANKED}) AS r"
                  " ORDER BY rank DESC, r.id LIMIT ?)"
                  f" SELECT {_SHOWN}, ts_headline('simple', m.content, {{query}}, ?), h.rank, {_ARCHIVED}"
                  f" FROM hits h JOIN messages m ON m.id = h.id{_JOINS} ORDER BY h.rank DESC, m.id",
}
#: ``ts_headline``'s options: FTS5's snippet's, as near as they go.
_HEADLINE: Final = (f"StartSel={START}, StopSel={END}, MaxWords={SNIPPET_WORDS}, MinWords={SNIPPET_WORDS // 2},"
                    " MaxFragments=1, ShortWord=0")
#: The forks that share each hit (a session's message ``seq``): its session's children forked
#: at or past it, and theirs, at any depth (positions run on along a lineage: a grandchild
#: forked at or past it holds it too); all the hits at once.
_FORKS: Final = """
    WITH RECURSIVE hit(sid, seq) AS (VALUES {hits}),
    down(sid, seq, id) AS (
        SELECT h.sid, h.seq, s.id FROM hit h JOIN sessions s ON s.parent_id = h.sid AND s.fork_seq >= h.seq
        UNION ALL
        SELECT d.sid, d.seq, s.id FROM down d JOIN sessions s ON s.parent_id = d.id AND s.fork_seq >= d.seq
    )
    SELECT sid, seq, id FROM down ORDER BY id
"""


async def take(tx: Tx, sid: int, after: int, upto: int) -> None:
    """Index session ``sid``'s messages ``after < seq <= upto``, just appended (SQLite's index;
    PostgreSQL's column is the server's to compute)."""
    if tx.store.dialect == "sqlite":
        await tx.execute("INSERT INTO messages_search (rowid, content) SELECT id, content FROM messages"
                         " WHERE session_id = ? AND seq > ? AND seq <= ?", (sid, after, upto))


async def remake(tx: Tx) -> None:
    """Index every message again (rows written otherwise than appended: a copied workspace's)."""
    if tx.store.dialect == "sqlite":
        await tx.execute("INSERT INTO messages_search (messages_search) VALUES ('rebuild')")


#: A term as PostgreSQL's index holds words (``dialect.SEARCH_TEXT``): a phrase of its parts.
_PHRASE: Final = f"phraseto_tsquery('simple', {SEARCH_TEXT.format(text='?')})"


def _fts5(query: Query) -> str:
    """Each term as an FTS5 string (a phrase of its words), every one of them required."""
    return " ".join('"' + term.replace('"', '""') + '"' for term in query.terms)


async def find(tx: Tx, query: Query, *, agent: str | None = None, host: str | None = None,
               since: float | None = None, role: str | None = None, limit: int = 20) -> list[Row]:
    """The messages holding every term of ``query`` (of that agent's sessions, host, time on,
    role), best first: session, its name, agent, host, seq, role, author, created, the
    snippet, the rank (higher is better), whether it is archived."""
    where = ""
    params: list[Any] = []
    for column, value in (("a.name", agent), ("s.host", host), ("m.role", role)):
        if value is not None:
            where += f" AND {column} = ?"
            params.append(value)
    if since is not None:
        where += " AND m.created >= ?"
        params.append(since)
    if tx.store.dialect == "sqlite":
        args: list[Any] = [_fts5(query), *params, limit, _fts5(query)]
    else:  # a plan for these words, not one made for any (which would not know how many messages hold them)
        await tx.execute("SET LOCAL plan_cache_mode = force_custom_plan")
        args = [*query.terms, *query.terms, *params, limit, *query.terms, _HEADLINE]
    phrases = "(" + " && ".join(_PHRASE for _ in query.terms) + ")"  # PostgreSQL's
    return await tx.all(said(tx, _FIND).format(query=phrases, where=where), args)


async def forks_holding(tx: Tx, hits: Sequence[tuple[int, int]]) -> dict[tuple[int, int], list[int]]:
    """The forks that share each of ``hits`` (``(session, seq)``) through their lineage."""
    if not hits:
        return {}
    found: dict[tuple[int, int], list[int]] = {hit: [] for hit in hits}
    rows = await tx.tuples(_FORKS.format(hits=", ".join("(?, ?)" for _ in hits)), [v for hit in hits for v in hit])
    for sid, seq, fork in rows:
        found[(sid, seq)].append(fork)
    return found
