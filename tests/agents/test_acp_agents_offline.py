"""The ACP agents' sandboxes, proven offline against the scripted model server.

Gemini CLI, Qwen Code and Copilot CLI each run one headless turn in their own non-interactive
mode: the script makes the model call the CLI's shell tool, then answer; the file the command
makes and the answer show the sandbox points the CLI at the server and nowhere else. Every ACP
agent command (``gemini --acp``, ``qwen --acp``, ``copilot --acp``, ``opencode acp``, the
codex-acp native binary, claude-agent-acp) then answers the ACP ``initialize`` handshake on
stdio, and ends, with every process it started, when its tree is killed; and runs one prompt
turn of the same script, its permission requests allowed once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from support.acp import AgentPipe, agent_text, allow_once, end_tree, processes_with_home
from support.agent_clis import ACP_AGENTS, AgentSandbox, CliRun, sandbox
from support.models import ModelServer, say, shell

HEADLESS = ("gemini", "qwen", "copilot")
SHELL_TOOL = {"gemini": "run_shell_command", "qwen": "run_shell_command", "copilot": "bash"}


def answer(cli: str, run: CliRun) -> str:
    """The model's last text, as the CLI reports it in its own JSON lines."""
    if cli == "gemini":  # stream-json: assistant messages (deltas)
        return "".join(e["content"] for e in run.of("message") if e["role"] == "assistant")
    if cli == "qwen":  # stream-json in Claude Code's shape: the result event
        return str(run.of("result")[-1]["result"])
    return str(run.of("assistant.message")[-1]["data"]["content"])  # copilot --output-format json


@pytest.mark.parametrize("cli", HEADLESS)
def test_a_headless_turn_runs_the_scripted_shell_command_and_answers(cli: str, model_server: ModelServer,
                                                                      tmp_path: Path) -> None:
    agent = sandbox(cli, model_server, tmp_path)
    model_server.script.add(shell("echo hi > made.txt"), say("The file is made."))

    run = agent.prompt("Make the file")
    assert run.returncode == 0, run.stderr
    assert (agent.workdir / "made.txt").read_text() == "hi\n"
    assert answer(cli, run) == "The file is made."
    asked, told = model_server.turn_requests()
    [call] = asked.sent
    assert call.name == SHELL_TOOL[cli]
    assert call.id in told.results(), f"{cli} did not send the result of {call.name}"
    assert asked.said()[-1] == "Make the file"  # past Gemini's <session_context>, Copilot's <current_datetime>
    assert agent.session_id(run)


def handshake(agent: AgentSandbox) -> tuple[Any, list[int]]:
    """Start ``agent`` as an ACP agent, ``initialize`` it, then kill its process tree: the
    result, and the pids the tree had."""
    process = agent.start_acp()
    try:
        result = AgentPipe(process, agent.tmp / "acp-stderr").initialize()
    finally:
        tree = end_tree(process)
    return result, tree


@pytest.mark.parametrize("name", ACP_AGENTS)
def test_an_acp_agent_answers_initialize_and_its_whole_tree_ends(name: str, model_server: ModelServer,
                                                                 tmp_path: Path) -> None:
    agent = sandbox(name, model_server, tmp_path)
    result, tree = handshake(agent)
    assert result["protocolVersion"] == 1
    assert result["agentInfo"]["name"] and result["agentInfo"]["version"] == agent.cli.version
    assert tree and processes_with_home(agent.home) == [], "a process of the agent outlived its tree's kill"


@pytest.mark.parametrize("name", ["codex-acp", "claude-agent-acp"])  # the others: through Procession, test_acp.py
def test_an_acp_prompt_turn_runs_the_scripted_shell_command(name: str, model_server: ModelServer,
                                                            tmp_path: Path) -> None:
    agent = sandbox(name, model_server, tmp_path)
    model_server.script.add(shell("echo hi > made.txt"), say("The file is made."))
    process = agent.start_acp()
    pipe = AgentPipe(process, agent.tmp / "acp-stderr")
    try:
        pipe.initialize()
        session = pipe.call("session/new", {"cwd": str(agent.workdir), "mcpServers": []})["sessionId"]
        done = pipe.call("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "Make the file"}]},
                         allow_once)
    finally:
        end_tree(process)
    assert done["stopReason"] == "end_turn"
    assert (agent.workdir / "made.txt").read_text() == "hi\n"
    assert "The file is made." in agent_text(pipe.notifications, session)
    asked, told = model_server.turn_requests()
    assert asked.sent[0].id in told.results()
    assert processes_with_home(agent.home) == []
