"""The real agent CLIs, headless, against the scripted model server (no procession involved).

These pin down what the runners build on: each CLI runs the scripted shell command in its
working folder and sends the result back, reports the usage the server said, resumes its own
session with the earlier turns, reads files and calls MCP tools under the names the server
gives them, and waits on a held reply until it is released. The server's Gemini endpoint (for
Gemini CLI) is pinned down twice: over plain HTTP, and with the real CLI.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.agent_clis import AgentSandbox, CliRun, GeminiSandbox
from support.models import Call, Hold, ModelServer, Script, Usage, calls, http_error, mcp_call, read_file, say, shell
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


# ---------------------------------------------------------------------------------------------
# The Gemini endpoint (Gemini CLI with GOOGLE_GEMINI_BASE_URL)

GEMINI = "/v1beta/models/gemini-2.5-flash"
GEMINI_TOOLS = [{"functionDeclarations": [
    {"name": "run_shell_command", "parametersJsonSchema": {"type": "object"}},
    {"name": "read_file", "parametersJsonSchema": {"type": "object"}}]}]


def post_raw(server: ModelServer, path: str, body: Any) -> tuple[int, str]:
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=HANG_S)
    try:
        connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def gemini_stream(server: ModelServer, body: Any) -> list[dict[str, Any]]:
    """The chunks of a ``streamGenerateContent?alt=sse`` reply."""
    status, text = post_raw(server, f"{GEMINI}:streamGenerateContent?alt=sse", body)
    assert status == 200, text
    return [json.loads(line.removeprefix("data: ")) for line in text.splitlines() if line.startswith("data: ")]


def parts(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for c in chunks for p in c["candidates"][0]["content"]["parts"] if p != {"text": ""}]


def test_gemini_a_shell_call_goes_out_as_run_shell_command_and_its_response_comes_back() -> None:
    usage = Usage(input=100, output=7, cache_read=5000, cache_write=300)
    with ModelServer(Script(shell("echo hi > made.txt", usage=usage), say("Made."))) as server:
        asked = {"contents": [{"role": "user", "parts": [{"text": "<session_context>ctx</session_context>"},
                                                        {"text": "make the file"}]}],
                 "systemInstruction": {"parts": [{"text": "You are Gemini CLI."}]}, "tools": GEMINI_TOOLS}
        first = gemini_stream(server, asked)
        [call] = [p["functionCall"] for p in parts(first)]
        assert (call["name"], call["args"]["command"]) == ("run_shell_command", "echo hi > made.txt")
        assert first[-1]["candidates"][0]["finishReason"] == "STOP"
        assert first[-1]["usageMetadata"] == {"promptTokenCount": 5400, "candidatesTokenCount": 7,
                                              "cachedContentTokenCount": 5000, "totalTokenCount": 5407}
        told = dict(asked, contents=[*asked["contents"], {"role": "model", "parts": [{"functionCall": call}]},
                                     {"role": "user", "parts": [{"functionResponse": {
                                         "id": call["id"], "name": call["name"], "response": {"output": "done"}}}]}])
        assert parts(gemini_stream(server, told)) == [{"text": "Made."}]
    sent, answered = server.turn_requests()
    assert sent.sent[0].id == call["id"] and sent.path.startswith(f"{GEMINI}:streamGenerateContent")
    assert sent.texts("system") == ["You are Gemini CLI."] and sent.said() == ["make the file"]
    assert answered.results() == {call["id"]: "done"}
    assert [(i.role, i.kind, i.name) for i in answered.items()][-2:] == [("assistant", "call", "run_shell_command"),
                                                                         ("tool", "result", "run_shell_command")]


def test_gemini_whole_replies_token_counts_and_side_requests() -> None:
    with ModelServer(Script(calls(Call.read("notes.txt"), text="Reading."))) as server:
        status, counted = post_raw(server, f"{GEMINI}:countTokens", {"contents": []})
        assert (status, json.loads(counted)) == (200, {"totalTokens": 10})
        check = {"contents": [{"role": "user", "parts": [{"text": "who speaks next?"}]}],
                 "generationConfig": {"responseMimeType": "application/json", "responseJsonSchema": {}}}
        status, side = post_raw(server, f"{GEMINI}:generateContent", check)
        assert status == 200 and json.loads(side)["candidates"][0]["content"]["parts"] == [{"text": "{}"}]
        status, whole = post_raw(server, f"{GEMINI}:generateContent",
                                 {"contents": [{"role": "user", "parts": [{"text": "read it"}]}], "tools": GEMINI_TOOLS})
        reply = json.loads(whole)
    assert status == 200
    assert reply["candidates"][0]["content"]["parts"] == [
        {"text": "Reading."}, {"functionCall": {"id": server.requests[-1].sent[0].id, "name": "read_file",
                                                "args": {"file_path": "notes.txt"}}}]
    assert reply["modelVersion"] == "gemini-2.5-flash" and reply["usageMetadata"]["promptTokenCount"] == 100
    assert [(r.kind, r.turn) for r in server.requests] == [("other", None), ("json", None), ("turn", 0)]


def test_gemini_a_scripted_error_is_googles_error_body() -> None:
    with ModelServer(Script(http_error(429, "quota"))) as server:
        status, body = post_raw(server, f"{GEMINI}:streamGenerateContent?alt=sse",
                                {"contents": [], "tools": GEMINI_TOOLS})
    assert (status, json.loads(body)) == (429, {"error": {"code": 429, "message": "quota",
                                                          "status": "RESOURCE_EXHAUSTED"}})


def test_what_the_user_said_is_read_past_the_tags_a_cli_puts_before_it() -> None:
    with ModelServer(Script(shell("true"), shell("true"))) as server:
        copilot = {"messages": [{"role": "user", "content": "<current_datetime>2026-12-06T21:10:39Z</current_datetime>"
                                                            "\n\nmake the file"}],
                   "tools": [{"type": "function", "function": {"name": "bash"}}]}
        qwen = {"messages": [{"role": "user", "content": "make it"}],
                "tools": [{"type": "function", "function": {"name": "run_shell_command"}}]}
        post_raw(server, "/v1/chat/completions", copilot)
        post_raw(server, "/v1/chat/completions", qwen)
    first, second = server.requests
    assert first.said() == ["make the file"] and first.texts("user")[0].startswith("<current_datetime>")
    assert [u.name for u in first.sent] == ["bash"] and [u.name for u in second.sent] == ["run_shell_command"]


def test_gemini_cli_runs_the_call_reports_the_usage_and_waits_on_a_held_reply(
        gemini_sandbox: GeminiSandbox, model_server: ModelServer) -> None:
    hold = Hold()
    model_server.script.add(shell("echo hi > file", usage=Usage(1200, 30, cache_read=800)),
                            say("The file is written.", usage=Usage(300, 12, cache_read=2000), hold=hold))
    process = gemini_sandbox.start(*gemini_sandbox.headless("Write hi into a file named file"))
    try:
        hold.wait_reached()
        assert (gemini_sandbox.workdir / "file").read_text() == "hi\n"
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
    asked, answered = model_server.turn_requests()
    assert asked.sent[0].id in answered.results()
    [stats] = [json.loads(line)["stats"] for line in out.splitlines() if '"type":"result"' in line]
    assert (stats["input_tokens"], stats["output_tokens"], stats["cached"]) == (1200 + 800 + 300 + 2000, 42, 2800)
    assert "The file is written." in out
