"""The calls the monitor makes from the palette and the action menu only (no key of their own)."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Input

from conftest import until
from procession import Workspace
from procession.tui.app import ProcessionApp
from procession.tui.config import Config


async def answer(pilot, app, text: str) -> None:
    await until(lambda: app.screen.query(Input), timeout=3)
    app.screen.query_one(Input).value = text
    await pilot.press("enter")
    await pilot.pause()


async def test_spawn_load_priority_memory_bind_and_trigger_from_the_palette(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "ws.db"
    ws = await Workspace.open(db)
    first = await ws.spawn("first", "hr")
    await ws.export(first, str(tmp_path / "first.json"))
    app = ProcessionApp(db, engine=False, config=Config(path=None), user_themes=tmp_path / "themes")
    try:
        async with app.run_test(size=(160, 45)) as pilot:
            await until(lambda: app.loaded)
            await app.run_action("spawn")
            await answer(pilot, app, "second")
            await answer(pilot, app, "docs")
            await until(lambda: _named(ws, "second"), timeout=3)
            second = (await _named(ws, "second")).id
            assert (await ws.info(second)).agent == "docs" and app.table.cursor_key == second
            await app.run_action("set_priority")
            await answer(pilot, app, "7")
            await app.run_action("set_memory")
            await answer(pilot, app, 'month="2026-11"')
            await app.run_action("bind")
            await answer(pilot, app, "folder .")
            await app.run_action("add_trigger")
            await answer(pilot, app, 'cron "0 9 1 * *"')
            await until(lambda: _has_trigger(ws, second), timeout=3)
            shown = await ws.show(second)
            assert shown.info.priority == 7 and shown.memory == {"month": "2026-11"}
            assert [r.uri for r in shown.resources] == [str(tmp_path)]
            assert [t.label for t in shown.info.triggers] == ["cron 0 9 1 * *"]
            await app.run_action("set_memory")
            await answer(pilot, app, "-month")
            await app.run_action("load")
            await answer(pilot, app, "first.json")
            await until(lambda: _count(ws, 3), timeout=3)
            assert (await ws.show(second)).memory == {}
            loaded = max(s.id for s in await ws.ps())
            assert not (await ws.info(loaded)).armed
    finally:
        await ws.close()


async def _named(ws: Workspace, name: str):
    return next((s for s in await ws.ps() if s.name == name), None)


async def _has_trigger(ws: Workspace, sid: int) -> bool:
    return bool((await ws.info(sid)).triggers)


async def _count(ws: Workspace, n: int) -> bool:
    return len(await ws.ps()) == n
