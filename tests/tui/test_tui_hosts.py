"""The monitor on a workspace whose sessions live on several hosts: a HOST column appears, the
header names each host's engine, and a dead host's rows say so."""

from __future__ import annotations

import subprocess

from conftest import sql, until
from procession import Workspace
from procession.model import hosts
from support.monitor import line_of, settle


async def test_several_hosts_show_a_host_column_and_a_dead_hosts_rows_lost(monitor, db, monkeypatch) -> None:
    ws = await Workspace.open(db)
    monkeypatch.setenv(hosts.ENV, "laptop")
    laptop = (await ws.spawn("payroll", "hr")).sid
    monkeypatch.setenv(hosts.ENV, "devbox")
    devbox = (await ws.spawn("docs", "docs")).sid
    monkeypatch.delenv(hosts.ENV)
    await ws.close()
    gone = subprocess.Popen(["true"])
    gone.wait()  # the laptop's engine died holding its lease: its pid is no process now
    sql(db, "INSERT INTO engines (host, token, pid, started, heartbeat, slots, proc_start, machine)"
            " VALUES ('laptop', 't', ?, 0, 0, 2, NULL, ?)", (gone.pid, hosts.machine()))
    app = await monitor(db)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        await until(lambda: "laptop LOST" in app.query_one("#meters").engine)
        await settle(pilot)
        assert "HOST" in app.query_one("#header").render_line(0).text
        assert "laptop lost" in line_of(app, laptop)
        assert "devbox" in line_of(app, devbox) and "lost" not in line_of(app, devbox)
        sql(db, "DELETE FROM engines WHERE host = 'laptop'")  # it came back and stopped cleanly
        await until(lambda: "laptop none" in app.query_one("#meters").engine)  # its sessions wait: said
        await settle(pilot)
        assert "lost" not in line_of(app, laptop)  # no row of it changed in the store: redrawn all the same


async def test_a_host_name_another_machine_wrote_is_shown_harmless(monitor, db) -> None:
    """A shared store's host names come from other machines: one holding a terminal escape is
    shown escaped in the header and the HOST column, never written to the terminal raw."""
    ws = await Workspace.open(db)
    sid = (await ws.spawn("mine", "ops")).sid
    await ws.close()
    evil = "\x1b[2Jgone\x07"
    sql(db, "UPDATE sessions SET host = ?", (evil,))
    sql(db, "INSERT INTO engines (host, token, pid, started, heartbeat, slots, proc_start, machine)"
            " VALUES (?, 't', 1, 0, 0, 2, NULL, 'elsewhere')", (evil,))
    app = await monitor(db)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        await until(lambda: "LOST" in app.query_one("#meters").engine)
        assert "\x1b" not in app.query_one("#meters").engine and "\x07" not in app.query_one("#meters").engine
        await settle(pilot)
        assert "\x1b" not in line_of(app, sid) and "gone" in line_of(app, sid)
