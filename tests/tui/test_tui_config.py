"""The monitor's config file: remapped keys work, mistakes are reported and replaced by defaults."""

from __future__ import annotations

import os
import time
from pathlib import Path

from conftest import until
from procession import State, Workspace
from procession.cli import demo
from procession.tui import config as config_mod
from procession.tui import themes


async def test_a_remapped_key_makes_its_call_and_the_old_key_does_not(tmp_path: Path, monitor) -> None:
    db = (await demo.build(tmp_path / "demo.db")).db
    path = tmp_path / "config.toml"
    path.write_text('[keys]\nsuspend = "ctrl+z"\n')
    config = config_mod.load(path)
    assert config.keys == {"suspend": "ctrl+z"} and not config.problems
    app = await monitor(db, config=config)
    witness = await Workspace.open(db)
    try:
        async with app.run_test(size=(160, 45)) as pilot:
            await until(lambda: app.loaded)
            assert app.table.cursor_key == 1
            await pilot.press("z")
            await pilot.pause()
            assert (await witness.info(1)).state is State.SLEEPING
            await pilot.press("ctrl+z")
            await pilot.pause()
            await until(lambda: _state(witness, 1, State.SUSPENDED))
            await pilot.press("f1")  # the help shows the key as remapped
            await pilot.pause()
            rows = {title: keys for keys, title, _ in app.screen.rows}
            assert rows["Suspend"] == "^z"
    finally:
        await witness.close()


async def _state(ws: Workspace, sid: int, state: State) -> bool:
    return (await ws.info(sid)).state is state


def test_bad_settings_are_reported_and_defaults_used(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('theme = 3\ninterval = 500\ncolumns = ["sid", "nonsense"]\nkeys = "z"\n')
    config = config_mod.load(path)
    assert (config.theme, config.interval, config.columns, config.keys) == (
        config_mod.DEFAULT_THEME, config_mod.DEFAULT_INTERVAL, list(config_mod.DEFAULT), {})
    assert len(config.problems) == 4 and all(str(path) in p for p in config.problems)
    path.write_text("this is [not toml")
    broken = config_mod.load(path)
    assert broken.problems and broken.theme == config_mod.DEFAULT_THEME


async def test_quitting_with_steps_running_in_the_monitors_engine_asks_first(tmp_path: Path, monitor) -> None:
    from procession.tui.dialogs import Confirm

    db = tmp_path / "ws.db"
    ws = await Workspace.open(db)
    sid = (await ws.spawn("long", "a", runner="builtin:sleep:30")).sid
    await ws.activate(sid)
    app = await monitor(db, engine=True, clock=time.time)
    try:
        async with app.run_test(size=(160, 45)) as pilot:
            await until(lambda: _state(ws, sid, State.RUNNING))
            await pilot.press("q")
            await pilot.pause()
            assert isinstance(app.screen, Confirm) and "1 step running" in app.screen.title_text
            await pilot.press("n")
            await pilot.pause()
            assert app.is_running and (await ws.info(sid)).state is State.RUNNING
            await pilot.press("q")
            await pilot.pause()
            await pilot.press("y")
            await pilot.pause()
        assert (await ws.runs(sid))[-1].outcome == "interrupted"
    finally:
        await ws.close()


def test_a_key_nothing_reads_and_a_config_that_is_not_a_file_are_said(tmp_path: Path) -> None:
    """A typo in ``[keys]`` or at the wrong level is one of the monitor's problems (shown when it
    opens), not ignored; a config or a theme that is a FIFO is refused at once, never waited on."""
    path = tmp_path / "config.toml"
    path.write_text('refresh = 5\n[keys]\nsuspnd = "z"\n')
    problems = config_mod.load(path).problems
    assert any("refresh" in p for p in problems) and any("suspnd" in p and "suspend" in p for p in problems)
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    assert config_mod.load(fifo).problems  # refused in one line, and the defaults used
    problem = themes.load_file(fifo)
    assert isinstance(problem, themes.ThemeProblem) and "cannot be read" in problem.reason
