"""``grep``: what was said, found across every session from the store's own full-text index
(issue 39), on each store alike."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import STORES
from procession import InvalidArgument, Workspace
from procession.model.errors import ProcessionError
from support.stores import BACKENDS

pytestmark = STORES

#: Words every message may hold besides its own: a search for one of them finds many.
COMMON = ("payroll", "migration", "zebra", "été", "build")


def _forks_holding(sessions: dict[int, tuple[int | None, int]], owner: int, seq: int) -> list[int]:
    """Walked by hand, from the sessions' rows: the descendants whose lineage, at each step
    down from ``owner``, forked at or past ``seq``."""
    out, frontier = [], [owner]
    while frontier:
        parent = frontier.pop()
        for sid, (up, at) in sessions.items():
            if up == parent and at >= seq:
                out.append(sid)
                frontier.append(sid)
    return sorted(out)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["send", "transcript", "fork", "compress", "merge", "expand"]),
                          st.integers(0, 1000), st.integers(1, 5)), min_size=1, max_size=14))
def test_every_message_appended_forked_compressed_or_merged_is_found_by_a_word_it_holds(
        store_kind: str, tmp_path: Path, request: pytest.FixtureRequest, steps: list[tuple[str, int, int]]) -> None:
    """Whatever was done (messages sent one at a time or as a transcript, forks at any point,
    compresses and their undoing, merges), each message is found by the word it alone was
    written with: once in the session that holds its row (and once more in a merge's target,
    which a merge copies it into), with exactly the forks that share it, marked archived
    exactly when a compress folded it away; a word no message holds finds nothing."""
    backend = BACKENDS[store_kind]
    folder = tmp_path / uuid.uuid4().hex
    folder.mkdir()
    target = backend.workspace(request.getfixturevalue(backend.server) if backend.server else None, folder)
    made = iter(range(1_000_000))

    def text(pick: int) -> str:
        return f"w{next(made)}x said {COMMON[pick % len(COMMON)]} and {COMMON[pick // 7 % len(COMMON)]}"

    async def go() -> None:
        async with await Workspace.open(target) as ws:
            sids = [(await ws.spawn("root", "a")).sid]
            await ws.send(sids[0], text(0))
            for kind, pick, n in steps:
                sid = sids[pick % len(sids)]
                try:
                    if kind == "send":
                        for _ in range(n):
                            await ws.send(sid, text(pick), role=("user", "assistant", "tool")[pick % 3])
                    elif kind == "transcript":
                        await ws.send_many(sid, [{"role": "assistant", "content": text(pick + i)} for i in range(n)])
                    elif kind == "fork":
                        length = (await ws.info(sid)).length
                        sids.append((await ws.fork(sid, at=pick % (length + 1))).sid)
                    elif kind == "compress":
                        await ws.compress(sid, keep_last=n)
                    elif kind == "expand":
                        await ws.expand(sid)
                    elif len(sids) > 1:
                        await ws.merge(sids[-1], sids[pick % (len(sids) - 1)])
                except ProcessionError:
                    pass  # refused (nothing to fold, a merge that cannot be): nothing was done
            rows = backend.sql(target, "SELECT session_id, seq, content, role, pinned FROM messages", ())
            lineage = {r[0]: (r[1], r[2]) for r in backend.sql(target, "SELECT id, parent_id, fork_seq FROM sessions", ())}
            folds = backend.sql(target, "SELECT session_id, lo, hi FROM folds WHERE expanded IS NULL", ())
            holding: dict[str, dict[tuple[int, int], tuple[str, int]]] = {}
            for owner, seq, content, role, pinned in rows:  # a merge copies a fork's messages into its target
                holding.setdefault(content.split()[0], {})[(owner, seq)] = (role, pinned)
            for word, where in holding.items():
                found = await ws.grep(word, limit=50)
                assert sorted((f.session, f.seq) for f in found) == sorted(where), (word, found)
                for f in found:
                    assert list(f.forks) == _forks_holding(lineage, f.session, f.seq), word
                    role, pinned = where[(f.session, f.seq)]
                    archived = role != "system" and not pinned and any(
                        s == f.session and lo <= f.seq <= hi for s, lo, hi in folds)
                    assert f.archived == archived, word
                    assert f"\x02{word}\x03" in f.snippet
            assert await ws.grep("w999999999x") == []
            common = await ws.grep(COMMON[0], limit=1000)
            assert len(common) == sum(COMMON[0] in r[2].split() for r in rows)

    asyncio.run(go())


async def test_grep_narrows_by_agent_host_role_and_time_and_says_what_it_refuses(ws: Workspace) -> None:
    """The filters narrow what the index found (an agent's sessions, a host's, a role, from a
    time on), a phrase must be found as written, and a query of nothing to find, a role that
    is none, or no room for a hit is refused in one line, changing nothing."""
    from procession.store import rows

    billing = (await ws.spawn("invoices", "billing")).sid
    ops = (await ws.spawn("deploy", "ops")).sid
    await ws.send(billing, "the quarterly payroll run failed twice")
    await ws.send(ops, "payroll service deployed", role="assistant")
    await ws.send(ops, "deployed the run of payroll", role="tool")
    async with ws.store.tx() as tx:
        await rows.update_session(tx, ops, host="north")
    assert [f.session for f in await ws.grep("payroll", agent="billing")] == [billing]
    assert {f.session for f in await ws.grep("payroll", host="north")} == {ops}
    assert [f.seq for f in await ws.grep("payroll", role="tool")] == [2]
    assert [f.session for f in await ws.grep('"payroll run"')] == [billing]
    assert len(await ws.grep("payroll run")) == 2  # both words, anywhere in the message
    later = time.time() + 3600
    assert await ws.grep("payroll", since=later) == []
    for bad, said in (('" "', "nothing to look for"), ("-- ;;", "nothing to look for")):
        with pytest.raises(InvalidArgument, match=said):
            await ws.grep(bad)
    with pytest.raises(InvalidArgument, match="bad role"):
        await ws.grep("payroll", role="robot")
    with pytest.raises(InvalidArgument, match="at least one"):
        await ws.grep("payroll", limit=0)


async def test_paths_and_long_texts_are_found_by_their_words_alike_on_both_stores(ws: Workspace) -> None:
    """Punctuation parts words on both stores (PostgreSQL's parser alone would keep a path, an
    address or a file name whole, found by none of its parts); a message whose words are more
    than PostgreSQL's ``tsvector`` holds (1 MB: a log, a list of hashes) is stored all the same
    and found by a word of its first 200,000 characters."""
    import hashlib

    sid = (await ws.spawn("s", "a")).sid
    await ws.send(sid, "edited core/engine/engine.py and https://example.com/docs, mail ana@example.org")
    for typed in ("engine", "engine.py", "core/engine", "example", "docs", "ana", '"example org"'):
        assert [f.seq for f in await ws.grep(typed)] == [1], typed
    hashes = " ".join(hashlib.md5(str(i).encode()).hexdigest() for i in range(40_000))  # 1.3 MB, every word new
    await ws.send(sid, "kiwi " + hashes)
    assert [f.seq for f in await ws.grep("kiwi")] == [2]
    assert [f.seq for f in await ws.grep(hashlib.md5(b"7").hexdigest())] == [2]
    assert [m.content for m in await ws.history(sid)][1] == "kiwi " + hashes


async def test_the_text_a_query_holds_is_looked_for_never_read_as_the_index_language(ws: Workspace) -> None:
    """FTS5 and tsquery each have a language of their own (``NEAR``, ``OR``, ``*``, ``:``,
    ``!``, ``&``, column filters): what a person types is only ever words to find, so a query
    holding any of it finds what holds those words, and breaks nothing."""
    sid = (await ws.spawn("s", "a")).sid
    await ws.send(sid, "content: NEAR the OR gate & !bang's \"quote\" a*b (paren) col:umn")
    for typed in ("content:", "NEAR", "OR gate", "!bang's", '"quote"', "a*b", "(paren)", "col:umn", "gate &", "gate -"):
        assert [f.session for f in await ws.grep(typed)] == [sid], typed
    assert await ws.grep("AND") == [] and await ws.grep("OR NOT") == []


def _make_older(cli: Any, db: Path | str) -> None:
    """The workspace as an older Procession left it: no search index (schema 19)."""
    if str(db).startswith("postgresql://"):
        backend = BACKENDS["postgresql"]
        for statement in ("DROP INDEX messages_search", "ALTER TABLE messages DROP COLUMN said",
                          "UPDATE meta SET value = '19' WHERE key = 'schema'"):
            backend.sql(db, statement, ())
    else:
        backend = BACKENDS["sqlite"]
        for statement in ("DROP TABLE messages_search", "PRAGMA user_version = 19"):
            backend.sql(db, statement, ())


async def test_an_older_workspace_has_what_it_held_indexed_by_its_migration_saying_how_far(cli, db) -> None:
    """The index is built for the messages a workspace held before it had one: by the
    migration that opening an SQLite file applies (in batches, each said on standard error),
    or by ``procession upgrade`` on a shared database; everything held is found after."""
    async with await Workspace.open(db) as ws:
        sid = (await ws.spawn("old", "a")).sid
        await ws.send_many(sid, [{"role": "user", "content": f"m{i} of the zebra{i % 10} herd"} for i in range(300)])
    _make_older(cli, db)
    if str(db).startswith("postgresql://"):
        refused = cli("grep", "zebra3", check=False)
        assert refused.returncode != 0 and "procession upgrade" in refused.stderr
        upgraded = cli("upgrade")
        assert "indexing what was said, for search: 300 messages" in upgraded.stderr, upgraded.stderr
        found = cli("grep", "zebra3", "-n", "100")
    else:
        found = cli("grep", "zebra3", "-n", "100")
        assert "indexing what was said, for search: 300 of 300 messages" in found.stderr, found.stderr
    assert found.stdout.count("[zebra3]") == 30
    again = cli("grep", "zebra3", "-n", "100")
    assert "indexing" not in again.stderr and again.stdout.count("[zebra3]") == 30
