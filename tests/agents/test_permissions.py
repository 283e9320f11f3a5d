"""A session that needs a person: what its agent may not do unasked waits (W) for an answer.

The real agent CLIs against the scripted model server: a tool call outside the session's
permissions reaches Procession (Claude Code through its ``--permission-prompt-tool``, a per-run
MCP server of Procession's; Codex as an approval request of ``codex app-server``; opencode as a
permission request of ``opencode serve``), the session waits, ``pending`` lists it, and the
answer goes back to the same run: allowed, the tool runs and its output reaches the model;
denied, the reason reaches the model (Claude Code and opencode: as the tool's refusal; Codex:
the call is declined and the reason follows as a message of the turn).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from conftest import until
from procession import State, Workspace
from procession.model.errors import Answered
from support.agent_clis import AgentSandbox
from support.models import ModelServer, say, shell
from support.runs import finished, state_of

from test_runners import agent_session, ask


async def waiting(ws: Workspace, sid: int) -> Any:
    """The session's open request once it waits for one."""
    found = await ws.pending([sid])
    return found[0] if found and await state_of(ws, sid) is State.WAITING else None


async def ask_for_shell(ws: Workspace, agent: AgentSandbox, model_server: ModelServer,
                        monkeypatch: pytest.MonkeyPatch, command: str) -> tuple[int, Any]:
    model_server.script.add(shell(command), say("Done."))
    sid = await agent_session(ws, agent, monkeypatch)
    await ws.set(sid, permissions="ask")
    await ws.send(sid, "write the file")
    await ws.activate(sid)
    return sid, await until(lambda: waiting(ws, sid))


#: The CLIs that ask, and the name of their shell tool.
ASKING = {"claude": "Bash", "codex": "exec_command", "opencode": "bash"}


@pytest.fixture(params=list(ASKING))
def agent(request: pytest.FixtureRequest) -> AgentSandbox:
    """Each CLI that asks, in its sandbox."""
    found: AgentSandbox = request.getfixturevalue(f"{request.param}_sandbox")
    return found


async def test_a_tool_call_outside_its_permissions_waits_and_allow_runs_it_in_the_same_run(
        agent: AgentSandbox, model_server: ModelServer, engine: Any, live: Workspace,
        monkeypatch: pytest.MonkeyPatch) -> None:
    sid, asked = await ask_for_shell(live, agent, model_server, monkeypatch, "echo hi > asked.txt")
    assert (asked.tool, asked.input, asked.subject) == (ASKING[agent.name], {"command": "echo hi > asked.txt"},
                                                        "=echo hi > asked.txt")  # a redirection: itself only
    assert not (agent.workdir / "asked.txt").exists()  # nothing ran before the answer
    run = (await live.runs(sid))[-1]
    answered = await live.allow(asked.id)
    assert answered.state is State.RUNNING
    done = await until(lambda: finished(live, sid, 1))
    assert done.outcome == "ok", done.error
    assert done.id == run.id  # the same run went on
    assert (agent.workdir / "asked.txt").read_text() == "hi\n"
    result = model_server.requests[-1].results()
    assert list(result.values()) and "denied" not in " ".join(result.values()).lower()
    assert (await live.request(asked.id)).answer == "allow"
    assert (await live.history(sid))[-1].content == "Done."


async def test_deny_sends_its_reason_to_the_agent(
        agent: AgentSandbox, model_server: ModelServer, engine: Any, live: Workspace,
        monkeypatch: pytest.MonkeyPatch) -> None:
    sid, asked = await ask_for_shell(live, agent, model_server, monkeypatch, "echo hi > denied.txt")
    await live.deny(asked.id, why="not on a Friday")
    done = await until(lambda: finished(live, sid, 1))
    assert done.outcome == "ok", done.error
    assert not (agent.workdir / "denied.txt").exists()
    last = model_server.requests[-1]
    assert "not on a Friday" in " ".join([*last.results().values(), *last.texts("user")])


async def test_two_faces_answering_at_once_one_wins_and_the_other_is_told(
        claude_sandbox: AgentSandbox, model_server: ModelServer, engine: Any, live: Workspace, db: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    sid, request = await ask_for_shell(live, claude_sandbox, model_server, monkeypatch, "echo hi > raced.txt")
    other = await Workspace.open(db, actor="tui")
    try:
        results = await asyncio.gather(live.allow(request.id), other.deny(request.id, why="no"),
                                       return_exceptions=True)
    finally:
        await other.close()
    refused = [r for r in results if isinstance(r, Exception)]
    assert len(refused) == 1 and isinstance(refused[0], Answered), results
    assert "answered already" in str(refused[0])
    await until(lambda: finished(live, sid, 1))
    won = (await live.request(request.id)).answer
    assert (claude_sandbox.workdir / "raced.txt").exists() is (won == "allow")


async def test_interrupt_while_it_waits_ends_the_run_and_withdraws_the_request(
        agent: AgentSandbox, model_server: ModelServer, engine: Any, live: Workspace,
        monkeypatch: pytest.MonkeyPatch) -> None:
    sid, asked = await ask_for_shell(live, agent, model_server, monkeypatch, "echo hi > never.txt")
    await live.interrupt(sid)
    done = await until(lambda: finished(live, sid, 1))
    assert done.outcome == "interrupted", done.error
    assert (await live.request(asked.id)).answer == "withdrawn"
    assert await live.pending() == []
    assert not (agent.workdir / "never.txt").exists()


@pytest.mark.parametrize("cli", ["codex", "opencode"])
async def test_under_ask_a_session_resumes_its_agents_session_and_a_fork_gets_its_own(
        cli: str, request: pytest.FixtureRequest, model_server: ModelServer, engine: Any, live: Workspace,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The runs of a CLI driven through its server (under ``ask``) go on with the agent's own
    session as its other runs do, each counting its own tokens."""
    agent: AgentSandbox = request.getfixturevalue(f"{cli}_sandbox")
    model_server.script.add(say("One."), say("Two."), say("The fork's answer."))
    sid = await agent_session(live, agent, monkeypatch)
    await live.set(sid, permissions="ask")
    assert (await ask(live, sid, "first question", 1)).outcome == "ok"
    ref = (await live.show(sid)).agent_ref
    assert ref is not None
    assert (await ask(live, sid, "second question", 2)).outcome == "ok"
    assert (await live.show(sid)).agent_ref["id"] == ref["id"]  # type: ignore[index]
    assert "first question" in " ".join(model_server.turn_requests()[-1].texts("user"))
    child = (await live.fork(sid, "what if")).sid
    run = await ask(live, child, "a different question", 1)
    assert run.outcome == "ok", run.error
    forked = (await live.show(child)).agent_ref
    assert forked is not None and forked["id"] != ref["id"]
    seen = model_server.turn_requests()[-1]
    assert "first question" in " ".join(seen.texts("user")) and "a different question" in seen.texts("user")[-1]
    runs = [*await live.runs(sid), *await live.runs(child)]
    assert [r.tokens_in + r.tokens_out for r in runs] == [110, 110, 110]  # each its own, not the thread's total
    assert [m.content for m in await live.history(sid) if m.role == "assistant"] == ["One.", "Two."]


async def test_a_hostile_opencode_session_id_never_reaches_a_url(tmp_path: Path) -> None:
    """A snapshot's agent reference names the session a run resumes: one with ``..`` or ``/``
    is refused before any request is made to the server."""
    from procession.engine.runners.agents.base import Turn
    from procession.engine.runners.agents.opencode_serve import OpencodeServeReader

    class NoRequests:
        async def post(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError(f"a request was made: {args}")

        get = post

    for hostile in ("../permission/x", "ses_1/../../config", "a b"):
        turn = Turn(1, "hi", 1, "", "", str(tmp_path), {"cli": "opencode", "id": hostile, "cwd": str(tmp_path)})
        with pytest.raises(ValueError, match="is not an opencode id"):
            await OpencodeServeReader(turn)._start(NoRequests())  # type: ignore[arg-type]
