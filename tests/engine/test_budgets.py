"""Budgets like rlimits: a session (or an agent's sessions together) over a cap is suspended
``budget`` before its next run, its queued run kept; raising the limit resumes it and the run
goes on; past 80% the user is told once a period. A real engine; ``command:`` steps report their
usage as the step protocol says."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import engine_on, until
from procession import State, Workspace
from procession.engine.notify import Settings
from procession.model import budgets
from procession.model.errors import InvalidArgument

USAGE = "command:echo '{\"type\": \"usage\", \"in\": 600, \"out\": 100}'"
HOOK = "import os, sys; open(sys.argv[1], 'a').write(os.environ['PROCESSION_REASON'] + ' ' + os.environ['PROCESSION_TEXT'] + '\\n')"


async def ended(ws: Workspace, sid: int, n: int) -> Any:
    found = [r for r in await ws.runs(sid) if r.ended]
    return found if len(found) >= n else None


async def held(ws: Workspace, sid: int) -> bool:
    info = await ws.info(sid)
    return info.state is State.SUSPENDED and info.reason == "budget"


async def test_over_its_token_budget_a_session_waits_suspended_until_the_limit_is_raised(live, db, tmp_path):
    log = tmp_path / "notified"
    sid = (await live.spawn("spender", "a", runner=USAGE, cwd=str(tmp_path))).sid
    limited = await live.limit(sid, tokens=1500, per="day")
    assert limited.budgets[0].caps == {"tokens": 1500}
    async with engine_on(db, notify=Settings(command=(sys.executable, "-c", HOOK, str(log)))):
        for n in (1, 2, 3):  # 0, 700, 1,400 tokens spent when each starts: under the cap (the third past 80%)
            await live.activate(sid)
            await until(lambda n=n: ended(live, sid, n))
        await live.activate(sid)
        await until(lambda: held(live, sid))
        assert len(await live.runs(sid)) == 3  # the fourth did not start
        [budget] = await live.budgets(sid)
        assert budget.spend["tokens"] == 2100 and budget.used["tokens"] == pytest.approx(2100 / 1500)
        assert (await live.info(sid)).spend == pytest.approx(2100 / 1500)  # ps and the monitor's SPEND
        assert [s.spend for s in await live.ps()] == [pytest.approx(2100 / 1500)]
        await until(lambda: log.exists() and "budget" in log.read_text() and "suspended" in log.read_text())
        raised = await live.limit(sid, tokens=5000)
        assert raised.resumed == (sid,)
        await until(lambda: ended(live, sid, 4))  # the queued run ran
    told = log.read_text().splitlines()
    assert [line.split()[0] for line in told].count("budget") == 2, told  # 80% once, then the suspension
    assert any("93% of its session budget's tokens" in line for line in told), told


async def test_an_agents_budget_holds_its_sessions_together(live, engine, tmp_path):
    one = (await live.spawn("one", "team", runner="command:true", cwd=str(tmp_path))).sid
    two = (await live.spawn("two", "team", runner="command:true", cwd=str(tmp_path))).sid
    await live.limit(agent="team", runs=1, per="total")
    await live.activate(one)
    await until(lambda: ended(live, one, 1))
    await live.activate(two)
    await until(lambda: held(live, two))
    assert await live.runs(two) == []
    cleared = await live.limit(agent="team", clear=True)
    assert cleared.resumed == (two,)
    await until(lambda: ended(live, two, 1))


async def test_a_limit_takes_a_session_or_an_agent_and_caps_of_zero_or_more(live, tmp_path):
    sid = (await live.spawn("s", "a", runner="command:true", cwd=str(tmp_path))).sid
    for bad in ({}, {"agent": "a", "sid": sid}, {"sid": sid, "tokens": -1}, {"sid": sid, "per": "year"},
                {"agent": "nobody", "runs": 1}, {"sid": sid, "clear": True}):
        with pytest.raises(InvalidArgument):
            await live.limit(**bad)
    assert budgets.amount("2M", "tokens") == 2_000_000 and budgets.amount("500k", "t") == 500_000
    with pytest.raises(InvalidArgument):
        budgets.amount("lots", "tokens")
    monday = budgets.period_start("week", time.time())
    assert time.localtime(monday).tm_wday == 0 and budgets.period_end("total", time.time()) is None
