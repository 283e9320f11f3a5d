"""Agents over the Agent Client Protocol (``acp:NAME``): the real agents, run by a real engine,
against the scripted model server: a turn with a tool, then one resumed in a new process;
permission requests as state W, allowed or refused with a reason that reaches the model; fork;
files written through Procession, beneath the session's bounds only; and no process left
behind. Interrupt and cancel are the runner contract's (``test_runner_contract``)."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from conftest import until
from procession import Workspace
from procession.present import lines
from support.agent_clis import AgentSandbox, sandbox, session_env
from support.models import Call, ModelServer, calls, say, shell
from support.runs import finished, marked

from test_permissions import waiting

#: The agents each test runs over ACP (those whose tests need what only some agents do say so).
AGENTS = ["gemini", "qwen", "copilot", "opencode"]
#: The adapters' sandboxes, by the ACP agent name each stands for.
ADAPTERS = {"claude-agent-acp": "claude", "codex-acp": "codex"}


@pytest.fixture(params=AGENTS)
def acp_agent(request: pytest.FixtureRequest, model_server: ModelServer, tmp_path: Path) -> AgentSandbox:
    return sandbox(request.param, model_server, tmp_path)


async def acp_session(ws: Workspace, agent: AgentSandbox, monkeypatch: pytest.MonkeyPatch, **settings: Any) -> int:
    """A session run by ``agent`` over ACP, with the sandbox's settings (an adapter named where
    Procession looks for it, ``$PROCESSION_<NAME>_ACP``)."""
    env, passed = session_env([agent], monkeypatch.setenv)
    name = ADAPTERS.get(agent.name, agent.name)
    if agent.name in ADAPTERS:
        env = {k: v for k, v in env.items() if "-" not in k} | {f"PROCESSION_{name.upper()}_ACP": str(agent.cli.command)}
    return (await ws.spawn("acp", "dev", runner=f"acp:{name}", cwd=str(agent.workdir), env=env,
                           passed=passed, **settings)).sid


async def ask(ws: Workspace, sid: int, text: str, runs: int) -> Any:
    await ws.send(sid, text)
    await ws.activate(sid)
    return await until(lambda: finished(ws, sid, runs))


async def test_a_turn_with_a_tool_then_one_resumed_in_a_new_process(
        acp_agent: AgentSandbox, model_server: ModelServer, engine: Any, live: Workspace, db: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    agent = acp_agent
    model_server.script.add(shell("echo hi > file", text="Writing."), say("The file is written."))
    sid = await acp_session(live, agent, monkeypatch)
    run = await ask(live, sid, "write hi into file", 1)
    assert run.outcome == "ok", run.error
    assert (agent.workdir / "file").read_text() == "hi\n"
    shown = (await live.show(sid)).to_json()
    said = [(c["role"], c["content"].splitlines()[0]) for c in shown["context"]]
    assert said[0] == ("user", "write hi into file") and said[-1] == ("assistant", "The file is written."), said
    [tool] = [c["tool"] for c in shown["context"] if c["role"] == "tool"]
    assert "echo hi > file" in str(tool["input"]) and tool["is_error"] is False
    ref = shown["agent_ref"]
    assert ref["cli"] == agent.name and ref["id"] and ref["acp"]["protocol"] == 1 and ref["acp"]["agent"]
    said = dict(lines.facts(await live.show(sid)))  # what show and the monitor's detail view say
    assert f"over ACP 1: {ref['acp']['agent']} {ref['acp']['version']}" in said["agent"], said["agent"]
    assert marked(db, sid) == []  # the agent ended with its turn, its whole tree
    model_server.script.add(say("Again."))
    run = await ask(live, sid, "once more", 2)
    assert run.outcome == "ok", run.error
    history = [(m.role, m.content) for m in await live.history(sid)]
    assert history[-2:] == [("user", "once more"), ("assistant", "Again.")]
    assert [m for m, n in Counter(history).items() if n > 1] == []  # a load's replay is not this run's
    again = (await live.show(sid)).agent_ref["id"]
    # the same session taken up again; Gemini CLI cannot (its load finds no session made over ACP):
    # a new one, given the conversation so far
    assert again == ref["id"] if agent.name != "gemini" else again != ref["id"]
    assert "write hi into file" in " ".join(model_server.requests[-1].texts("user"))


@pytest.mark.parametrize("name", [*AGENTS, *ADAPTERS])
async def test_a_permission_request_waits_in_state_w_and_runs_once_allowed(
        name: str, model_server: ModelServer, engine: Any, live: Workspace, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    agent = sandbox(name, model_server, tmp_path)
    model_server.script.add(shell("echo hi > asked.txt"), say("Done."))
    sid = await acp_session(live, agent, monkeypatch, permissions="ask")
    await live.send(sid, "write the file")
    await live.activate(sid)
    asked = await until(lambda: waiting(live, sid))
    assert "echo hi > asked.txt" in str(asked.input)
    assert not (agent.workdir / "asked.txt").exists()
    await live.allow(asked.id)
    done = await until(lambda: finished(live, sid, 1))
    assert done.outcome == "ok", done.error
    assert (agent.workdir / "asked.txt").read_text() == "hi\n"
    assert (await live.history(sid))[-1].content == "Done."


async def test_a_refusals_reason_reaches_the_model_as_the_next_message(
        acp_agent: AgentSandbox, model_server: ModelServer, engine: Any, live: Workspace,
        monkeypatch: pytest.MonkeyPatch) -> None:
    agent = acp_agent
    # Gemini CLI and Qwen Code go on after a refusal (a reply), opencode and Copilot CLI end their turn
    model_server.script.add(shell("echo hi > denied.txt"), say("Understood."), say("Noted."))
    sid = await acp_session(live, agent, monkeypatch, permissions="ask")
    await live.send(sid, "write the file")
    await live.activate(sid)
    asked = await until(lambda: waiting(live, sid))
    await live.deny(asked.id, why="not on a Friday")
    done = await until(lambda: finished(live, sid, 1))
    assert done.outcome == "ok", done.error
    assert not (agent.workdir / "denied.txt").exists()
    assert "not on a Friday" in " ".join(model_server.requests[-1].texts("user"))
    history = [(m.role, m.content) for m in await live.history(sid)]
    assert any(role == "user" and "not on a Friday" in text for role, text in history)
    assert history[-1][0] == "assistant" and history[-1][1] in ("Understood.", "Noted.")
    [refused] = [m.meta["tool"] for m in await live.history(sid) if m.role == "tool"]
    assert refused["is_error"] and refused["output"] == "refused: not on a Friday"


async def test_a_file_outside_the_bounds_is_never_written(
        acp_agent: AgentSandbox, model_server: ModelServer, engine: Any, live: Workspace, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Whoever refuses it (the agent's own check, Procession's answer to the agent's request or
    its file service): a run the kernel does not hold writes nothing outside its folder."""
    agent = acp_agent
    outside = tmp_path / "outside.txt"
    inside = agent.workdir / "inside.txt"
    model_server.script.add(calls(_write(agent.name, inside, "within\n"), _write(agent.name, outside, "out\n")),
                            say("Written."), say("Noted."))
    sid = await acp_session(live, agent, monkeypatch, confine="off")
    run = await ask(live, sid, "write two files", 1)
    assert run.outcome == "ok", run.error
    assert inside.read_text() == "within\n"
    assert not outside.exists()
    tools = [m.meta["tool"] for m in await live.history(sid) if m.role == "tool"]
    assert sorted(t["is_error"] for t in tools) == [False, True], tools


async def test_procession_serves_an_agents_file_requests_beneath_the_bounds_only(tmp_path: Path) -> None:
    """What an agent asks Procession to read or write (``fs/*``), as the agent sends it: beneath
    the session's folder, never out of it by a path, a ``..`` or a link, nor into a folder bound
    read-only."""
    import json

    from procession.engine.runners.agents.acp import AcpReader
    from procession.engine.runners.agents.base import Turn

    folder, docs, outside = tmp_path / "work", tmp_path / "docs", tmp_path / "outside"
    for made in (folder, docs, outside):
        made.mkdir()
    (folder / "escape").symlink_to(outside)
    (docs / "readme.txt").write_text("read me\n")
    (outside / "secret.txt").write_text("mine\n")
    os.link(outside / "secret.txt", folder / "linked.txt")  # a hard link an unconfined agent made
    os.mkfifo(folder / "fifo")
    turn = Turn(1, "hi", 0, "", "", str(folder), None)
    turn.served = ([str(folder)], [str(docs)])
    reader = AcpReader(turn, "gemini")
    assert reader.talk is not None
    asked = [("fs/write_text_file", {"path": str(folder / "made.txt"), "content": "ok\n"}),
             ("fs/write_text_file", {"path": str(outside / "planted.txt"), "content": "x"}),
             ("fs/write_text_file", {"path": str(folder / "escape" / "planted.txt"), "content": "x"}),
             ("fs/write_text_file", {"path": f"{folder}/../outside/planted.txt", "content": "x"}),
             ("fs/write_text_file", {"path": str(docs / "readme.txt"), "content": "changed"}),
             ("fs/read_text_file", {"path": str(docs / "readme.txt")}),
             ("fs/read_text_file", {"path": str(folder / "escape" / "nothing.txt")}),
             ("fs/read_text_file", {"path": "relative.txt"}),
             ("fs/write_text_file", {"path": str(folder / "linked.txt"), "content": "overwritten"}),
             ("fs/write_text_file", {"path": str(folder / "fifo"), "content": "x"}),
             ("fs/read_text_file", {"path": str(folder / "fifo")})]
    for n, (method, params) in enumerate(asked, start=100):
        reader.event({"jsonrpc": "2.0", "id": n, "method": method, "params": {"sessionId": "s", **params}})
    replies = {}
    while not reader.talk.outbox.empty():
        line = reader.talk.outbox.get_nowait()
        message = json.loads(line) if line else {}
        if message.get("id", 0) >= 100:
            replies[message["id"]] = message
    assert replies[100]["result"] == {} and (folder / "made.txt").read_text() == "ok\n"
    for n in (101, 102, 103, 104, 106, 107, 108, 109, 110):
        assert "error" in replies[n], (n, replies[n])
    assert "hard link" in replies[108]["error"]["message"] and (outside / "secret.txt").read_text() == "mine\n"
    assert "outside what the session may write" in replies[101]["error"]["message"]
    assert "leads out" in replies[102]["error"]["message"]
    assert [p.name for p in outside.iterdir()] == ["secret.txt"] and (docs / "readme.txt").read_text() == "read me\n"
    assert replies[105]["result"] == {"content": "read me\n"}


def _write(cli: str, path: Path, content: str) -> Call:
    """A call of the agent's own tool that writes a file (through ``fs/write_text_file``)."""
    return {"opencode": Call.tool("write", {"filePath": str(path), "content": content}),
            "gemini": Call.tool("write_file", {"file_path": str(path), "content": content}),
            "qwen": Call.tool("write_file", {"file_path": str(path), "content": content}),
            "copilot": Call.tool("create", {"path": str(path), "file_text": content})}[cli]


@pytest.mark.parametrize("name", ["opencode", "claude-agent-acp"])  # of the agents tried, those that offer session/fork
async def test_a_fork_over_acp_is_a_session_of_its_own(
        name: str, model_server: ModelServer, engine: Any, live: Workspace, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    agent = sandbox(name, model_server, tmp_path)
    model_server.script.add(say("First."))
    sid = await acp_session(live, agent, monkeypatch)
    assert (await ask(live, sid, "hello", 1)).outcome == "ok"
    parent = (await live.show(sid)).agent_ref["id"]
    fork = (await live.fork(sid, name="branch")).sid
    model_server.script.add(say("From the fork."))
    run = await ask(live, fork, "and you?", 1)
    assert run.outcome == "ok", run.error
    ref = (await live.show(fork)).agent_ref
    assert ref["id"] != parent and ref["cli"] == ADAPTERS.get(agent.name, agent.name)
    assert "hello" in " ".join(model_server.requests[-1].texts("user"))  # the fork carries the conversation
    assert (await live.history(fork))[-1].content == "From the fork."


async def test_a_fork_whose_agent_cannot_find_the_session_it_forks_is_given_the_conversation(
        model_server: ModelServer, engine: Any, live: Workspace, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Claude Code's transcript of the parent gone before the fork's first run (a CI run saw it
    never written, under load): the adapter cannot fork it, so the fork's own conversation goes
    to a new session of the agent, and the run goes on instead of failing."""
    agent = sandbox("claude-agent-acp", model_server, tmp_path)
    model_server.script.add(say("First."))
    sid = await acp_session(live, agent, monkeypatch)
    assert (await ask(live, sid, "hello", 1)).outcome == "ok"
    fork = (await live.fork(sid, name="branch")).sid
    for transcript in tmp_path.glob("**/agents/*/claude/projects/*/*.jsonl"):  # the parent's, if it was written
        transcript.unlink()
    model_server.script.add(say("From the fork."))
    run = await ask(live, fork, "and you?", 1)
    assert run.outcome == "ok", run.error
    told = " ".join(model_server.requests[-1].texts("user"))
    assert "hello" in told and "First." in told and "and you?" in told
    assert (await live.history(fork))[-1].content == "From the fork."


async def test_a_fork_at_a_turn_is_refused_over_acp(
        opencode_sandbox: AgentSandbox, model_server: ModelServer, engine: Any, live: Workspace,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from procession import InvalidArgument

    model_server.script.add(say("One."), say("Two."))
    sid = await acp_session(live, opencode_sandbox, monkeypatch)
    assert (await ask(live, sid, "first", 1)).outcome == "ok"
    assert (await ask(live, sid, "second", 2)).outcome == "ok"
    before = len(await live.ps(all=True))
    with pytest.raises(InvalidArgument, match="over ACP only whole: fork at 4 or later"):
        await live.fork(sid, at=2)
    assert len(await live.ps(all=True)) == before  # nothing made


async def test_any_program_that_speaks_acp_by_its_command_line(
        opencode_sandbox: AgentSandbox, model_server: ModelServer, engine: Any, live: Workspace,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from procession import InvalidArgument

    agent = opencode_sandbox
    env, passed = session_env([agent], monkeypatch.setenv)
    with pytest.raises(InvalidArgument, match="'no-such-agent' is not an executable file here"):
        await live.spawn("x", "dev", runner="acp:command:no-such-agent --acp", cwd=str(agent.workdir))
    # a program Procession knows nothing of has no state folder of its own: here it keeps its own, unconfined
    sid = (await live.spawn("any", "dev", runner=f"acp:command:{agent.cli.command} acp", cwd=str(agent.workdir),
                            env=env, passed=passed, confine="off")).sid
    model_server.script.add(say("Spoken over ACP."))
    run = await ask(live, sid, "hello", 1)
    assert run.outcome == "ok", run.error
    assert (await live.history(sid))[-1].content == "Spoken over ACP."
    ref = (await live.show(sid)).agent_ref
    assert ref["cli"] == "acp" and ref["acp"]["agent"]


async def test_a_session_of_an_agent_that_cannot_fork_over_acp_is_refused_its_fork(
        model_server: ModelServer, engine: Any, live: Workspace, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from procession import InvalidArgument

    agent = sandbox("qwen", model_server, tmp_path)  # it takes its session up (session/load) but offers no fork
    model_server.script.add(say("One."))
    sid = await acp_session(live, agent, monkeypatch)
    assert (await ask(live, sid, "first", 1)).outcome == "ok"
    before = len(await live.ps(all=True))
    with pytest.raises(InvalidArgument, match="Qwen Code, cannot fork its session over ACP"):
        await live.fork(sid)
    assert len(await live.ps(all=True)) == before


async def test_a_session_of_an_agent_given_the_conversation_each_run_forks_anywhere(
        model_server: ModelServer, engine: Any, live: Workspace, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Gemini CLI takes no session up again over ACP: each run is a new session given the
    conversation, so a fork, even at an earlier turn, is given the fork's own."""
    agent = sandbox("gemini", model_server, tmp_path)
    model_server.script.add(say("One."), say("Two."))
    sid = await acp_session(live, agent, monkeypatch)
    assert (await ask(live, sid, "first", 1)).outcome == "ok"
    assert (await ask(live, sid, "second", 2)).outcome == "ok"
    fork = (await live.fork(sid, at=2, name="early")).sid
    model_server.script.add(say("From the fork."))
    run = await ask(live, fork, "and you?", 1)
    assert run.outcome == "ok", run.error
    told = " ".join(model_server.requests[-1].texts("user"))
    assert "first" in told and "One." in told and "second" not in told and "and you?" in told
    assert [m.content for m in await live.history(fork)][-2:] == ["and you?", "From the fork."]


async def test_copilots_running_total_is_counted_once_across_the_prompts_of_a_run(
        model_server: ModelServer, engine: Any, live: Workspace, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from support.models import Usage

    agent = sandbox("copilot", model_server, tmp_path)  # its prompts answer with the process's total so far
    model_server.script.add(shell("echo hi > denied.txt", usage=Usage(1000, 10)), say("Understood.", usage=Usage(2000, 20)))
    sid = await acp_session(live, agent, monkeypatch, permissions="ask")
    await live.send(sid, "write the file")
    await live.activate(sid)
    asked = await until(lambda: waiting(live, sid))
    await live.deny(asked.id, why="not today")  # Copilot CLI ends its turn: the reason is a second prompt
    run = await until(lambda: finished(live, sid, 1))
    assert run.outcome == "ok", run.error
    assert (run.tokens_in, run.tokens_out) == (3000, 30)


async def test_claude_code_over_acp_is_hung_up_on_once_its_session_file_holds_the_answer(tmp_path: Path) -> None:
    """Claude Code under claude-agent-acp writes the turn to its session's file a moment after
    the turn's answer; hung up at the answer, it sometimes never did, and the next run found no
    session to take up (1 run in 4-5 of the contract test). The reader waits for the file to
    hold the answer (at most ``SAVED_AFTER``) before closing the agent's stdin."""
    import json

    from procession.engine.runners.agents.acp import PROMPT, AcpReader
    from procession.engine.runners.agents.base import Turn
    from procession.model import transcripts
    from procession.model.transcripts.base import Said

    env = {"CLAUDE_CONFIG_DIR": str(tmp_path / "claude")}
    turn = Turn(1, "hi", 0, "", "", str(tmp_path), None, env=env)
    reader = AcpReader(turn, "claude")
    assert reader.talk is not None
    saved = transcripts.format_of("claude").write([Said("user", "hi"), Said("assistant", "Hello.")], env,
                                                  str(tmp_path), "m")
    assert saved is not None
    reader.session = saved["id"]

    def hung_up() -> bool:
        assert reader.talk is not None
        while not reader.talk.outbox.empty():
            if reader.talk.outbox.get_nowait() is None:
                return True
        return False

    hung_up()
    reader.event({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": reader.session, "update": {
        "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Done."}}}})
    reader.event({"jsonrpc": "2.0", "id": PROMPT, "result": {"stopReason": "end_turn"}})
    await asyncio.sleep(0.5)
    assert not hung_up()  # the file ends with the turn before: this one's answer is not in it yet
    path = Path(saved["transcript"])
    lines = path.read_text().splitlines()
    said = [json.loads(line) for line in lines if json.loads(line).get("type") in ("user", "assistant")]
    answer = {**said[-1], "uuid": "00000000-0000-4000-8000-000000000001", "parentUuid": said[-1]["uuid"],
              "message": {**said[-1]["message"], "content": [{"type": "text", "text": "Done."}]}}
    path.write_text("\n".join([*lines, json.dumps(answer)]) + "\n")  # as Claude Code appends it
    for _ in range(40):
        await asyncio.sleep(0.05)
        if hung_up():
            break
    else:
        raise AssertionError("not hung up once the answer was saved")
