"""Agents over the Agent Client Protocol (``acp:NAME``): the real agents, run by a real engine,
against the scripted model server: a turn with a tool, permission requests as state W, a
refusal's reason reaching the model, interrupt, resume in a new process, fork, file writes
through Procession, and no process left behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import until
from procession import State, Workspace
from support.agent_clis import AgentSandbox, session_env
from support.models import ModelServer, say, shell
from support.runs import finished


async def acp_session(ws: Workspace, agent: AgentSandbox, monkeypatch: pytest.MonkeyPatch, **settings: Any) -> int:
    """A session run by ``agent`` over ACP, with the sandbox's settings."""
    env, passed = session_env([agent], monkeypatch.setenv)
    return (await ws.spawn("acp", "dev", runner=f"acp:{agent.name}", cwd=str(agent.workdir), env=env,
                           passed=passed, **settings)).sid


async def ask(ws: Workspace, sid: int, text: str, runs: int) -> Any:
    await ws.send(sid, text)
    await ws.activate(sid)
    return await until(lambda: finished(ws, sid, runs))


async def test_a_turn_with_a_tool_then_a_resumed_one(
        opencode_sandbox: AgentSandbox, model_server: ModelServer, engine: Any, live: Workspace,
        monkeypatch: pytest.MonkeyPatch) -> None:
    agent = opencode_sandbox
    model_server.script.add(shell("echo hi > file", text="Writing."), say("The file is written."))
    sid = await acp_session(live, agent, monkeypatch)
    run = await ask(live, sid, "write hi into file", 1)
    assert run.outcome == "ok", run.error
    assert (agent.workdir / "file").read_text() == "hi\n"
    shown = (await live.show(sid)).to_json()
    said = [(c["role"], c["content"].splitlines()[0]) for c in shown["context"]]
    assert said[0] == ("user", "write hi into file") and said[-1] == ("assistant", "The file is written."), said
    assert any(role == "tool" for role, _ in said)
    ref = shown["agent_ref"]
    assert ref["cli"] == "opencode" and ref["id"].startswith("ses_") and ref["acp"]["protocol"] == 1
    model_server.script.add(say("Again."))
    run = await ask(live, sid, "once more", 2)
    assert run.outcome == "ok", run.error
    history = [(m.role, m.content) for m in await live.history(sid)]
    assert history[-2:] == [("user", "once more"), ("assistant", "Again.")]
    assert len([m for m in history if m == ("assistant", "The file is written.")]) == 1
    assert (await live.show(sid)).agent_ref["id"] == ref["id"]
