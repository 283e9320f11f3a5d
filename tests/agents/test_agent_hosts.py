"""An agent session of one host, beside another host's engine on the same machine (a PostgreSQL
workspace, engines named by ``--host``): only its own host's engine follows its transcript."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import sql, until
from procession import Workspace
from support.agent_clis import AgentSandbox, session_env
from support.hosts import spawn_on, start_engine, stop
from support.models import ModelServer, say

from test_runners import ask


async def test_an_engine_does_not_sync_another_hosts_agent_session(
        postgres: Any, claude_sandbox: AgentSandbox, model_server: ModelServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    url = postgres.workspace()
    ws = await Workspace.open(url)
    try:
        model_server.script.add(say("One."), say("Two."), say("Three."))
        settings, passed = session_env([claude_sandbox], monkeypatch.setenv)
        sid = await spawn_on(ws, "b", "coder", "claude:", cwd=str(claude_sandbox.workdir), env=settings,
                             passed=passed)
        engines = {host: start_engine(url, host) for host in ("a", "b")}
        try:
            await until(lambda: len(sql(url, "SELECT host FROM engines")) == 2)
            for n in (1, 2, 3):  # each run writes the transcript the other engine could watch too
                assert (await ask(ws, sid, f"turn {n}", n)).outcome == "ok"
        finally:
            said = {host: stop(engine) for host, engine in engines.items()}
        assert [m.content for m in await ws.history(sid)][-1] == "Three."
        assert f"session {sid}:" not in said["a"], said["a"]
    finally:
        await ws.close()
