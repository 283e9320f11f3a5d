"""Claude Code, Codex and opencode as sessions: the real CLIs, run by a real engine, against
the scripted model server.

A session is spawned with the sandbox's settings as its own environment (``--env``; what reads
like a secret is ``--pass``ed from the engine's environment instead), so every run goes
through the same path a user's does: the prompt built from what the agent has not seen, the
CLI's events read live, the process tree followed by the engine.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from conftest import until
from procession import InvalidArgument, State, Workspace
from procession.engine import confinement
from procession.model import bounds
from support.agent_clis import AgentSandbox, OpencodeSandbox, session_env
from support.models import Hold, ModelServer, Usage, mcp_call, say, shell
from support.runs import finished, last_run

MCP_CALC = Path(__file__).resolve().parents[1] / "support" / "mcp_calc.py"
TOOL = {"claude": "Bash", "codex": "exec_command", "opencode": "bash"}


async def agent_session(ws: Workspace, agent: AgentSandbox, monkeypatch: pytest.MonkeyPatch, name: str = "coder",
                        **extra: str) -> int:
    """A session run by ``agent``'s CLI in its sandbox: settings stored, keys passed."""
    settings, passed = session_env([agent], monkeypatch.setenv, extra=extra)
    return (await ws.spawn(name, "dev", runner=f"{agent.name}:", cwd=str(agent.workdir), env=settings,
                           passed=passed)).sid


async def ask(ws: Workspace, sid: int, text: str, runs: int) -> Any:
    """Send ``text``, activate, and wait for run number ``runs`` of the session to end."""
    await ws.send(sid, text)
    await ws.activate(sid)
    return await until(lambda: finished(ws, sid, runs))


def tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


async def step_pid(ws: Workspace, sid: int) -> int | None:
    info = await ws.info(sid)
    return info.pid if info.state in (State.RUNNING, State.SUSPENDED) else None


def gone(process: psutil.Process) -> bool:
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except (psutil.Error, OSError):  # it went while being looked at
        return True


def sleeps_of(pid: int, seconds: str) -> list[psutil.Process]:
    """The ``sleep SECONDS`` processes among ``pid``'s descendants."""
    found = []
    for p in tree(pid):
        try:
            if p.name() == "sleep" and seconds in p.cmdline():
                found.append(p)
        except psutil.Error:  # it went while being looked at
            pass
    return found


def end_sleep(pid: int, seconds: str) -> None:
    """End the tool's ``sleep SECONDS``; its shell goes on to the next command. The test, not
    a clock, says when the tool is done: a sleep of fixed length could end before a slow
    machine has looked at it. A stopped sleep only takes the signal once it is continued."""
    for p in sleeps_of(pid, seconds):
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass


def transcript_state(agent: AgentSandbox, ref: dict[str, Any]) -> str:
    """A fingerprint of the agent's own record of a session: its transcript file's bytes, or
    (opencode keeps them in a database) its rows."""
    if isinstance(agent, OpencodeSandbox):
        con = sqlite3.connect(ref["transcript"])
        try:
            rows = con.execute("SELECT m.id, m.data, p.id, p.data FROM message m LEFT JOIN part p ON p.message_id = m.id"
                               " WHERE m.session_id = ? ORDER BY m.id, p.id", (ref["id"],)).fetchall()
        finally:
            con.close()
        return hashlib.sha256(json.dumps(rows).encode()).hexdigest()
    return hashlib.sha256(Path(ref["transcript"]).read_bytes()).hexdigest()


def reported_context(cli: str, last: Usage) -> int:
    """The context each CLI reports after a call that used ``last``: Claude the call's whole
    prompt; Codex and opencode its total, the output included."""
    return last.prompt if cli == "claude" else last.prompt + last.output


async def test_a_run_lands_structured_and_the_next_run_resumes_the_agents_own_session(
        agent_sandbox: AgentSandbox, model_server: ModelServer, engine: Any, live: Workspace,
        monkeypatch: pytest.MonkeyPatch) -> None:
    agent, cli = agent_sandbox, agent_sandbox.name
    first, second = Usage(1200, 30, cache_read=800), Usage(300, 12, cache_read=2000)
    model_server.script.add(shell("echo hi > file && cat file", usage=first), say("The file is written.", usage=second))
    sid = await agent_session(live, agent, monkeypatch)
    run = await ask(live, sid, "write hi into file", 1)
    assert run.outcome == "ok", run.error
    assert (agent.workdir / "file").read_text() == "hi\n"
    if confinement.kernel() >= 1:  # runs are confined by default: the resume below is a confined CLI's, on its own state
        assert (await live.info(sid)).confinement == confinement.said_here(bounds.ANY)

    shown = (await live.show(sid)).to_json()
    tools = [c for c in shown["context"] if c["role"] == "tool"]
    assert [t["tool"]["name"] for t in tools] == [TOOL[cli]]
    tool = tools[0]["tool"]
    assert "echo hi > file" in json.dumps(tool["input"]) and "hi" in tool["output"] and tool["is_error"] is False
    assert shown["context"][0]["content"] == "write hi into file"
    assert shown["context"][-1] == {**shown["context"][-1], "role": "assistant", "content": "The file is written."}
    ref = shown["agent_ref"]
    assert ref["cli"] == cli and ref["id"] and ref["cwd"] == str(agent.workdir) and Path(ref["transcript"]).exists()

    [listed] = [s for s in await live.ps() if s.id == sid]
    assert (listed.context_tokens, listed.context_source) == (reported_context(cli, second), "agent")
    spent = await last_run(live, sid)
    assert (spent.tokens_out, spent.cache_read) == (first.output + second.output, first.cache_read + second.cache_read)
    assert spent.tokens_in == first.input + second.input

    model_server.script.add(say("Again, done."))
    run = await ask(live, sid, "and once more", 2)
    assert run.outcome == "ok", run.error
    resumed = model_server.turn_requests()[-1]
    assert "write hi into file" in " ".join(resumed.texts("user")) and "hi" in " ".join(resumed.results().values())
    assert "and once more" in resumed.texts("user")[-1]
    assert (await live.show(sid)).agent_ref["id"] == ref["id"]  # type: ignore[index]


async def test_suspend_stops_every_process_of_the_tree_and_resume_continues_them(
        agent_sandbox: AgentSandbox, model_server: ModelServer, engine: Any, live: Workspace,
        monkeypatch: pytest.MonkeyPatch) -> None:
    model_server.script.add(shell("sleep 600; echo slept"), say("Slept."))
    sid = await agent_session(live, agent_sandbox, monkeypatch)
    await live.send(sid, "sleep a little")
    await live.activate(sid)
    pid = await until(lambda: step_pid(live, sid))
    await until(lambda: sleeps_of(pid, "600"))
    await live.suspend(sid)
    await until(lambda: all(p.status() == psutil.STATUS_STOPPED for p in tree(pid)))
    stopped = tree(pid)
    assert len(stopped) >= 3 and any(p.name() == "sleep" for p in stopped)  # the CLI, the tool's shell, its sleep
    await asyncio.sleep(0.5)
    assert all(p.status() == psutil.STATUS_STOPPED for p in stopped)
    await live.resume(sid)
    end_sleep(pid, "600")  # taken only if resumed: else the run never ends
    run = await until(lambda: finished(live, sid))
    assert run.outcome == "ok", run.error
    tools = [c for c in (await live.show(sid)).context if c.role == "tool"]
    _, said = await live.run_log(sid)
    assert len(tools) == 1 and "slept" in tools[0].meta["tool"]["output"], "".join(c.data for c in said)[-3000:]  # type: ignore[index]


async def test_cancel_during_a_tool_leaves_no_process_of_the_tree_alive(
        agent_sandbox: AgentSandbox, model_server: ModelServer, engine: Any, live: Workspace,
        monkeypatch: pytest.MonkeyPatch) -> None:
    model_server.script.add(shell("sleep 600"))
    sid = await agent_session(live, agent_sandbox, monkeypatch)
    await live.send(sid, "sleep long")
    await live.activate(sid)
    pid = await until(lambda: step_pid(live, sid))
    await until(lambda: sleeps_of(pid, "600"))
    everyone = tree(pid)
    await live.cancel(sid)
    await until(lambda: all(gone(p) for p in everyone))
    run = await until(lambda: finished(live, sid))
    assert run.outcome == "cancelled"


async def test_an_interrupted_first_run_keeps_its_agent_reference_and_the_next_run_resumes_it(
        agent_sandbox: AgentSandbox, model_server: ModelServer, engine: Any, live: Workspace,
        monkeypatch: pytest.MonkeyPatch) -> None:
    held = Hold()
    model_server.script.add(say("never finished", hold=held))
    sid = await agent_session(live, agent_sandbox, monkeypatch)
    await live.send(sid, "a question")
    await live.activate(sid)
    await asyncio.to_thread(held.wait_reached)
    await live.interrupt(sid)
    run = await until(lambda: finished(live, sid))
    held.release()
    assert run.outcome == "interrupted"
    ref = (await live.show(sid)).agent_ref
    assert ref is not None and ref["cli"] == agent_sandbox.name
    model_server.script.add(say("Answered now."))
    run = await ask(live, sid, "go on", 2)
    assert run.outcome == "ok", run.error
    assert (await live.show(sid)).agent_ref["id"] == ref["id"]  # type: ignore[index]
    assert "go on" in model_server.turn_requests()[-1].texts("user")[-1]


async def test_a_fork_gets_an_agent_session_of_its_own_and_the_parents_is_untouched(
        agent_sandbox: AgentSandbox, model_server: ModelServer, engine: Any, live: Workspace,
        monkeypatch: pytest.MonkeyPatch) -> None:
    model_server.script.add(say("One."))
    parent = await agent_session(live, agent_sandbox, monkeypatch)
    assert (await ask(live, parent, "first question", 1)).outcome == "ok"
    ref = (await live.show(parent)).agent_ref
    assert ref is not None
    before = transcript_state(agent_sandbox, ref)
    child = (await live.fork(parent, "what if")).sid
    model_server.script.add(say("The fork's answer."))
    run = await ask(live, child, "a different second question", 1)
    assert run.outcome == "ok", run.error
    forked = (await live.show(child)).agent_ref
    assert forked is not None and forked["id"] != ref["id"] and not forked.get("fork")
    assert transcript_state(agent_sandbox, ref) == before
    seen = model_server.turn_requests()[-1]
    assert "first question" in " ".join(seen.texts("user")) and "a different second question" in seen.texts("user")[-1]


async def test_fork_at_n_of_a_claude_session_resumes_seeing_only_the_first_n_messages(
        claude_sandbox: AgentSandbox, model_server: ModelServer, engine: Any, live: Workspace,
        monkeypatch: pytest.MonkeyPatch) -> None:
    model_server.script.add(say("First answer."), say("Second answer."), say("Another second answer."))
    parent = await agent_session(live, claude_sandbox, monkeypatch)
    await ask(live, parent, "question one", 1)
    await ask(live, parent, "question two", 2)
    child = (await live.fork(parent, "earlier", at=2)).sid
    run = await ask(live, child, "question two, asked otherwise", 1)
    assert run.outcome == "ok", run.error
    seen = model_server.turn_requests()[-1]
    said = [i.text for i in seen.items() if i.kind == "text" and i.role in ("user", "assistant")]
    assert "First answer." in said and "question two, asked otherwise" in said[-1]
    assert not any("question two" == t or "Second answer." in t for t in said)
    assert [m.content for m in await live.history(child)][-2:] == ["question two, asked otherwise",
                                                                  "Another second answer."]


async def test_a_bound_mcp_server_is_handed_to_the_cli_and_its_tool_is_called(
        agent_sandbox: AgentSandbox, model_server: ModelServer, engine: Any, live: Workspace,
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    log = agent_sandbox.workdir / "calls.jsonl"  # within the session's bounds: its server runs confined too
    model_server.script.add(mcp_call("mcp_calc", "add", {"a": 2, "b": 3}), say("Five."))
    sid = await agent_session(live, agent_sandbox, monkeypatch)
    await live.bind(sid, "mcp", f"stdio:{sys.executable} {MCP_CALC} {log}")
    run = await ask(live, sid, "add 2 and 3", 1)
    assert run.outcome == "ok", run.error
    [tool] = [c for c in (await live.show(sid)).context if c.role == "tool"]
    assert "add" in tool.meta["tool"]["name"] and "5" in tool.meta["tool"]["output"]  # type: ignore[index]
    assert [json.loads(line) for line in log.read_text().splitlines()] == [{"a": 2, "b": 3}]


async def test_the_monitor_shows_what_a_running_agent_does_and_its_tool_calls(
        claude_sandbox: AgentSandbox, model_server: ModelServer, engine: Any, live: Workspace, db: Path,
        monkeypatch: pytest.MonkeyPatch, monitor: Any) -> None:
    import time

    from support.monitor import keys, line_of, to

    model_server.script.add(shell("sleep 600; echo slept"), say("Slept well."))
    sid = await agent_session(live, claude_sandbox, monkeypatch)
    app = await monitor(db, clock=time.time)
    async with app.run_test(size=(160, 45)) as pilot:
        await live.send(sid, "sleep a little")
        await live.activate(sid)
        await until(lambda: "coder  ▸ Bash: sleep 600; echo slept" in line_of(app, sid))  # while the tool runs
        pid = await until(lambda: step_pid(live, sid))
        await until(lambda: sleeps_of(pid, "600"))
        end_sleep(pid, "600")
        await until(lambda: finished(live, sid))
        await to(pilot, app, sid)
        await keys(pilot, "enter")
        await until(lambda: "Bash: sleep 600; echo slept" in "\n".join(
            "".join(s.text for s in strip) for strip in app.screen._compositor.render_strips()))


async def test_an_agent_bound_to_procession_forks_itself_and_sends_through_its_own_mcp_server(
        claude_sandbox: AgentSandbox, model_server: ModelServer, engine: Any, live: Workspace, db: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    sid = await agent_session(live, claude_sandbox, monkeypatch)
    await live.bind(sid, "mcp", "procession")
    child = sid + 1
    model_server.script.add(mcp_call("procession", "fork", {"sid": sid, "name": "side quest"}),
                            mcp_call("procession", "send", {"sid": child, "text": "look into the edge case"}),
                            say("Forked and handed it over."))
    run = await ask(live, sid, "split the work", 1)
    assert run.outcome == "ok", run.error
    forked = await live.info(child)
    assert (forked.parent, forked.name) == (sid, "side quest")
    [handed] = [m for m in await live.history(child) if m.content == "look into the edge case"]
    assert handed.author == f"session:{sid}"
    journal = [(e.actor, e.call, e.session, e.other) for e in await live.journal(limit=500)]
    assert ("mcp", "fork", sid, child) in journal  # made by the session itself, through its server
    assert ("mcp", "send", child, sid) in journal


async def test_a_passed_key_never_reaches_the_store_the_journal_or_a_snapshot(
        agent_sandbox: AgentSandbox, model_server: ModelServer, engine: Any, live: Workspace, db: Path,
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import uuid

    planted = f"sk-planted-{uuid.uuid4().hex}"
    key = {"claude": "ANTHROPIC_API_KEY", "codex": "SCRIPTED_MODEL_KEY", "opencode": "OPENCODE_PLANTED_KEY"}
    model_server.script.add(shell("echo done"), say("Done."))
    sid = await agent_session(live, agent_sandbox, monkeypatch, **{key[agent_sandbox.name]: planted})
    assert key[agent_sandbox.name] in (await live.show(sid)).passed
    run = await ask(live, sid, "go", 1)
    assert run.outcome == "ok", run.error
    if agent_sandbox.name != "opencode":  # the CLI really used it: the server saw it
        assert any(planted in json.dumps(r.headers) for r in model_server.requests)
    await live.save(sid, file=str(tmp_path / "snap.json"))
    for path in (db, Path(f"{db}-wal"), tmp_path / "snap.json"):
        if path.exists():
            assert planted.encode() not in path.read_bytes(), path


@pytest.mark.parametrize("agent_sandbox", ["codex", "opencode"], indirect=True)
async def test_a_fork_before_what_its_cli_cannot_cut_is_refused_never_sent_whole(
        agent_sandbox: AgentSandbox, model_server: ModelServer, engine: Any, live: Workspace,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """After one run (the question, the agent's tool call, its answer), the agent's own session
    holds them all: a fork at message 1 would show one context and send another (opencode's was
    accepted and its first run sent the model everything). Refused, naming where it may fork."""
    model_server.script.add(shell("ls"), say("Listed."))
    sid = await agent_session(live, agent_sandbox, monkeypatch)
    assert (await ask(live, sid, "RUN: ls", 1)).outcome == "ok"
    length = (await live.info(sid)).length
    assert length >= 3
    with pytest.raises(InvalidArgument, match=rf"cannot be forked before its message {length}, the last its agent"
                                              " holds"):
        await live.fork(sid, "earlier", at=1)
    assert len(await live.ps()) == 1
    assert (await live.fork(sid, "at the end", at=length)).at == length
