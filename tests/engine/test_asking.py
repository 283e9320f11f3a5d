"""The ``openai:`` loop under ``--permissions ask``: a tool that reads runs unasked, one that
writes or runs a command waits for a person; rules, withdrawal, and a request that outlives its
engine (the answer goes to a new run, told in a message). A real engine, the scripted model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import engine_on, until
from procession import State, Workspace
from procession.model import hosts
from procession.model.errors import IllegalTransition, NotFound
from support.models import ModelServer, Script, say, tool_call


@pytest.fixture
def model() -> Any:
    with ModelServer(Script()) as server:
        yield server


async def ended(ws: Workspace, sid: int, n: int = 1) -> Any:
    runs = [r for r in await ws.runs(sid) if r.ended]
    return runs if len(runs) >= n else None


async def waiting(ws: Workspace, sid: int) -> Any:
    found = await ws.pending([sid])
    return found[-1] if found and (await ws.info(sid)).state is State.WAITING else None


async def asking_session(live: Workspace, model: ModelServer, tmp_path: Path, *turns: Any) -> tuple[int, Path]:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("a")
    sid = (await live.spawn("careful", "a", runner=f"openai:m@{model.url_v1}", cwd=str(tmp_path),
                            permissions="ask")).sid
    await live.bind(sid, "folder", str(data), mode="rw")
    model.script.add(*turns)
    await live.send(sid, "go")
    await live.activate(sid)
    return sid, data


async def test_reads_run_unasked_writes_wait_and_allow_always_makes_a_rule(live, engine, model, tmp_path):
    sid, data = await asking_session(
        live, model, tmp_path, tool_call("data_read", {"path": "a.txt"}),
        tool_call("data_write", {"path": "b.txt", "content": "b"}),
        tool_call("data_write", {"path": "c.txt", "content": "c"}), say("done"))
    request = await until(lambda: waiting(live, sid))
    assert (request.tool, request.input) == ("data_write", {"path": "b.txt", "content": "b"})
    assert not (data / "b.txt").exists()
    assert len(await live.pending()) == 1  # the read before it did not ask
    answered = await live.allow(request.id, always=True)
    assert answered.rule is not None and answered.state is State.RUNNING
    run = (await until(lambda: ended(live, sid)))[0]
    assert run.outcome == "ok", run.error
    assert (data / "b.txt").read_text() == "b" and (data / "c.txt").read_text() == "c"  # the rule let c.txt be
    assert await live.pending() == []
    rules = await live.rules(sid)
    assert [(r.tool, r.subject) for r in rules] == [("data_write", "")]
    # what let each call run, from its run's record alone (issue 39: "why did this run")
    used = await live.tool_uses(sid, [run.id])
    assert [(u.name, u.input.get("path"), u.how) for u in used] == [
        ("data_read", "a.txt", "unasked"), ("data_write", "b.txt", "person"), ("data_write", "c.txt", "rule")]
    assert hosts.who() in (used[1].by or "") and used[1].request == request.id and used[1].answered >= used[1].asked
    assert used[2].by == f"rule {rules[0].id}"
    await live.forget(rules[0].id)
    assert await live.rules(sid) == []
    with pytest.raises(NotFound):
        await live.forget(rules[0].id)


async def test_deny_is_the_tools_answer_and_the_run_goes_on(live, engine, model, tmp_path):
    sid, data = await asking_session(live, model, tmp_path, tool_call("data_write", {"path": "b.txt", "content": "b"}),
                                     say("ok, I will not"))
    request = await until(lambda: waiting(live, sid))
    with pytest.raises(IllegalTransition):
        await live.activate(sid)
    assert (await live.wait(sid, 60)).woke == "waiting"  # a script's wait says so, at once
    await live.deny(request.id, why="read only today")
    run = (await until(lambda: ended(live, sid)))[0]
    assert run.outcome == "ok" and not (data / "b.txt").exists()
    tool = [m for m in await live.history(sid) if m.role == "tool"][0].meta["tool"]
    assert tool["is_error"] and tool["output"] == "read only today"
    [used] = await live.tool_uses(sid, [run.id])
    assert (used.how, used.why, used.is_error) == ("refused", "read only today", True) and hosts.who() in (used.by or "")


async def test_interrupt_withdraws_what_waits(live, engine, model, tmp_path):
    sid, data = await asking_session(live, model, tmp_path, tool_call("data_write", {"path": "b.txt", "content": "b"}))
    request = await until(lambda: waiting(live, sid))
    await live.interrupt(sid)
    await until(lambda: ended(live, sid))
    assert (await live.request(request.id)).answer == "withdrawn"
    assert await live.pending() == [] and (await live.info(sid)).state is State.SLEEPING
    with pytest.raises(Exception, match="answered already"):
        await live.allow(request.id)


async def test_a_request_outlives_its_engine_and_its_answer_goes_to_a_new_run(live, db, model, tmp_path):
    async with engine_on(db):
        sid, data = await asking_session(live, model, tmp_path,
                                         tool_call("data_write", {"path": "b.txt", "content": "b"}))
        request = await until(lambda: waiting(live, sid))
    # the engine stopped under the waiting run: the run ended, the request did not
    assert (await live.info(sid)).state is State.WAITING
    assert [r.id for r in await live.pending()] == [request.id]
    model.script.add(tool_call("data_write", {"path": "b.txt", "content": "b"}), say("written"))
    answered = await live.allow(request.id)
    assert answered.state is State.READY  # no run to go on with: a new one is queued
    async with engine_on(db):
        runs = await until(lambda: ended(live, sid, 2))
    assert runs[-1].outcome == "ok", runs[-1].error
    assert (data / "b.txt").read_text() == "b"
    assert await live.pending() == []  # the same call asked again took the answer given
    told = [m.content for m in await live.history(sid) if m.author == "procession"]
    assert told and "A person has now allowed it" in told[0] and "not a person's answer" in told[0]


async def test_a_runner_that_cannot_ask_is_held_to_reading_under_ask(live, engine, tmp_path):
    """A ``command:`` step cannot ask: under ``--permissions ask`` the
    kernel holds it to reading its folder; with ``--confine off`` nothing could, and it does not
    start."""
    (tmp_path / "kept.txt").write_text("kept")
    sid = (await live.spawn("reader", "a", runner="command:sh -c 'cat kept.txt; echo x > made.txt'",
                            cwd=str(tmp_path), permissions="ask")).sid
    await live.activate(sid)
    run = (await until(lambda: ended(live, sid)))[0]
    assert run.outcome == "failed" and not (tmp_path / "made.txt").exists()
    assert "its bounds denied" in run.error and "read only" in (await live.info(sid)).confinement
    await live.set(sid, confine="off")
    await live.activate(sid)
    run = (await until(lambda: ended(live, sid, 2)))[-1]
    assert run.outcome == "failed" and "cannot ask a person" in run.error and "--confine off" in run.error
    assert not (tmp_path / "made.txt").exists()


async def test_a_request_survives_its_engine_killed_and_a_new_engine_carries_the_answer(live, db, model, tmp_path):
    """SIGKILL, not a clean stop: the engine's process dies with the run waiting; the next
    engine records the run lost, the session still waits, and ``allow`` goes on in a new run."""
    import os
    import signal
    import subprocess
    import sys

    sid, data = await asking_session(live, model, tmp_path, tool_call("data_write", {"path": "b.txt", "content": "b"}))
    engine = subprocess.Popen([sys.executable, "-m", "procession", "run"], env={**os.environ, "PROCESSION_DB": str(db)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        request = await until(lambda: waiting(live, sid))
    finally:
        engine.send_signal(signal.SIGKILL)
        engine.wait()
    model.script.add(tool_call("data_write", {"path": "b.txt", "content": "b"}), say("written"))
    async with engine_on(db):
        await until(lambda: ended(live, sid))  # the killed engine's run, recorded lost by this one
        assert [r.outcome for r in await live.runs(sid)] == ["lost"]
        assert (await live.info(sid)).state is State.WAITING
        assert [r.id for r in await live.pending()] == [request.id]
        await live.allow(request.id)
        runs = await until(lambda: ended(live, sid, 2))
    assert runs[-1].outcome == "ok" and (data / "b.txt").read_text() == "b"


async def test_what_an_agent_asks_is_checked_before_anything_is_written(live, tmp_path):
    """An agent's tool call is its own words: a name with control characters, an input nested
    deeper than JSON is read here, are refused in one line, and no request is made."""
    from procession.engine.ledger import Ledger
    from procession.model.errors import ProcessionError

    sid = (await live.spawn("s", "a", runner="builtin:echo", cwd=str(tmp_path), permissions="ask")).sid
    ledger = Ledger(live.store, actor="engine")
    await ledger.acquire("test", 1, None)
    await ledger.activate(sid)
    await ledger.start_run(sid, runner="builtin:echo", engine="test")
    deep: Any = "x"
    for _ in range(100_000):
        deep = [deep]
    for tool, given in (("Bash\x1b]0;pwned\x07", {"command": "ls"}), ("Bash", {"command": deep})):
        with pytest.raises(ProcessionError):
            await ledger.ask(sid, tool, given)
    ok, why = await ledger.decide(sid, "Bash", {"command": deep})
    assert not ok and why.startswith("Procession:")
    assert await live.pending() == [] and (await live.info(sid)).state is State.RUNNING
