"""The monitor's header and help, read back from what the terminal gets, mostly at 80x24: the
columns that do not fit are reached by scrolling sideways (SID, NAME and S staying), the header's clock is whole and its
token figure says who counted it, and the help lists every key with its alternates.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import FIXED, until
from procession.cli import demo
from procession.tui.dialogs import Help
from support.monitor import Monitor, keys

SIZE = (80, 24)


@pytest.fixture
async def app(tmp_path: Path, monitor: Any) -> Monitor:
    made = await demo.build(tmp_path / "demo.db", clock=lambda: FIXED)
    opened: Monitor = await monitor(made.db)
    return opened


def screen_text(app: Monitor) -> list[str]:
    """The lines the terminal shows now."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def header_line(app: Monitor) -> str:
    return screen_text(app)[app.query_one("#header").region.y]


async def test_right_and_left_scroll_the_columns_that_do_not_fit(app: Monitor) -> None:
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.loaded and app.table.keys)
        await pilot.pause()
        header = header_line(app)
        assert header.rstrip().endswith("›") and "TRIGGERS" not in header and "RUNNER" not in header
        seen = set(header.split())
        for _ in range(12):  # Right until nothing is left off to the right
            await keys(pilot, "right")
            header = header_line(app)
            seen |= set(header.split())
            # the row's identity stays at the left, in the header and in the rows: SID, NAME, S
            assert header.startswith("‹") and header.split()[1:4] == ["SID▲", "NAME", "S"], header
            assert any("1 monthly payroll" in line and " S " in line for line in screen_text(app))
            if not header.rstrip().endswith("›"):
                break
        assert {"TRIGGERS", "ACTIVE", "CPU%", "RSS", "RUNNER"} <= seen
        payroll = next(line for line in screen_text(app) if "monthly payroll" in line)
        assert "command:python3" in payroll  # its runner, in the rows as in the header
        await keys(pilot, "right")  # nothing more to the right: stays
        assert "RUNNER" in header_line(app)
        for _ in range(12):
            await keys(pilot, "left")
        header = header_line(app)
        assert header.startswith(" ") and "NAME" in header and header.rstrip().endswith("›")


async def test_the_header_clock_is_whole(app: Monitor) -> None:
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.loaded and app.table.keys)
        await pilot.pause()
        second = screen_text(app)[1]
        assert time.strftime("%H:%M:%S", time.localtime(FIXED)) in second and "…" not in second


async def test_help_lists_every_key_with_its_alternates(app: Monitor) -> None:
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.loaded and app.table.keys)
        await keys(pilot, "question_mark")
        assert isinstance(app.screen, Help)
        rows = {keys_: (title, text) for keys_, title, text in app.screen.rows}
        for shown in ("F1 ?", "F3 /", "F4 \\", "F5 t", "F9 k", "F10 q", "F7 ]", "F8 [", "> .", "< ,"):
            assert shown in rows, (shown, sorted(rows))
        assert rows["r"][0] == "Resume" and rows["z"][0] == "Suspend"  # the calls' own words
        assert not any("Thaw" in title for title, _ in rows.values())
        assert any(line.split("█")[1].split()[:3] == ["F3", "/", "Search"] for line in screen_text(app)
                   if line.count("█") >= 2)
        for _ in range(10):  # it scrolls: the calls are further down
            resume = [line for line in screen_text(app) if "Resume" in line]
            if resume:
                break
            await keys(pilot, "pagedown")
        assert resume and resume[0].split("█")[1].split()[:2] == ["r", "Resume"], screen_text(app)


@pytest.mark.parametrize(("counted_by_agent", "says"), [
    ("", "Tokens bytes/4 "),
    ("id > 0", "Tokens agents' own "),
    ("id = 1", "Tokens bytes/4 + agents' own "),
])
async def test_the_header_says_who_counted_the_tokens(tmp_path: Path, monitor: Any, counted_by_agent: str,
                                                      says: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):  # the bytes/4 estimator
        monkeypatch.delenv(name, raising=False)
    db = (await demo.build(tmp_path / "demo.db", clock=lambda: FIXED)).db
    if counted_by_agent:  # as an agent CLI's report leaves them (the store has no call for it)
        with contextlib.closing(sqlite3.connect(db)) as conn, conn:
            conn.execute(f"UPDATE sessions SET agent_context = 500 WHERE {counted_by_agent}")
    app = await monitor(db)
    async with app.run_test(size=(160, 45)):
        await until(lambda: app.loaded and app.table.keys)
        await until(lambda: says in screen_text(app)[1])
