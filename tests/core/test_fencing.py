"""A host's engine that is only cut off is never taken over by itself, and one declared dead is
fenced: ``procession --host H run`` on another machine refuses to take H over while H's lease is
an engine's of another machine (it cannot tell dead from cut off), until an operator says
``procession host H --dead``; the engine so declared, should it come back, writes nothing — not
even the end of the run it was running — and stops.

One machine stands for two: the first engine is a process that takes itself for another
machine (``support.hosts.elsewhere_engine``), cut off by SIGSTOP (no beat, no write; its step
runs on), brought back by SIGCONT."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import HANG_S, engine_on, sql, until
from procession import Workspace
from procession.model.errors import Fenced
from support.hosts import elsewhere_engine, spawn_on, start_engine

HOST = "h1"


def procession(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "procession", "--db", url, *args], capture_output=True, text=True,
                          timeout=HANG_S)


async def test_a_cut_off_engine_is_not_taken_over_until_declared_dead_and_then_writes_nothing(
        postgres: Any, tmp_path: Path) -> None:
    url = postgres.workspace()
    ws = await Workspace.open(url)
    ran = tmp_path / "ran.txt"
    first = elsewhere_engine(url, HOST)
    second = None
    try:
        sid = await spawn_on(ws, HOST, "long", f"command:sh -c 'sleep 4; echo done >> {ran}'", cwd=str(tmp_path))
        await until(lambda: _heard(ws, HOST))
        alive = procession(url, "host", HOST, "--dead")
        assert alive.returncode != 0 and "is alive" in alive.stderr and "Traceback" not in alive.stderr
        await ws.activate(sid)
        [run] = await until(lambda: _running(ws, sid))

        first.send_signal(signal.SIGSTOP)  # cut off: it neither beats nor writes; its step runs on
        await until(lambda: _not_heard(ws, HOST))
        refused = subprocess.run([sys.executable, "-m", "procession", "--db", url, "--host", HOST, "run"],
                                 capture_output=True, text=True, timeout=HANG_S)
        assert refused.returncode != 0 and "Traceback" not in refused.stderr
        assert f"procession host {HOST} --dead" in refused.stderr and "cut off" in refused.stderr
        assert (await ws.runs(sid))[-1].ended is None  # nothing of its run was touched
        listed = json.loads(procession(url, "host", "--json").stdout)
        assert [(e["host"], e["alive"]) for e in listed] == [(HOST, False)]

        declared = procession(url, "host", HOST, "--dead")
        assert declared.returncode == 0 and "declared dead" in declared.stdout, declared.stderr
        second = start_engine(url, HOST)  # now it takes the host over: the run it left is lost
        recovered = await until(lambda: _ended(ws, sid))
        assert recovered.id == run.id and recovered.outcome == "lost"

        first.send_signal(signal.SIGCONT)  # back: its step ends, and what it would write is refused
        first.wait(timeout=HANG_S)
        _, said = first.communicate()
        assert first.returncode != 0 and "lease is gone" in said, said
        time.sleep(1.0)
        [again] = await ws.runs(sid)
        assert (again.outcome, again.ended) == ("lost", recovered.ended)  # not its "ok", nor a later end
        assert [e["host"] for e in (await ws.activity())["engines"] if e["alive"]] == [HOST]
        rows = [r for r in await ws.journal(limit=100) if r.call == "host"]
        assert len(rows) == 1 and rows[0].args == {"host": HOST}
    finally:
        for engine in (first, second):
            if engine is not None and engine.poll() is None:
                with_cont = engine is first
                if with_cont:
                    os.kill(engine.pid, signal.SIGCONT)
                engine.send_signal(signal.SIGTERM)
                engine.wait(timeout=HANG_S)
        await ws.close()


async def _engines(ws: Workspace) -> dict[str, bool]:
    return {e["host"]: e["alive"] for e in (await ws.activity())["engines"]}


async def _heard(ws: Workspace, host: str) -> bool:
    return (await _engines(ws)).get(host) is True


async def _not_heard(ws: Workspace, host: str) -> bool:
    return (await _engines(ws)).get(host) is False


async def _running(ws: Workspace, sid: int) -> Any:
    runs = await ws.runs(sid)
    return runs if runs and runs[-1].pid is not None and runs[-1].ended is None else None


async def _ended(ws: Workspace, sid: int) -> Any:
    runs = await ws.runs(sid)
    return runs[-1] if runs and runs[-1].ended else None


async def test_an_engine_whose_lease_is_given_up_writes_nothing_more(postgres: Any, tmp_path: Path) -> None:
    """The fence itself: once its lease row is gone (``host --dead`` from another machine gives
    it up), each write of the engine is refused in its own transaction, a run it would start
    included; the calls of everyone else go on."""
    url = postgres.workspace()
    ws = await Workspace.open(url)
    try:
        sid = (await ws.spawn("queued", "a", runner="command:true", cwd=str(tmp_path))).sid
        async with engine_on(url) as engine:
            sql(url, "DELETE FROM engines")  # what host --dead does, from a machine that cannot see its process
            with pytest.raises(Fenced, match="no longer holds host"):
                await engine.ledger.release_held()
            await ws.activate(sid)  # a person's call: taken
            await asyncio.sleep(2.0)  # the engine hears of it at once, and of its lost lease within a beat
        assert await ws.runs(sid) == [] and engine.lost  # it started nothing, and stopped
    finally:
        await ws.close()
