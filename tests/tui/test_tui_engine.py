"""The monitor and the engine: what it says when none runs, when one dies, when a session fails,
and what a running step prints, live."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from textual.widgets import Log

from conftest import until
from procession import State, Workspace
from procession.tui.detail import Detail
from support.monitor import keys, to


async def test_a_with_no_engine_anywhere_says_the_run_waits(tmp_path: Path, monitor: Any) -> None:
    db = tmp_path / "ws.db"
    async with await Workspace.open(db) as ws:
        sid = (await ws.spawn("s", "a")).sid
    app = await monitor(db)  # no engine of its own, none elsewhere
    async with app.run_test(size=(160, 45)) as pilot:
        await to(pilot, app, sid)
        await keys(pilot, "a")
        await until(lambda: app.said("no engine runs on this workspace", "waits in the queue"))


async def test_the_monitor_runs_the_engine_when_the_one_it_watched_dies(tmp_path: Path, monitor: Any) -> None:
    db = tmp_path / "ws.db"
    async with await Workspace.open(db) as ws:
        sid = (await ws.spawn("s", "a", runner="command:echo hello")).sid
    other = subprocess.Popen([sys.executable, "-m", "procession", "--db", str(db), "run"], stderr=subprocess.DEVNULL)
    try:
        async with await Workspace.open(db) as ws:
            await until(lambda: _engine(ws))
        app = await monitor(db, engine=True, clock=time.time)
        async with app.run_test(size=(160, 45)) as pilot:
            meters = app.main.query_one("#meters")
            await until(lambda: meters.engine.startswith(f"pid {other.pid}"))
            other.kill()
            await asyncio.to_thread(other.wait)
            await until(lambda: meters.engine.startswith("this process"))
            assert f"after the engine of pid {other.pid}" in meters.engine
            assert app.said(f"the engine of pid {other.pid}", "this monitor runs the engine now")
            await to(pilot, app, sid)
            await keys(pilot, "a")  # and it runs steps
            await until(lambda: app.feed.sessions[sid].last_outcome == "ok")
    finally:
        if other.poll() is None:
            other.kill()


async def test_a_session_suspended_for_failing_is_told_and_marked(tmp_path: Path, monitor: Any) -> None:
    db = tmp_path / "ws.db"
    async with await Workspace.open(db) as ws:
        sid = (await ws.spawn("flaky", "a", runner="builtin:fail")).sid
        await ws.set(sid, fail_limit=1)
    app = await monitor(db, engine=True, clock=time.time)
    async with app.run_test(size=(160, 45)) as pilot:
        await to(pilot, app, sid)
        await keys(pilot, "a")
        await until(lambda: app.said("is suspended: its last 1 run failed", severity="error"))
        info = app.feed.sessions[sid]
        assert info.state is State.SUSPENDED and info.reason == "failing"
        line = app.table.render_line(app.table.index_of(sid) - int(app.table.scroll_offset.y)).text
        assert "flaky (failing)" in line and " T " in line and "failed" in line


async def test_the_detail_view_shows_a_running_steps_log_as_it_comes(tmp_path: Path, monitor: Any) -> None:
    db = tmp_path / "ws.db"
    async with await Workspace.open(db) as ws:
        go = tmp_path / "go"  # the step says its second line once the test has seen the first
        sid = (await ws.spawn("talker", "a", cwd=str(tmp_path), runner=f"command:echo first; while [ ! -e {go} ];"
                              " do sleep 0.05; done; echo 'second \x1b[31mred'; sleep 300")).sid
    app = await monitor(db, engine=True, clock=time.time)
    async with app.run_test(size=(160, 45)) as pilot:
        await to(pilot, app, sid)
        await keys(pilot, "a")
        await until(lambda: app.feed.sessions[sid].state is State.RUNNING)
        await keys(pilot, "enter")
        assert isinstance(app.screen, Detail)
        log = app.screen.query_one("#body-log", Log)
        await until(lambda: "first" in "\n".join(log.lines))
        assert "second" not in "\n".join(log.lines)
        go.touch()
        await until(lambda: "second" in "\n".join(log.lines))  # live, not at the end
        assert "\\x1b[31mred" in "\n".join(log.lines) and "\x1b" not in "\n".join(log.lines)
        await keys(pilot, "i")


async def _engine(ws: Workspace) -> Any:
    return (await ws.activity())["engine"]


async def test_the_monitor_stops_and_says_why_when_its_workspace_file_is_moved(tmp_path: Path, monitor: Any) -> None:
    db = tmp_path / "ws.db"
    async with await Workspace.open(db) as ws:
        await ws.spawn("s", "a")
    app = await monitor(db)
    async with app.run_test(size=(160, 45)) as pilot:
        await until(lambda: app.table.keys)
        db.rename(tmp_path / "elsewhere.db")
        await until(lambda: app.return_value is not None)
        await pilot.pause()
    assert app.return_value == f"the monitor stopped: {db} is gone: the workspace open here was moved or deleted"
    assert app.return_code == 1


async def test_the_monitor_says_what_its_engine_started_again_and_why(tmp_path: Path, monitor: Any) -> None:
    """An engine dies under a run of a session whose restart policy is on-failure; the monitor
    opened next runs the engine, which starts the run again, and says so."""
    db = tmp_path / "ws.db"
    async with await Workspace.open(db) as ws:
        sid = (await ws.spawn("nightly", "a", cwd=str(tmp_path), restart="on-failure",
                              runner="command:sh -c 'if [ -e go ]; then echo done; else touch started; sleep 600; fi'")).sid
        await ws.activate(sid)
    other = subprocess.Popen([sys.executable, "-m", "procession", "--db", str(db), "run"], stderr=subprocess.DEVNULL)
    try:
        await until(lambda: (tmp_path / "started").exists())
    finally:
        other.kill()
        await asyncio.to_thread(other.wait)
    (tmp_path / "go").touch()
    app = await monitor(db, engine=True, clock=time.time)
    async with app.run_test(size=(160, 45)):
        await until(lambda: app.said(f"session {sid} (nightly) runs again: its run 1 was lost (its engine stopped",
                                     "restart on-failure", severity="warning"))
        await until(lambda: app.feed.sessions[sid].last_outcome == "ok")
