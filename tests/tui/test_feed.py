"""The monitor's data feed, on its own (no Textual): pages, revisions, totals, highlights."""

from __future__ import annotations

from pathlib import Path

from procession import State, Workspace
from procession.tui import feed as feed_mod
from procession.tui.feed import Feed


async def test_the_feed_reads_pages_then_only_what_changed_and_keeps_totals_by_difference(
        tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(feed_mod, "FIRST_PAGE", 3)
    monkeypatch.setattr(feed_mod, "PAGE", 4)
    now = [100.0]
    async with await Workspace.open(tmp_path / "ws.db") as ws:
        sids = [(await ws.spawn(f"s{i}", "a" if i % 2 else "b", window=1000)).sid for i in range(10)]
        feed = Feed(ws, lambda: now[0])
        after = await feed.load_first()
        assert after == sids[2] and len(feed.sessions) == 3 and not feed.loaded
        while after:
            after, _ = await feed.load_more(after)
        assert feed.loaded and sorted(feed.sessions) == sids
        assert feed.by_state["sleeping"] == 10 and feed.windows == 10_000
        assert feed.view.keys == sids and feed.highlights == {}

        await ws.send(sids[0], "hello")
        await ws.cancel(sids[1])
        new = (await ws.spawn("late", "a")).sid
        before, moved = await feed.refresh()
        assert set(before) == {sids[0], sids[1], new} and before[new] is None
        assert moved  # a new row
        assert feed.by_state == {"sleeping": 10, "ready": 0, "running": 0, "waiting": 0, "suspended": 0,
                                 "terminated": 1}
        tokens = sum(s.context_tokens for s in feed.sessions.values() if s.state is not State.TERMINATED)
        assert feed.tokens == tokens and feed.windows == 10_000 + 128_000 - 1000
        assert feed.highlights == {new: ("new", 103.0), sids[1]: ("ended", 103.0)}
        assert (await feed.refresh())[0] == {}  # nothing more changed: nothing read
        now[0] = 103.5
        assert sorted(feed.expire_highlights()) == sorted([new, sids[1]]) and feed.highlights == {}
        assert [s.id for s in feed.agent_sessions("a")] == [sids[3], sids[5], sids[7], sids[9], new]
        header = await feed.header()
        assert header.states["terminated"] == 1 and header.running == 0 and header.engine is None
