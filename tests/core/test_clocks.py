"""Hosts whose clocks disagree: every lease and heartbeat on a shared workspace is stamped and
judged by the database server's clock (``Tx.clock``), never a machine's own, so an engine on a
machine whose clock is two minutes off is neither taken for dead while it beats nor for alive
once it stops. Each engine here is a process of its own that takes itself for another machine,
its clock moved by ``SKEW_S`` one way or the other (``support.hosts.elsewhere_engine``)."""

from __future__ import annotations

import signal
import time
from typing import Any

from conftest import HANG_S, until
from procession import Workspace
from support.hosts import elsewhere_engine

SKEW_S = 120.0


async def _alive(ws: Workspace) -> dict[str, bool]:
    return {e["host"]: e["alive"] for e in (await ws.activity())["engines"]}


async def test_engines_whose_clocks_are_off_are_judged_by_the_servers_clock(postgres: Any) -> None:
    url = postgres.workspace()
    ws = await Workspace.open(url)
    ahead, behind = elsewhere_engine(url, "ahead", SKEW_S), elsewhere_engine(url, "behind", -SKEW_S)
    try:
        await until(lambda: _both_listed(ws))
        for _ in range(3):  # alive beat after beat, though one stamps two minutes early and one late by its clock
            assert await _alive(ws) == {"ahead": True, "behind": True}
            time.sleep(1.0)
        ahead.kill()
        ahead.wait()
        killed = time.monotonic()
        await until(lambda: _lost(ws, "ahead"))  # stopped beating: dead by the server's clock, not in two minutes
        assert time.monotonic() - killed < 15
        assert (await _alive(ws))["behind"] is True
    finally:
        for engine in (ahead, behind):
            if engine.poll() is None:
                engine.send_signal(signal.SIGTERM)
                engine.wait(timeout=HANG_S)
        await ws.close()


async def _both_listed(ws: Workspace) -> bool:
    return set(await _alive(ws)) == {"ahead", "behind"}


async def _lost(ws: Workspace, host: str) -> bool:
    return (await _alive(ws)).get(host) is False
