"""The real agent CLIs, headless, against the scripted model server (no procession involved).

These pin down what the runners build on: each CLI runs the scripted shell command in its
working folder and sends the result back, reports the usage the server said, resumes its own
session with the earlier turns, reads files and calls MCP tools under the names the server
gives them, and waits on a held reply until it is released.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.agent_clis import AgentSandbox, CliRun
from support.models import Hold, ModelServer, Usage, mcp_call, read_file, say, shell
from support.wait import HANG_S

MCP_CALC = Path(__file__).resolve().parents[1] / "support" / "mcp_calc.py"


def reported_usage(cli: str, run: CliRun) -> Usage:
    """What the CLI says the run used, summed over its model calls, in `Usage`'s terms."""
    if cli == "claude":
        u = run.of("result")[-1]["usage"]
        return Usage(u["input_tokens"], u["output_tokens"], u["cache_read_input_tokens"],
                     u["cache_creation_input_tokens"])
    if cli == "codex":  # the thread's running total, the prompt counted whole
        u = run.of("turn.completed")[-1]["usage"]
        return Usage(u["input_tokens"] - u["cached_input_tokens"] - u["cache_write_input_tokens"],
                     u["output_tokens"], u["cached_input_tokens"], u["cache_write_input_tokens"])
    steps = [e["part"]["tokens"] for e in run.of("step_finish")]
    return Usage(sum(t["input"] for t in steps), sum(t["output"] for t in steps),
                 sum(t["cache"]["read"] for t in steps), sum(t["cache"]["write"] for t in steps))


def sent_call_id(server: ModelServer, turn: int) -> str:
    """The id of the one tool call the server sent in scripted turn ``turn``."""
    [use] = server.turn_requests()[turn].sent
    return use.id


def test_a_tool_call_runs_and_a_resumed_session_sends_the_earlier_turns(
        agent_sandbox: AgentSandbox, model_server: ModelServer) -> None:
    agent, cli = agent_sandbox, agent_sandbox.name
    model_server.script.add(
        shell("echo hi > file", text="Writing the file.", usage=Usage(1200, 30, cache_read=800, cache_write=400)),
        say("The file is written.", usage=Usage(300, 12, cache_read=2000, cache_write=60)),
        say("Still written.", usage=Usage(50, 5)))

    first = agent.prompt("Write hi into a file named file")
    assert first.returncode == 0, first.stderr
    assert (agent.workdir / "file").read_text() == "hi\n"
    asked, answered = model_server.turn_requests()
    [call] = asked.sent
    assert call.id in answered.results(), f"{cli} did not send the result of {call.name}"
    assert "The file is written." in first.stdout
    # Chat completions have no cache-write count opencode reads: it counts those tokens as input.
    written = Usage(1500, 42, cache_read=2800, cache_write=460) if cli != "opencode" else Usage(1960, 42, 2800, 0)
    assert reported_usage(cli, first) == written

    session = agent.session_id(first)
    second = agent.prompt("Is it still there?", resume=session)
    assert second.returncode == 0, second.stderr
    assert agent.session_id(second) == session
    resumed = model_server.turn_requests()[-1]
    assert any("Write hi into a file named file" in t for t in resumed.texts("user"))
    assert any("Is it still there?" in t for t in resumed.texts("user"))
    assert {"Writing the file.", "The file is written."} <= set(resumed.texts("assistant"))
    assert call.id in resumed.results()
    assert len(model_server.turn_requests()) == 3


def test_the_cli_reads_a_file_and_calls_an_mcp_tool(agent_sandbox: AgentSandbox, model_server: ModelServer,
                                                   tmp_path: Path) -> None:
    log = tmp_path / "mcp-calls.jsonl"
    agent_sandbox.add_mcp_server("calc", [sys.executable, str(MCP_CALC), str(log)])
    (agent_sandbox.workdir / "notes.txt").write_text("line one\nline two\n")
    model_server.script.add(read_file("notes.txt"), mcp_call("calc", "add", {"a": 2, "b": 3}), say("Five."))

    run = agent_sandbox.prompt("Read the notes, then add 2 and 3")
    assert run.returncode == 0, run.stderr
    _, after_read, after_add = model_server.turn_requests()
    assert "line two" in after_read.results()[sent_call_id(model_server, 0)]
    assert "5" in after_add.results()[sent_call_id(model_server, 1)]
    assert [json.loads(line) for line in log.read_text().splitlines()] == [{"a": 2, "b": 3}]


def test_a_held_reply_keeps_the_cli_waiting_until_released(agent_sandbox: AgentSandbox,
                                                           model_server: ModelServer) -> None:
    hold = Hold()
    model_server.script.add(say("Released.", hold=hold))
    process = agent_sandbox.start(*agent_sandbox.headless("Answer when you may"))
    try:
        hold.wait_reached()
        [held] = model_server.wait_requests(1)
        assert held.turn == 0 and any("Answer when you may" in t for t in held.texts("user"))
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(timeout=1.0)
        hold.release()
        out, err = process.communicate(timeout=HANG_S)
    finally:
        hold.release()
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert "Released." in out
