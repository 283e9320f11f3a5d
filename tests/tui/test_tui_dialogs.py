"""Every dialog of the monitor, at 80x24 and at 160x45: it fits the screen, no text in it is
cut, and its hint (what saves it, what leaves it) is in view as it opens.

A text is cut when a word of it is not on the screen while the text is not inside something
that scrolls (a long help scrolls; a title or a reason must be read whole). The words are
read back from what the terminal gets (the compositor's lines), not from the widgets.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from textual.geometry import Region
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import OptionList

from conftest import FIXED, until
from procession import Workspace
from procession.cli import demo
from support.monitor import keys

PAYROLL, STRICT = 1, 7
FRAME = re.compile(r"[\s█▀▄▌▐▊▎▔▁▂▃▅▆▇▉▋▍▏╭╮╰╯│─]")


def _scrolls(widget: Widget) -> bool:
    """Whether ``widget`` or one of its ancestors can scroll (what it holds may be below the fold)."""
    node: Any = widget
    while node is not None and isinstance(node, Widget):
        if node.max_scroll_y > 0 or node.max_scroll_x > 0:
            return True
        node = node.parent
    return False


def uncut(app: Any) -> None:
    """The dialog on top fits the screen, and every word of its texts is on the screen."""
    screen = app.screen
    assert isinstance(screen, ModalScreen), screen
    width, height = app.size
    box = screen.query(".dialog").first()
    assert Region(0, 0, width, height).contains_region(box.region), (type(screen).__name__, box.region)
    strips = screen._compositor.render_strips()
    # the dialog's lines as one text, its frame and padding left out, so that a word wrapped
    # across two lines still reads whole
    inside = "".join(FRAME.sub("", strips[y].crop(box.region.x, box.region.right).text)
                     for y in range(box.region.y, box.region.bottom))
    for widget in screen.query("Static, OptionList"):
        if not widget.display or _scrolls(widget):
            continue
        if isinstance(widget, OptionList):
            texts = [str(o.prompt) for o in widget._options]
        else:
            texts = [str(widget.render())]
        for text in texts:
            missing = [w for w in text.split() if FRAME.sub("", w) not in inside]
            assert not missing, f"{type(screen).__name__} at {width}x{height}: {missing[:5]} cut from {text!r}"


def hint_shown(app: Any) -> None:
    """The dialog's hint (the keys that save, send or leave it) is on the screen as it opens,
    every word of it, however long the body above it is."""
    screen = app.screen
    box = screen.query(".dialog").first()
    hints = list(screen.query(".dialog--help"))
    if not hints:
        return
    strips = screen._compositor.render_strips()
    for hint in hints:
        region = hint.region
        assert box.region.contains_region(region), (type(screen).__name__, region, box.region)
        shown = " ".join(strips[y].crop(region.x, region.right).text for y in range(region.y, region.bottom))
        missing = [w for w in str(hint.render()).split() if w not in shown.split()]
        assert not missing, f"{type(screen).__name__}: the hint's {missing[:5]} are not on the screen"


@pytest.fixture
async def db(tmp_path: Path) -> Path:
    made = await demo.build(tmp_path / "demo.db", clock=lambda: FIXED)
    async with await Workspace.open(made.db) as ws:
        await ws.fork(PAYROLL, "payroll copy")  # 9: triggers to approve
        await ws.save(PAYROLL, "before")  # a checkpoint to load
    return made.db


@pytest.mark.parametrize("size", [(80, 24), (160, 45)])
async def test_every_dialog_fits_and_nothing_is_cut(db: Path, monitor: Any, size: tuple[int, int]) -> None:
    app = await monitor(db)
    async with app.run_test(size=size) as pilot:
        await until(lambda: app.loaded and app.table.keys)

        async def check(*pressed: str, then: tuple[str, ...] = ()) -> None:
            await keys(pilot, *pressed)
            await until(lambda: isinstance(app.screen, ModalScreen))
            await pilot.pause()
            uncut(app)
            hint_shown(app)
            for key in then:  # into the next dialog of the flow
                await keys(pilot, key)
                await until(lambda: isinstance(app.screen, ModalScreen))
                await pilot.pause()
                uncut(app)
                hint_shown(app)
            while isinstance(app.screen, ModalScreen):
                await keys(pilot, "escape")

        async def on(sid: int) -> None:
            assert app.table.move_to(sid)
            await pilot.pause()

        await check("f1")
        await check("f2")
        await check("f6")
        await on(PAYROLL)
        await check("k")
        for key in ("n", "f", "w", "E", "V", "P", "N", "g", "b", "B", "M", "T", "c", "O"):
            await check(key)
        await check("S", then=("enter",))  # a checkpoint: its name
        await check("L")  # the checkpoint offered, or a file
        await check("m")
        await check("C")
        await on(9)
        await check("A")
        await on(STRICT)
        await check("m", then=("enter",))  # the conflicts, key by key
        await check("m", then=("enter", "e"))  # and the editor of one value
