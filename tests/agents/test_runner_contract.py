"""The contract every runner keeps, the same cases for each: ``claude:``, ``codex:``,
``opencode:``, ``openai:``, ``command:`` and ``acp:*``, each against the scripted model server
(a ``command:`` runner that asks it, ``support/chat_step.py``).

A reply lands in the history; the next turn continues the same conversation; an interrupt
mid-reply ends the run ``interrupted``, leaves no process, and the session runs again; then a
cancel mid-reply ends the session and leaves no process."""

from __future__ import annotations

import asyncio
import shlex
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import engine_on, until
from procession import State, Workspace
from support.agent_clis import sandbox, session_env
from support.models import Hold, ModelServer, say
from support.runs import finished, marked, state_of

CHAT_STEP = Path(__file__).resolve().parents[1] / "support" / "chat_step.py"
#: Every runner the contract holds for: its spec's kind, and the agent for an agent's.
RUNNERS = ["claude:", "codex:", "opencode:", "openai:", "command:", "acp:opencode", "acp:gemini", "acp:qwen",
           "acp:copilot", "acp:claude", "acp:codex"]
#: The adapters' sandboxes, by the ACP agent each stands for.
ADAPTERS = {"claude": "claude-agent-acp", "codex": "codex-acp"}


async def spawned(ws: Workspace, runner: str, server: ModelServer, tmp_path: Path,
                  monkeypatch: pytest.MonkeyPatch) -> int:
    """A session of ``runner`` pointed at ``server``."""
    kind, _, agent = runner.partition(":")
    if kind == "openai":
        return (await ws.spawn("c", "contract", runner=f"openai:scripted@{server.url_v1}", cwd=str(tmp_path))).sid
    if kind == "command":
        line = shlex.join([sys.executable, str(CHAT_STEP), server.url_v1])
        return (await ws.spawn("c", "contract", runner=f"command:{line}", cwd=str(tmp_path))).sid
    name = agent if kind == "acp" else kind
    box = sandbox(ADAPTERS.get(name, name) if kind == "acp" else name, server, tmp_path)
    env, passed = session_env([box], monkeypatch.setenv)
    if kind == "acp" and name in ADAPTERS:  # the adapter, where Procession looks for it
        env = {k: v for k, v in env.items() if "-" not in k} | {f"PROCESSION_{name.upper()}_ACP": str(box.cli.command)}
    spec = f"acp:{name}" if kind == "acp" else f"{name}:"
    return (await ws.spawn("c", "contract", runner=spec, cwd=str(box.workdir), env=env, passed=passed)).sid


async def turn(ws: Workspace, sid: int, text: str, runs: int) -> Any:
    await ws.send(sid, text)
    await ws.activate(sid)
    return await until(lambda: finished(ws, sid, runs))


async def stopped_mid_reply(ws: Workspace, sid: int, server: ModelServer, stop: Callable[[int], Awaitable[Any]],
                           runs: int) -> Any:
    """The session's run number ``runs``, ``stop``ped (interrupt, cancel) while the model's reply is held."""
    hold = Hold()
    server.script.add(say("Thinking.", hold=hold))
    await ws.send(sid, "think")
    await ws.activate(sid)
    try:
        await asyncio.to_thread(hold.wait_reached)
        await stop(sid)
        return await until(lambda: finished(ws, sid, runs))
    finally:
        hold.release()


@pytest.mark.parametrize("runner", RUNNERS)
async def test_a_reply_lands_and_the_next_turn_continues_the_conversation(
        runner: str, model_server: ModelServer, engine: Any, live: Workspace, db: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    model_server.script.add(say("Hello there."), say("Still here."))
    sid = await spawned(live, runner, model_server, tmp_path, monkeypatch)
    run = await turn(live, sid, "hello", 1)
    assert run.outcome == "ok", run.error
    assert [(m.role, m.content) for m in await live.history(sid)] == [("user", "hello"), ("assistant", "Hello there.")]
    own = (await live.show(sid)).agent_ref
    run = await turn(live, sid, "are you there?", 2)
    assert run.outcome == "ok", run.error
    assert (await live.history(sid))[-1].content == "Still here."
    said = " ".join(model_server.requests[-1].texts("user"))
    assert "hello" in said and "are you there?" in said  # one conversation, the first turn in it
    if own is not None and runner != "acp:gemini":  # an agent's own session, taken up again (Gemini CLI cannot)
        assert (await live.show(sid)).agent_ref["id"] == own["id"]
    assert marked(db, sid) == []


@pytest.mark.parametrize("runner", RUNNERS)
async def test_an_interrupt_then_a_cancel_mid_reply_leave_no_process(
        runner: str, model_server: ModelServer, engine: Any, live: Workspace, db: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    sid = await spawned(live, runner, model_server, tmp_path, monkeypatch)
    run = await stopped_mid_reply(live, sid, model_server, live.interrupt, 1)
    assert run.outcome == "interrupted", run.error
    if runner.startswith("acp:"):  # told by the protocol (session/cancel): it ended its turn and itself, no signal
        assert run.exit_code == 0, (run.exit_code, run.error)
    assert await state_of(live, sid) is State.SLEEPING
    assert marked(db, sid) == []
    model_server.script.add(say("Back."))
    run = await turn(live, sid, "go on", 2)
    assert run.outcome == "ok", run.error  # the session runs again
    assert (await live.history(sid))[-1].content == "Back."
    await stopped_mid_reply(live, sid, model_server, live.cancel, 3)
    assert await state_of(live, sid) is State.TERMINATED
    assert marked(db, sid) == []


async def test_an_agent_session_working_where_its_workspace_is_kept_has_its_own_agent_folder_only(
        model_server: ModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The workspace kept in the project the session works in (``--db .procession/ws.db``): its
    run's world covers the workspace's files and every session's agent folder, and shows its
    own again, where Claude Code keeps the session it takes up at the next turn."""
    box = sandbox("claude", model_server, tmp_path)
    db = box.workdir / ".procession" / "ws.db"
    db.parent.mkdir()
    (db.parent / "agents" / "someone-else").mkdir(parents=True)
    env, passed = session_env([box], monkeypatch.setenv)
    model_server.script.add(say("Hello there."), say("Still here."))
    async with await Workspace.open(db) as ws, engine_on(db):
        sid = (await ws.spawn("c", "contract", runner="claude:", cwd=str(box.workdir), env=env, passed=passed)).sid
        for n, text in enumerate(("hello", "are you there?"), 1):
            run = await turn(ws, sid, text, n)
            assert run.outcome == "ok", run.error
        assert (await ws.history(sid))[-1].content == "Still here."
        own = (await ws.show(sid)).agent_ref
        assert "in a world of its own" in (await ws.info(sid)).confinement
    said = " ".join(model_server.requests[-1].texts("user"))
    assert "hello" in said and "are you there?" in said  # its own session, taken up from its own folder
    assert list((db.parent / "agents").glob(f"*/claude/projects/*/{own['id']}.jsonl"))
