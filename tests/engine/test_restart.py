"""Restart policies: a session's run that did not finish runs again, by ``--restart``, after
its engine is SIGKILLed (a real ``procession run`` process) and another starts; after a failed
run, once its back-off is over; and never under ``no``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import engine_on, until
from procession import State, Workspace


def engine(db: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "procession", "run"], env={**os.environ, "PROCESSION_DB": str(db)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def runs(ws: Workspace, sid: int, n: int, *, ended: bool = True) -> Any:
    found = [r for r in await ws.runs(sid) if r.ended or not ended]
    return found if len(found) >= n else None


async def test_a_run_lost_with_its_engine_runs_again_under_on_failure_and_not_under_no(live, db, tmp_path):
    step = "command:sh -c 'if [ -e go ]; then echo finished; else touch started; sleep 600; fi'"
    folders = {policy: tmp_path / policy for policy in ("on-failure", "no")}
    sids = {}
    for policy, folder in folders.items():
        folder.mkdir()
        sids[policy] = (await live.spawn(policy, "a", runner=step, cwd=str(folder), restart=policy)).sid
        await live.activate(sids[policy])
    first = engine(db)
    try:
        await until(lambda: all((f / "started").exists() for f in folders.values()))
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    for folder in folders.values():
        (folder / "go").touch()
    async with engine_on(db):
        again = await until(lambda: runs(live, sids["on-failure"], 2))
        assert [r.outcome for r in again] == ["lost", "ok"]
        assert again[1].cause[0]["kind"] == "restart" and again[1].cause[0]["why"] == "lost"
        assert [r.outcome for r in await live.runs(sids["no"])] == ["lost"]
        assert (await live.info(sids["no"])).state is State.SLEEPING
    assert "restart" in "\n".join(f"{e.call} {e.args}" for e in await live.journal(sids["on-failure"], 20))


async def test_a_failed_run_runs_again_after_its_back_off_until_the_failure_limit(live, engine, tmp_path):
    sid = (await live.spawn("flaky", "a", runner="command:false", cwd=str(tmp_path), restart="on-failure")).sid
    await live.set(sid, fail_limit=2)
    await live.activate(sid)
    done = await until(lambda: runs(live, sid, 2))  # the second run came by itself, after the back-off
    assert [r.outcome for r in done] == ["failed", "failed"]
    assert done[1].cause[0]["kind"] == "restart"
    await until(lambda: is_failing(live, sid))
    assert len(await live.runs(sid)) == 2  # the failure limit suspended it: no third
    _, restarted = await live.restarts()  # what faces tell: one restart, after the first failure
    assert [(e.session, e.outcome["run"], e.outcome["outcome"]) for e in restarted] == [(sid, done[0].id, "failed")]


async def is_failing(ws: Workspace, sid: int) -> bool:
    info = await ws.info(sid)
    return info.state is State.SUSPENDED and info.reason == "failing"
