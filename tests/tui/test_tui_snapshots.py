"""SVG snapshots of the monitor's main views, on the demo workspace at a fixed clock.

Regenerate after a deliberate change of the look (or a Textual upgrade) with
``pytest tests/test_tui_snapshots.py --snapshot-update`` and look at the new SVGs before
committing them. Everything that could differ between machines is pinned: the clock (the
store's and the monitor's), the time zone, the host and the token counter; the demo's runners are
relative commands, so no machine path shows.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from procession import Workspace
from procession.cli import demo
from procession.tui.app import ProcessionApp
from procession.tui.config import Config
from procession.tui.dialogs import Conflicts, Form, Help
from procession.tui.detail import Detail

FIXED = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC
SIZE = (160, 45)
REVIEW, STRICT = 6, 7


@pytest.fixture(autouse=True)
def _pinned(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.chdir("/")  # the demo's sessions without a folder of their own work where it was built
    monkeypatch.setenv("PROCESSION_HOST", "devbox")  # not this machine's name
    for name in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):  # always the bytes/4 estimator
        monkeypatch.delenv(name, raising=False)
    old_tz = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if old_tz is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = old_tz
    time.tzset()


async def _build(db: Path) -> Path:
    made = await demo.build(db, clock=lambda: FIXED)
    return made.db


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Any]:
    """The snapshot plugin runs the app in a loop of its own: the workspace is opened (and closed)
    in loops of their own too; its connection's thread serves whichever loop awaits it."""
    db = asyncio.run(_build(tmp_path / "demo.db"))
    ws = asyncio.run(Workspace.open(db, actor="tui"))

    def make(**kwargs: Any) -> ProcessionApp:
        return ProcessionApp(ws, engine=False, clock=lambda: FIXED, config=Config(path=None),
                             user_themes=tmp_path / "themes", **kwargs)

    yield make
    asyncio.run(ws.close())


async def _wait(pilot: Any, predicate: Any) -> None:
    for _ in range(200):
        if predicate():
            return
        await pilot.pause(0.02)
    raise AssertionError("the view did not appear")


def _cursor_on(sid: int) -> Any:
    async def run_before(pilot: Any) -> None:
        await _wait(pilot, lambda: sid in pilot.app.table.keys)
        pilot.app.table.move_to(sid)
        await pilot.pause()

    return run_before


def test_table(app: Any, snap_compare: Any) -> None:
    assert snap_compare(app(), terminal_size=SIZE, run_before=_cursor_on(REVIEW))


def test_tree(app: Any, snap_compare: Any) -> None:
    assert snap_compare(app(), terminal_size=SIZE, run_before=_cursor_on(STRICT), press=["t"])


def test_detail(app: Any, snap_compare: Any) -> None:
    async def run_before(pilot: Any) -> None:
        await _cursor_on(REVIEW)(pilot)
        await pilot.press("enter")
        await _wait(pilot, lambda: isinstance(pilot.app.screen, Detail) and pilot.app.screen.rev >= 0)

    assert snap_compare(app(), terminal_size=SIZE, run_before=run_before)


def test_merge_conflict_dialog(app: Any, snap_compare: Any) -> None:
    async def run_before(pilot: Any) -> None:
        await _cursor_on(STRICT)(pilot)
        await pilot.press("m")
        await _wait(pilot, lambda: isinstance(pilot.app.screen, Form))
        await pilot.press("enter")  # into its parent, prefilled
        await _wait(pilot, lambda: isinstance(pilot.app.screen, Conflicts))

    assert snap_compare(app(), terminal_size=SIZE, run_before=run_before)


def test_light_theme(app: Any, snap_compare: Any) -> None:
    assert snap_compare(app(theme="paper"), terminal_size=SIZE, run_before=_cursor_on(REVIEW))


def test_help(app: Any, snap_compare: Any) -> None:
    async def run_before(pilot: Any) -> None:
        await pilot.press("f1")
        await _wait(pilot, lambda: isinstance(pilot.app.screen, Help))

    assert snap_compare(app(), terminal_size=SIZE, run_before=run_before)
