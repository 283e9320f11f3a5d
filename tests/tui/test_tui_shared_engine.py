"""Whether the monitor runs its host's engine: on a shared (PostgreSQL) workspace only when asked
(``--engine``), saying so and naming the other hosts' engines when it runs none; on a workspace
file whenever no other process does, as always. The monitors here are opened as the CLI opens
them (``engine=None``: the workspace decides), or as ``--engine`` opens them (True)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import sql, until
from procession import State, Workspace
from procession.model import hosts
from support.monitor import keys, to

NONE_HERE = "none for host {}: procession run starts one, or the monitor with --engine"


async def _spawn(db: Path | str) -> int:
    async with await Workspace.open(db) as ws:
        return (await ws.spawn("s", "a", runner="command:echo hello")).sid


async def test_on_a_shared_workspace_the_monitor_runs_no_engine_and_says_where_they_run(postgres: Any,
                                                                                          monitor: Any) -> None:
    url = postgres.workspace()
    sid = await _spawn(url)
    laptop = subprocess.Popen([sys.executable, "-m", "procession", "--db", url, "--host", "laptop", "run"],
                              stderr=subprocess.DEVNULL)  # another host's engine, on this machine
    try:
        await until(lambda: sql(url, "SELECT host FROM engines") == [("laptop",)])
        app = await monitor(url, engine=None, clock=time.time)
        async with app.run_test(size=(200, 45)) as pilot:
            meters = app.main.query_one("#meters")
            here = NONE_HERE.format(hosts.this())
            await until(lambda: meters.engine == f"{here}; laptop up (pid {laptop.pid})")
            await pilot.pause()
            assert f"Engine {here}; laptop up" in meters.render_line(1).text  # as drawn, whole at this width
            await to(pilot, app, sid)
            await keys(pilot, "a")
            await until(lambda: app.said("no engine runs on this workspace", "waits in the queue"))
            await until(lambda: app.feed.sessions[sid].state is State.READY)
            laptop.kill()
            await asyncio.to_thread(laptop.wait)
            await until(lambda: meters.engine == f"{here}; laptop LOST (pid {laptop.pid})")
            assert app.host is None and app.feed.sessions[sid].state is State.READY
        assert sql(url, "SELECT host FROM engines") == [("laptop",)]  # none of this host's came and went
        assert sql(url, "SELECT count(*) FROM runs") == [(0,)]
    finally:
        if laptop.poll() is None:
            laptop.kill()


@pytest.mark.parametrize(("store_kind", "engine"), [("postgresql", True), ("sqlite", None)], indirect=["store_kind"])
async def test_the_monitor_runs_the_engine_asked_on_a_shared_workspace_unasked_on_a_file(
        db: Path | str, engine: bool | None, monitor: Any) -> None:
    sid = await _spawn(db)
    app = await monitor(db, engine=engine, clock=time.time)
    async with app.run_test(size=(160, 45)) as pilot:
        meters = app.main.query_one("#meters")
        await until(lambda: meters.engine == f"this process (pid {os.getpid()})")
        assert sql(db, "SELECT host, pid FROM engines") == [(hosts.this(), os.getpid())]
        await to(pilot, app, sid)
        await keys(pilot, "a")
        await until(lambda: app.feed.sessions[sid].last_outcome == "ok")
    assert sql(db, "SELECT host FROM engines") == []  # given back on quitting


async def test_a_monitor_whose_role_only_reads_runs_no_engine_and_says_how_one_starts(postgres: Any,
                                                                                       monitor: Any) -> None:
    """A role given SELECT only could not hold an engine's lease: the monitor does not try, even
    asked, and names the one way left, an engine started elsewhere."""
    url = postgres.workspace()
    await _spawn(url)
    app = await monitor(postgres.viewer(url), engine=True)
    async with app.run_test(size=(160, 45)):
        meters = app.main.query_one("#meters")
        await until(lambda: meters.engine == f"none for host {hosts.this()}: procession run starts one")
        assert app.readonly and app.host is None
    assert sql(url, "SELECT count(*) FROM engines") == [(0,)]
