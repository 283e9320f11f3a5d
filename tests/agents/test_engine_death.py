"""An engine that dies or stops under a waiting agent run (state W): what the next engine finds.

The real Claude Code against the scripted model server, the engine a process of its own that
is SIGKILLed (or stopped) while the run waits for a person: the next engine kills what the run
left and never brings the run's messages into the history a second time.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import pytest

from conftest import HANG_S, until
from procession import State, Workspace
from support.agent_clis import AgentSandbox
from support.models import Hold, ModelServer, say, shell
from support.runs import start_engine_process, state_of

from test_permissions import waiting
from test_runners import agent_session


async def engine_pid(ws: Workspace) -> int | None:
    engine = (await ws.activity())["engine"]
    return engine["pid"] if engine else None


def cli_processes(db: Path, sid: int, command: Path) -> list[psutil.Process]:
    """The processes of session ``sid``'s runs that are its agent CLI (the run's marks in their
    environment, the CLI's command on their command line)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            words = proc.info["cmdline"] or []
            env = proc.environ() if any(command.name in w for w in words[:2]) else {}
            if env.get("PROCESSION_SESSION") == str(sid) and Path(env.get("PROCESSION_DB", "")) == db:
                found.append(proc)
        except psutil.Error:
            continue
    return found


async def waiting_run(ws: Workspace, agent: AgentSandbox, model_server: ModelServer,
                      monkeypatch: pytest.MonkeyPatch, db: Path, hold: Hold | None = None, **settings: str) -> tuple[int, Any, subprocess.Popen[str]]:
    """A Claude session under ``--permissions ask`` whose run, in an engine process, waits for a
    person to allow a shell command (having said something first); the model's next turn waits
    for ``hold``."""
    model_server.script.add(shell("echo hi > asked.txt", text="Writing the file."), say("Done.", hold=hold))
    sid = await agent_session(ws, agent, monkeypatch)
    await ws.set(sid, permissions="ask", **settings)  # type: ignore[arg-type]
    await ws.send(sid, "write the file")
    engine = start_engine_process(db)
    try:
        await until(lambda: engine_pid(ws))
        await ws.activate(sid)
        asked = await until(lambda: waiting(ws, sid))
        await until(lambda: _said(ws, sid, "Writing the file."))
    except BaseException:
        engine.kill()
        engine.communicate(timeout=HANG_S)
        raise
    assert cli_processes(db, sid, agent.cli.command)
    return sid, asked, engine


async def test_an_engine_killed_under_a_waiting_run_leaves_no_cli_and_no_message_twice(
        claude_sandbox: AgentSandbox, model_server: ModelServer, live: Workspace, db: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    hold = Hold()  # the CLI, its asking server gone with its engine, goes on to the model: it waits there
    sid, asked, first = await waiting_run(live, claude_sandbox, model_server, monkeypatch, db, hold, confine="off")
    said = [(m.role, m.content) for m in await live.history(sid)]
    first.kill()
    first.communicate(timeout=HANG_S)
    await asyncio.to_thread(hold.wait_reached)
    assert cli_processes(db, sid, claude_sandbox.cli.command)  # no world to end with it: the next engine must
    second = start_engine_process(db)
    try:
        await until(lambda: engine_pid(live))
        assert (await until(lambda: _lost(live, sid))).outcome == "lost"
        await until(lambda: not cli_processes(db, sid, claude_sandbox.cli.command))  # killed: gone once the kernel delivered it
        assert await state_of(live, sid) is State.WAITING  # the request outlives its engine
        await live.interrupt(sid)  # withdrawn: the session sleeps, and its transcript may be synced
        await live.sync(sid)
        history = [(m.role, m.content) for m in await live.history(sid)]
        twice = [m for m, n in Counter(history).items() if n > 1]
        assert twice == [], history
        assert history[:len(said)] == said
    finally:
        hold.release()
        second.terminate()
        second.communicate(timeout=HANG_S)


async def _lost(ws: Workspace, sid: int) -> Any:
    runs = await ws.runs(sid)
    return runs[-1] if runs and runs[-1].outcome else None


async def _said(ws: Workspace, sid: int, text: str) -> list[tuple[str, str]] | None:
    """The session's history as (role, content), once it holds ``text``."""
    history = [(m.role, m.content) for m in await ws.history(sid)]
    return history if ("assistant", text) in history else None


async def test_an_engine_killed_before_its_run_said_anything_leaves_the_prompt_once(
        claude_sandbox: AgentSandbox, model_server: ModelServer, live: Workspace, db: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    hold = Hold()
    model_server.script.add(say("Hello.", hold=hold))
    sid = await agent_session(live, claude_sandbox, monkeypatch)
    await live.set(sid, confine="off")
    await live.send(sid, "say hello")
    first = start_engine_process(db)
    try:
        await until(lambda: engine_pid(live))
        await live.activate(sid)
        await asyncio.to_thread(hold.wait_reached)  # its prompt is in the transcript, nothing is said yet
        await until(lambda: _announced(live, sid))
    finally:
        first.kill()
        first.communicate(timeout=HANG_S)
    second = start_engine_process(db)
    try:
        assert (await until(lambda: _lost(live, sid))).outcome == "lost"
        await until(lambda: not cli_processes(db, sid, claude_sandbox.cli.command))  # killed: gone once the kernel delivered it
        await live.sync(sid)
        assert [(m.role, m.content) for m in await live.history(sid)] == [("user", "say hello")]
    finally:
        hold.release()
        second.terminate()
        second.communicate(timeout=HANG_S)


async def _announced(ws: Workspace, sid: int) -> bool:
    """Whether the session's run has announced its agent's own session (it is stored)."""
    return (await ws.show(sid, last=0)).agent_ref is not None


@pytest.mark.parametrize("agent_sandbox", ["codex", "opencode"], indirect=True)
async def test_a_lost_run_of_a_cli_whose_messages_name_no_record_brings_none_twice(
        agent_sandbox: AgentSandbox, model_server: ModelServer, live: Workspace, db: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Codex's and opencode's events name no record of their transcripts, so what a run stored
    does not move the session's read position: a sync after the run was lost reads its prompt
    and what it stored again, and leaves them out (what the run did not store, it brings)."""
    hold = Hold()  # the model's answer to the tool's output waits: the run is mid-turn when its engine dies
    model_server.script.add(shell("echo hi > made.txt", text="Writing the file."), say("Done.", hold=hold))
    sid = await agent_session(live, agent_sandbox, monkeypatch)
    await live.send(sid, "write the file")
    first = start_engine_process(db)
    try:
        await until(lambda: engine_pid(live))
        await live.activate(sid)
        await asyncio.to_thread(hold.wait_reached)
        said = await until(lambda: _holding(live, sid, "tool"))
    finally:
        first.kill()
        first.communicate(timeout=HANG_S)
    second = start_engine_process(db)
    try:
        assert (await until(lambda: _lost(live, sid))).outcome == "lost"
        await until(lambda: not cli_processes(db, sid, agent_sandbox.cli.command))  # killed: gone once the kernel delivered it
        await live.sync(sid)
        history = [(m.role, m.content) for m in await live.history(sid)]
        assert history[:len(said)] == said
        assert [m for m, n in Counter(history).items() if n > 1] == [], history
    finally:
        hold.release()
        second.terminate()
        second.communicate(timeout=HANG_S)


async def _holding(ws: Workspace, sid: int, role: str) -> list[tuple[str, str]] | None:
    """The session's history as (role, content), once it holds a message of ``role``."""
    history = [(m.role, m.content) for m in await ws.history(sid)]
    return history if any(r == role for r, _ in history) else None
