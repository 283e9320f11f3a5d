"""A session whose agent CLI waits for a person sends exactly one notification to the
``[notify]`` command, naming its request and the workspace, and holding of the tool's input
only the program (issue 35: a Claude Code session waiting under ``--permissions ask`` ran the
command no time at all, as the engine itself makes the ``ask`` and its loop looked at the
journal only when another process wrote). The real CLIs against the scripted model server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import engine_on, until
from procession import Workspace
from support.agent_clis import AgentSandbox
from support.hooks import Notified, hooked, notified
from support.models import ModelServer
from support.runs import finished

from test_permissions import ASKING, agent, ask_for_shell  # noqa: F401  (agent: the fixture, each CLI that asks)


async def test_a_waiting_agent_cli_sends_one_notification_naming_its_request_and_program(
        agent: AgentSandbox, model_server: ModelServer, live: Workspace, db: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "notified"
    async with engine_on(db, notify=hooked(tmp_path, log)):
        sid, asked = await ask_for_shell(live, agent, model_server, monkeypatch, "git init -q --bare elsewhere")
        await until(lambda: notified(log))
        await live.deny(asked.id, why="not now")
        done: Any = await until(lambda: finished(live, sid, 1))
        assert done.outcome == "ok", done.error
    assert notified(log) == [Notified(str(asked.id), "waiting", str(db),
                                      f"session {sid} (coder) waits for you: its agent asks to use"
                                      f" {ASKING[agent.name]}: git")]
