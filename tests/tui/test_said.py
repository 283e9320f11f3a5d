"""The monitor finds what was said (Ctrl+F): hits of every session's messages as the words are
typed, and Enter opens the session at the message (marked; an archived one in its fold), at
160x45 and at 80x24."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input, OptionList, Static

from conftest import FIXED, until
from procession import Workspace
from procession.cli import demo
from procession.tui.detail import Detail
from procession.tui.said import Said
from support.monitor import Monitor, keys

SIZES = [(160, 45), (80, 24)]


@pytest.fixture
async def db(tmp_path: Path) -> Path:
    return (await demo.build(tmp_path / "demo.db", clock=lambda: FIXED)).db


def _hits(app: Monitor) -> str:
    return "\n".join(str(o.prompt) for o in app.screen.query_one("#said-hits", OptionList).options)


def _context(app: Monitor) -> str:
    return str(app.screen.query_one("#body-context", Static).render())


@pytest.mark.parametrize("size", SIZES)
async def test_ctrl_f_finds_what_was_said_and_opens_the_session_at_the_message(monitor, db, size) -> None:
    async with await Workspace.open(db, actor="test") as ws:
        sid = (await ws.spawn("quarterly", "billing")).sid
        for i in range(12):
            await ws.send(sid, f"note {i}: the kumquat ledger row {i} checked")
        await ws.send(sid, "the kumquat export [/red] is late")  # markup-looking text stays text
        await ws.compress(sid, keep_last=3)
        seq = (await ws.info(sid)).length
    app: Monitor = await monitor(db)
    async with app.run_test(size=size) as pilot:
        await until(lambda: app.loaded and app.table.keys)
        await keys(pilot, "ctrl+f")
        assert isinstance(app.screen, Said)
        app.screen.query_one("#said-query", Input).value = "kumquat export"
        await until(lambda: "message" in _hits(app))
        assert f"{sid} quarterly, message {seq}" in _hits(app) and "[kumquat] [export] [/red] is late" in _hits(app)
        assert _hits(app).count("message") == 1
        await keys(pilot, "enter", "enter")  # to the hits, then open the first
        assert isinstance(app.screen, Detail) and app.screen.sid == sid
        await until(lambda: f"▼ message {seq}, found" in _context(app))
        await keys(pilot, "escape")
        assert isinstance(app.screen, Said)

        app.screen.query_one("#said-query", Input).value = '"ledger row 2"'
        await until(lambda: "(archived)" in _hits(app))
        await keys(pilot, "down", "enter")
        await until(lambda: isinstance(app.screen, Detail) and "is archived in this fold" in _context(app))
        assert f"procession history {sid} --range 3:3" in _context(app)
        await keys(pilot, "escape")

        app.screen.query_one("#said-query", Input).value = '[/] " "'  # what was typed is quoted back as text
        await until(lambda: "nothing to look for in '[/] \" \"'" in str(app.screen.query_one("#said-title", Static).render()))
        await keys(pilot, "escape")
        assert not isinstance(app.screen, Said | Detail)
