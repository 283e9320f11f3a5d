"""The calls the monitor makes from the palette and the action menu; every call of the table
is reachable from the keyboard, the action menu and the palette."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.widgets import OptionList

from conftest import until
from procession import Workspace
from procession.model.calls import USER_CALLS
from procession.present import lines
from procession.tui.calls import FLOWS
from procession.tui.dialogs import ActionMenu, Form
from support.monitor import answer


async def choose(pilot: Any, app: Any, option: str) -> None:
    await until(lambda: isinstance(app.screen, ActionMenu), timeout=3)
    options = app.screen.query_one(OptionList)
    options.highlighted = [o.id for o in options._options].index(option)
    await pilot.press("enter")
    await pilot.pause()


async def call(pilot: Any, app: Any, name: str) -> None:
    app.screen.action_call(name)
    await pilot.pause()


async def test_every_call_of_the_table_is_reachable_by_key_menu_and_palette(tmp_path: Path, monitor: Any) -> None:
    db = tmp_path / "ws.db"
    async with await Workspace.open(db) as ws:
        await ws.spawn("one", "hr")
    app = await monitor(db)
    async with app.run_test(size=(160, 45)) as pilot:
        await until(lambda: app.loaded)
        keys = app.keys()
        assert set(FLOWS) == set(USER_CALLS)
        for c in USER_CALLS:
            assert keys[c.value][0], f"{c} has no key"
        await pilot.press("k")
        await until(lambda: isinstance(app.screen, ActionMenu), timeout=3)
        assert {choice.id for choice in app.screen.choices} == {c.value for c in USER_CALLS}
        await pilot.press("escape")
        from procession.tui.app import CallCommands

        provider = CallCommands(app.main)
        titles = [title for _, title, _ in provider._commands()]
        for c in USER_CALLS:  # those that apply to a sleeping session, or make a new one
            if app.main.applies(c):
                assert any(title.startswith(FLOWS[c].label) for title in titles), c


async def test_spawn_load_priority_memory_bind_and_trigger_from_the_menu(tmp_path: Path, monitor: Any,
                                                                         monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "ws.db"
    ws = await Workspace.open(db)
    first = (await ws.spawn("first", "hr")).sid
    await ws.save(first, file=str(tmp_path / "first.json"))
    app = await monitor(db)
    try:
        async with app.run_test(size=(160, 45)) as pilot:
            await until(lambda: app.loaded)
            await call(pilot, app, "spawn")
            await answer(pilot, app, "second", "docs", "builtin:echo", str(tmp_path))
            await until(lambda: _named(ws, "second"), timeout=3)
            second = (await _named(ws, "second")).id
            assert (await ws.info(second)).agent == "docs" and app.table.cursor_key == second
            await call(pilot, app, "nice")
            await answer(pilot, app, "7")
            await call(pilot, app, "memory")
            await choose(pilot, app, "set")
            await answer(pilot, app, "month", '"2026-11"')
            await call(pilot, app, "bind")
            await answer(pilot, app, "folder", ".")
            await call(pilot, app, "trigger")
            await choose(pilot, app, "add")
            await answer(pilot, app, 'cron "0 9 1 * *"')
            await until(lambda: _has_trigger(ws, second), timeout=3)
            shown = await ws.show(second)
            assert shown.info.priority == 7 and shown.memory == {"month": "2026-11"}
            assert [r.uri for r in shown.resources] == [str(tmp_path)]
            assert [lines.trigger_label(t) for t in shown.info.triggers] == ["cron 0 9 1 * *"]
            await call(pilot, app, "memory")
            await choose(pilot, app, "del:month")
            await call(pilot, app, "trigger")
            await choose(pilot, app, str(shown.info.triggers[0].id))
            await call(pilot, app, "unbind")
            await choose(pilot, app, str(shown.resources[0].id))
            await call(pilot, app, "load")  # no checkpoint to offer: straight to the file
            await answer(pilot, app, "first.json")
            await until(lambda: _count(ws, 3), timeout=3)
            shown = await ws.show(second)
            assert shown.memory == {} and shown.info.triggers == () and shown.resources == ()
            loaded = max(s.id for s in await ws.ps())
            assert not (await ws.info(loaded)).armed
            await call(pilot, app, "set")  # settings after spawn: name, goal, system prompt, timeout, window
            await until(lambda: isinstance(app.screen, Form), timeout=3)
            await answer(pilot, app, "second, renamed", "a goal", "be brief", "30", "64000", "5")
            await until(lambda: _named(ws, "second, renamed"), timeout=3)
            info = await ws.info(loaded)
            detail = await ws.show(loaded)
            assert (info.goal, detail.system, info.timeout, info.context_window) == ("a goal", "be brief", 30, 64000)
    finally:
        await ws.close()


async def _named(ws: Workspace, name: str) -> Any:
    return next((s for s in await ws.ps() if s.name == name), None)


async def _has_trigger(ws: Workspace, sid: int) -> bool:
    return bool((await ws.info(sid)).triggers)


async def _count(ws: Workspace, n: int) -> bool:
    return len(await ws.ps()) == n
