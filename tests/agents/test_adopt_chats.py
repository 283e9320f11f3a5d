"""Gemini CLI's and Qwen Code's own chats adopted (``procession.model.transcripts.gemini``,
``.qwen``): against chats the real CLIs wrote, used by hand first as a person would, then
followed as the person goes on, then run by Procession over ACP, which gives the agent the
conversation and does not read its chats again.

The hand-made records at the end cover what the CLIs write only in ways a scripted turn does
not reach (Gemini's rewinds, a model call written before its tool calls)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import until
from procession import Workspace
from procession.model.errors import InvalidArgument
from procession.model.transcripts import Found, Position, format_of
from support.agent_clis import AgentSandbox, sandbox, session_env
from support.models import ModelServer, Usage, say, shell

from test_adopt import _length_over, _ran, use_directly

#: The runner of an adopted session: over ACP, with the model the agent's own settings choose.
RUNNER = {"gemini": "acp:gemini", "qwen": "acp:qwen"}


@pytest.fixture(params=sorted(RUNNER))
def chat_agent(request: pytest.FixtureRequest, model_server: ModelServer, tmp_path: Path) -> AgentSandbox:
    return sandbox(request.param, model_server, tmp_path)


def said(history: list[Any]) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in history]


async def test_a_chat_adopted_followed_then_run_over_acp_holds_each_message_once(
        chat_agent: AgentSandbox, model_server: ModelServer, engine: Any, live: Workspace,
        monkeypatch: pytest.MonkeyPatch) -> None:
    agent, cli = chat_agent, chat_agent.name
    model_server.script.add(shell("echo adopted-hi", text="Running it.", usage=Usage(1200, 30, cache_read=200)),
                            say("It printed adopted-hi.", usage=Usage(300, 12)))
    ident = use_directly(agent, "print adopted-hi")

    [made] = (await live.adopt(cli, ident[:6], env=agent.env)).results
    assert made.agent == ident and not made.already
    sid = made.sid
    shown = (await live.show(sid)).to_json()
    assert shown["runner"] == RUNNER[cli] and shown["cwd"] == str(agent.workdir)
    assert shown["agent_ref"]["cli"] == cli and shown["agent_ref"]["id"] == ident
    history = await live.history(sid)
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
    assert said(history)[0] == ("user", "print adopted-hi") and history[1].content == "Running it."
    tool = history[2].meta["tool"]
    assert tool["name"] == "run_shell_command" and tool["input"]["command"] == "echo adopted-hi"
    assert "adopted-hi" in tool["output"] and not tool["is_error"]
    assert said(history)[-1] == ("assistant", "It printed adopted-hi.")
    read = format_of(cli).read(format_of(cli).find(agent.env, ident))
    assert (read.tokens_in, read.cache_read, read.tokens_out) == (1200 + 300, 200, 30 + 12)  # the cached part apart
    again = await live.adopt(cli, ident, env=agent.env)
    assert again.results[0].already and again.results[0].sid == sid

    # the person goes on in the CLI: the engine follows the chat, each message once
    model_server.script.add(say("Second, by hand."))
    use_directly(agent, "and now?", resume=ident)
    await until(lambda: _length_over(live, sid, 4))
    assert said(await live.history(sid))[4:] == [("user", "and now?"), ("assistant", "Second, by hand.")]
    assert (await live.sync(sid)).messages == 0

    # run by Procession over ACP: the agent is given the conversation, and its chat is not read on
    settings, passed = session_env([agent], monkeypatch.setenv)
    await live.env(sid, set=settings, passed=passed)
    model_server.script.add(say("Ran by Procession."))
    await live.send(sid, "now through procession")
    await live.activate(sid)
    await until(lambda: _ran(live, sid))
    [run] = [r for r in await live.runs(sid) if r.outcome != "outside"]  # the one of Procession's, not the sync's
    assert run.outcome == "ok", run.error
    told = " ".join(model_server.requests[-1].texts("user"))
    assert "print adopted-hi" in told and "Second, by hand." in told and "now through procession" in told
    assert said(await live.history(sid))[6:] == [("user", "now through procession"), ("assistant", "Ran by Procession.")]
    with pytest.raises(InvalidArgument, match="over ACP: its runs store what it says"):
        await live.sync(sid)
    assert len(await live.history(sid)) == 8


async def test_every_chat_is_listed_and_what_is_not_one_refused_in_a_line(
        chat_agent: AgentSandbox, model_server: ModelServer, live: Workspace, tmp_path: Path) -> None:
    agent, cli = chat_agent, chat_agent.name
    model_server.script.add(say("One."), say("Two."))
    first, second = use_directly(agent, "first chat"), use_directly(agent, "second chat")
    adoption = await live.adopt(cli, every=True, env=agent.env)
    assert sorted(r.agent for r in adoption.results) == sorted([first, second]) and adoption.made == 2
    fmt = format_of(cli)
    with pytest.raises(InvalidArgument, match=f"no {'Gemini CLI' if cli == 'gemini' else 'Qwen Code'} session 'nope'"):
        fmt.find(agent.env, "nope")
    junk = tmp_path / "junk.jsonl"
    junk.write_text(json.dumps({"hello": "world"}) + "\n")
    with pytest.raises(InvalidArgument, match="is not a"):
        fmt.read(fmt.find(agent.env, str(junk)))


# --- Gemini's records as its recorder writes them, in the shapes a scripted turn does not reach

def _gemini(tmp_path: Path, records: list[dict[str, Any]]) -> Found:
    chats = tmp_path / ".gemini" / "tmp" / "work" / "chats"
    chats.mkdir(parents=True)
    (chats.parent / ".project_root").write_text(str(tmp_path))
    path = chats / "session-2026-12-01T10-00-abcdef01.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return format_of("gemini").find({"HOME": str(tmp_path)}, "abcdef01")


HEAD = {"sessionId": "abcdef01-0000-4000-8000-000000000000", "projectHash": "x", "startTime": "2026-12-01T10:00:00Z"}


def _call(status: str) -> dict[str, Any]:
    return {"id": "c1", "name": "run_shell_command", "args": {"command": "ls"}, "status": status,
            "result": [{"functionResponse": {"id": "c1", "name": "run_shell_command", "response": {"output": "a b"}}}]}


def test_a_gemini_model_call_read_before_its_tool_calls_gives_them_on_the_next_read(tmp_path: Path) -> None:
    """The recorder writes a model call with its text, then again (same id) with its tool calls
    as they run, then ended: each part is said once, the call with its result."""
    user = {"id": "u1", "type": "user", "content": [{"text": "list it"}]}
    text = {"id": "g1", "type": "gemini", "content": "Looking.", "tokens": {"input": 10, "output": 2, "total": 12}}
    found = _gemini(tmp_path, [HEAD, {"$set": {"messages": [
        {"id": "pre", "type": "user", "content": [{"text": "<session_context>\nsetup\n</session_context>"}]}]}},
                               user, text])
    first = format_of("gemini").read(found)
    assert said(first.messages) == [("user", "list it"), ("assistant", "Looking.")]
    path = Path(found.path)
    with path.open("a") as out:
        out.write(json.dumps({**text, "toolCalls": [_call("executing")]}) + "\n")
    running = format_of("gemini").read(found, first.position)
    assert running.messages == [] and running.position.last == "g1/0"
    with path.open("a") as out:
        out.write(json.dumps({**text, "toolCalls": [_call("success")]}) + "\n")
        out.write(json.dumps({"id": "g2", "type": "gemini", "content": "Two files."}) + "\n")
    after = format_of("gemini").read(found, running.position)
    assert [m.role for m in after.messages] == ["tool", "assistant"]
    assert after.messages[0].meta["tool"]["output"] == "a b" and after.tokens_in == 0  # counted the first time
    assert first.tokens_in == 10 and first.title == "list it" and first.cwd == str(tmp_path)


def test_a_gemini_chat_rewound_past_the_position_read_is_branched(tmp_path: Path) -> None:
    records = [HEAD, {"id": "u1", "type": "user", "content": [{"text": "one"}]},
               {"id": "g1", "type": "gemini", "content": "First."}]
    found = _gemini(tmp_path, records)
    read = format_of("gemini").read(found)
    with Path(found.path).open("a") as out:
        out.write(json.dumps({"$rewindTo": "g1"}) + "\n")
        out.write(json.dumps({"id": "g9", "type": "gemini", "content": "Instead."}) + "\n")
    assert format_of("gemini").read(found, read.position).branched
    assert said(format_of("gemini").read(found).messages) == [("user", "one"), ("assistant", "Instead.")]
    assert format_of("gemini").read(found, Position(0, "u1")).messages[0].content == "Instead."


def test_what_another_process_put_beside_a_gemini_chat_is_never_followed_nor_waited_on(tmp_path: Path) -> None:
    """A chat's project folder is the user's, which a session's run or a model may have written:
    ``.project_root`` as a FIFO (a read would wait forever) or a link to a secret is not read,
    and a chat that is a link is refused in one line, its target unread."""
    import os

    found = _gemini(tmp_path, [HEAD, {"id": "u1", "type": "user", "content": [{"text": "one"}]}])
    root = Path(found.path).parent.parent / ".project_root"
    root.unlink()
    os.mkfifo(root)
    assert format_of("gemini").find({"HOME": str(tmp_path)}, "abcdef01").cwd == ""  # at once, not waiting
    root.unlink()
    secret = tmp_path / "secret"
    secret.write_text("/the/secret/says/this")
    root.symlink_to(secret)
    assert format_of("gemini").read(format_of("gemini").find({"HOME": str(tmp_path)}, "abcdef01")).cwd == ""
    link = Path(found.path).with_name("session-2026-12-01T10-00-abcdef02.jsonl")
    link.symlink_to(secret)
    assert [f.path for f in format_of("gemini").discover({"HOME": str(tmp_path)})] == [found.path]
    with pytest.raises(InvalidArgument, match="a symbolic link, not a regular file; refused"):
        format_of("gemini").read(format_of("gemini").find({}, str(link)))
