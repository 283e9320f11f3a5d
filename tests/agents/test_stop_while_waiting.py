"""An engine that stops under a run waiting for a person (the monitor quit, ``procession run``
stopped) leaves the request open for the next engine, and the answer a person gives is the one
the agent's model takes (issue 35: Claude Code's model was told it was refused, by the run's
stop, then that it was allowed, with nothing to tell the two apart). Claude Code itself writes
"rejected" for a tool use its run did not finish, however the run ends (an interrupt, or a
kill: tried), so the message that carries the person's answer says that was no one's answer."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import engine_on, until
from procession import State, Workspace
from support.agent_clis import AgentSandbox
from support.models import ModelServer, say, shell
from support.runs import finished, state_of

from test_permissions import waiting
from test_runners import agent_session


async def test_an_engine_stopping_under_a_waiting_claude_run_leaves_the_persons_answer_to_decide(
        claude_sandbox: AgentSandbox, model_server: ModelServer, live: Workspace, db: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    model_server.script.add(shell("echo hi > asked.txt"))
    sid = await agent_session(live, claude_sandbox, monkeypatch)
    await live.set(sid, permissions="ask")
    await live.send(sid, "write the file")
    async with engine_on(db):
        await live.activate(sid)
        asked = await until(lambda: waiting(live, sid))
    assert await state_of(live, sid) is State.WAITING
    assert (await live.request(asked.id)).answer is None  # open, for the next engine
    before = len(model_server.turn_requests())
    model_server.script.add(shell("echo hi > asked.txt"), say("Wrote it."))  # the call, made again
    async with engine_on(db):
        await live.allow(asked.id)
        run = await until(lambda: finished(live, sid, 2))
        assert run.outcome == "ok", run.error
    assert (claude_sandbox.workdir / "asked.txt").read_text() == "hi\n"  # the person's answer held
    told = [m.content for m in await live.history(sid) if m.role == "user"]
    assert "A person has now allowed it" in told[-1] and "not a person's answer" in told[-1]
    assert len(model_server.turn_requests()) - before == 2 and await live.pending() == []
