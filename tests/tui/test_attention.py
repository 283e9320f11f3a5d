"""The monitor and what needs you: a session waiting for a person (W) in the table and the
header, the bell and the note when it starts waiting, the attention queue (W) and its keys —
allow once, allow from now on, deny with a reason — at 160x45 and at 80x24.

No engine runs here: a run is started as the engine starts one (``Ledger.start_run``), and its
agent asks as a run's agent does (``ask``), so the session waits with a real request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import FIXED, until
from procession import State, Workspace
from procession.cli import demo
from procession.engine.ledger import Ledger
from procession.tui.attention import Attention
from procession.tui.dialogs import ActionMenu, Form
from procession.tui.meters import Meters
from support.monitor import Monitor, answer, keys, line_of, to

PAYROLL, SCREENING = 1, 2
SIZES = [(160, 45), (80, 24)]


@pytest.fixture
async def db(tmp_path: Path) -> Path:
    return (await demo.build(tmp_path / "demo.db", clock=lambda: FIXED)).db


@pytest.fixture
async def store(db: Path) -> Any:
    ws = await Workspace.open(db, actor="test")
    yield ws
    await ws.close()


async def asking(db: Path, sid: int, *commands: str) -> list[int]:
    """Start a run of ``sid`` as an engine does, and have its agent ask to run ``commands``."""
    ledger = Ledger((await Workspace.open(db)).store, actor="engine")
    try:
        await ledger.acquire("test", 1, None)
        await ledger.activate(sid)
        runner = (await ledger.info(sid)).runner
        await ledger.start_run(sid, runner=runner, engine="test")
        agent = ledger.as_actor("agent")
        return [(await agent.ask(sid, "Bash", {"command": c})).request for c in commands]
    finally:
        await ledger.close()


@pytest.mark.parametrize("size", SIZES)
async def test_a_waiting_session_shows_w_rings_and_the_queue_allows_it(monitor, db, store, size) -> None:
    app: Monitor = await monitor(db)
    async with app.run_test(size=size) as pilot:
        await until(lambda: app.loaded and app.table.keys)
        rings: list[int] = []
        app.bell = lambda: rings.append(1)  # type: ignore[method-assign]
        [request] = await asking(db, PAYROLL, "git push origin main")
        await until(lambda: app.said("waits for you", "session 1") and rings)
        await to(pilot, app, PAYROLL)
        assert " W " in f" {line_of(app, PAYROLL)} "
        assert "W 1" in app.main.query_one(Meters).render().plain
        await keys(pilot, "W")
        assert isinstance(app.screen, Attention)
        text = "\n".join(str(o.prompt) for o in app.screen.query_one("#queue").options)  # type: ignore[attr-defined]
        assert "Bash: git push origin main" in text and "monthly payroll" in text
        await keys(pilot, "enter")  # on the request: how to answer it, its input whole
        assert isinstance(app.screen, ActionMenu)
        await keys(pilot, "enter")  # allow once
        await until(lambda: app.said(f"request {request} allowed"))
        assert (await store.request(request)).answer == "allow"
        assert (await store.info(PAYROLL)).state is State.RUNNING
        assert await store.rules(PAYROLL) == []


async def test_allow_from_now_on_makes_a_rule_and_answers_its_like(monitor, db, store) -> None:
    app: Monitor = await monitor(db)
    async with app.run_test(size=SIZES[0]) as pilot:
        await until(lambda: app.loaded and app.table.keys)
        first, second = await asking(db, PAYROLL, "ls -la", "ls src")  # ls runs no other: any arguments
        await to(pilot, app, PAYROLL)
        await until(lambda: " W " in f" {line_of(app, PAYROLL)} ")
        await keys(pilot, "Y")  # two requests: which one
        assert isinstance(app.screen, ActionMenu)
        await keys(pilot, "enter")
        await keys(pilot, "down", "enter")  # from now on
        await until(lambda: app.said(f"request {first} allowed"))
        assert [(r.tool, r.subject) for r in await store.rules(PAYROLL)] == [("Bash", "ls")]
        assert (await store.request(second)).answer == "allow"  # the rule answered its like
        await keys(pilot, "R", "enter")  # forget it
        await until(lambda: app.said("asks again"))
        assert await store.rules(PAYROLL) == []


@pytest.mark.parametrize("size", SIZES)
async def test_deny_in_the_queue_asks_why_and_the_reason_is_kept(monitor, db, store, size) -> None:
    app: Monitor = await monitor(db)
    async with app.run_test(size=size) as pilot:
        await until(lambda: app.loaded and app.table.keys)
        [request] = await asking(db, SCREENING, "rm -rf build [/x] [b]")  # markup in its words stays text
        await until(lambda: app.said("waits for you"))
        await keys(pilot, "W")
        shown = "\n".join(str(o.prompt) for o in app.screen.query_one("#queue").options)  # type: ignore[attr-defined]
        assert "Bash: rm -rf build [/x] [b]" in shown
        await keys(pilot, "D")
        assert isinstance(app.screen, Form)
        await answer(pilot, app, "not the build folder")
        await until(lambda: app.said(f"request {request} denied"))
        found = await store.request(request)
        assert (found.answer, found.why) == ("deny", "not the build folder")
        await until(lambda: "nothing needs you" in "\n".join(
            str(o.prompt) for o in app.screen.query_one("#queue").options))  # type: ignore[attr-defined]
        await keys(pilot, "escape")
        assert not isinstance(app.screen, Attention)


async def test_an_agents_tree_row_and_its_sessions_show_what_their_budgets_spent(monitor, db, store) -> None:
    await store.limit(agent="hr", runs=4, per="total")
    await store.limit(SCREENING, runs=0, per="total")  # nothing may run: already at its cap
    app: Monitor = await monitor(db)
    async with app.run_test(size=SIZES[0]) as pilot:
        await until(lambda: app.loaded and app.table.keys)
        await to(pilot, app, PAYROLL)
        assert " 0% " in f" {line_of(app, PAYROLL)} "  # hr's budget: no run yet
        assert "999%" in line_of(app, SCREENING)
        await keys(pilot, "t")
        await until(lambda: "agent:hr" in app.table.keys)
        heading = app.table.render_line(app.table.keys.index("agent:hr") - int(app.table.scroll_offset.y)).text
        assert "spent 999% of a budget's cap" in heading
