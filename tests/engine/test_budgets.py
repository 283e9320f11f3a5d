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
from procession.model.prices import Price, Prices
from procession.model.prices import load as load_prices

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


async def test_the_price_table_costs_the_tokens_of_a_runner_that_says_no_cost(live, db, tmp_path):
    """The ``openai:`` loop reports tokens only: the price table of its model makes its cost,
    and a cost cap then holds it."""
    from support.models import ModelServer, Script, Usage, say

    with ModelServer(Script(*[say(f"reply {n}", usage=Usage(input=1000, output=200)) for n in range(3)])) as model:
        sid = (await live.spawn("priced", "a", runner=f"openai:gpt-test@{model.url_v1}", cwd=str(tmp_path))).sid
        other = (await live.spawn("unpriced", "a", runner=f"openai:other@{model.url_v1}", cwd=str(tmp_path))).sid
        await live.limit(sid, cost=0.005, per="day")
        table = Prices({"gpt-test": Price(input=2.0, output=10.0)})
        async with engine_on(db, prices=table):
            await live.send(sid, "go")
            await live.activate(sid)
            await until(lambda: ended(live, sid, 1))
            [budget] = await live.budgets(sid)
            assert budget.spend["cost"] == pytest.approx((1000 * 2.0 + 200 * 10.0) / 1e6)
            await live.send(other, "go")
            await live.activate(other)
            await until(lambda: ended(live, other, 1))
            await live.send(sid, "again")
            await live.activate(sid)
            await until(lambda: ended(live, sid, 2))
            await live.activate(sid)  # 0.008 of 0.005 spent: held
            await until(lambda: held(live, sid))
        assert [r.cost for r in await live.runs(sid)] == [pytest.approx(0.004), pytest.approx(0.004)]
        assert [r.cost for r in await live.runs(other)] == [0.0]  # no price of its model: no cost


def test_the_price_table_is_read_from_the_config_file_and_a_mistake_is_said(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[prices."gpt-5"]\ninput = 1.25\noutput = 10\n\n[prices.codex]\ninput = 1\noutput = 2\n'
                      'cache_read = 0.1\n\n[prices.bad]\ninput = "cheap"\n')
    table = load_prices(config)
    assert table.find("openai:gpt-5@http://127.0.0.1:1/v1") == Price(1.25, 10.0)
    assert table.find("codex:") == Price(1.0, 2.0, cache_read=0.1)  # a CLI's default model: its kind's
    assert table.find("codex:gpt-5") == Price(1.25, 10.0)
    assert table.find("command:echo hi") is None
    assert table.find("openai:unknown@http://127.0.0.1:1/v1") is None
    assert len(table.problems) == 1 and "'bad'" in table.problems[0]
    config.write_text("[prices\n")
    assert load_prices(config).problems and load_prices(config).by_name == {}
    assert load_prices(tmp_path / "absent.toml") == Prices()
