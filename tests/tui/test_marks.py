"""What is chosen reads without colour (a monochrome terminal, a colour-blind eye): the
cursor's row and tagged rows carry a mark, and a form's chosen option another shape than
the rest. Read from the characters the terminal gets, never from the styles."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from textual.widgets import RadioButton

from conftest import until
from procession import Workspace
from procession.tui.dialogs import Form, MarkedOptionList
from support.monitor import keys, line_of, to


def _screen_text(app: Any) -> list[str]:
    """The screen's lines as the terminal gets them."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


async def test_the_cursors_row_and_tagged_rows_are_marked_in_characters(tmp_path: Path, monitor: Any) -> None:
    db = tmp_path / "ws.db"
    async with await Workspace.open(db) as ws:
        sids = [(await ws.spawn(name, "a", runner="builtin:echo")).sid for name in ("one", "two", "three")]
    app = await monitor(db)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(lambda: app.loaded)
        await to(pilot, app, sids[0])
        assert [line_of(app, s)[0] for s in sids] == ["▶", " ", " "]
        await keys(pilot, "down")
        assert [line_of(app, s)[0] for s in sids] == [" ", "▶", " "]
        await keys(pilot, "space")  # tags the row and moves down
        assert [line_of(app, s)[0] for s in sids] == [" ", "*", "▶"]
        await keys(pilot, "t")  # the tree: an agent's row under the cursor is marked too
        await until(lambda: "agent:a" in app.table.keys)
        await to(pilot, app, "agent:a")
        heading = app.table.render_line(app.table.index_of("agent:a") - int(app.table.scroll_offset.y)).text
        assert heading.startswith("▶a")


@contextlib.asynccontextmanager
async def one_session_after(tmp_path: Path, monitor: Any, key: str) -> AsyncIterator[tuple[Any, Any]]:
    """The monitor on a workspace of one session, its row under the cursor, ``key`` pressed."""
    db = tmp_path / "ws.db"
    async with await Workspace.open(db) as ws:
        sid = (await ws.spawn("echo", "a", runner="builtin:echo")).sid
    app = await monitor(db)
    async with app.run_test(size=(100, 45)) as pilot:
        await to(pilot, app, sid)
        await keys(pilot, key)
        yield app, pilot


async def test_a_forms_chosen_option_has_a_shape_of_its_own(tmp_path: Path, monitor: Any) -> None:
    async with one_session_after(tmp_path, monitor, "V") as (app, pilot):
        await until(lambda: isinstance(app.screen, Form))

        buttons = list(app.screen.query_one("#field-net").query(RadioButton))

        def marks() -> list[str]:
            """Each option of the net field as the terminal shows it, up to its label."""
            lines = _screen_text(app)
            return [lines[b.region.y][b.region.x:b.region.x + 6].strip() for b in buttons[:2]]

        assert marks() == ["▐●▌ an", "▐○▌ no"]  # any, none
        buttons[1].value = True
        await pilot.pause()
        assert marks() == ["▐○▌ an", "▐●▌ no"]


async def test_a_menus_highlighted_line_is_marked_in_characters(tmp_path: Path, monitor: Any) -> None:
    """The action menu (F9), as every list of choices: the highlighted line begins with ▶."""
    async with one_session_after(tmp_path, monitor, "f9") as (app, pilot):
        menu = await until(lambda: next(iter(app.screen.query(MarkedOptionList)), None))

        def marked() -> list[int]:
            """The lines of the menu that begin with the mark."""
            lines = _screen_text(app)
            region = menu.content_region
            return [y for y in range(region.y, region.bottom) if lines[y][region.x:region.x + 1] == "▶"]

        first = marked()
        assert len(first) == 1
        await keys(pilot, "down")
        assert len(marked()) == 1 and marked() != first
