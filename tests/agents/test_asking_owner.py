"""A waiting session's asking socket belongs to its run (issue 34, finding 3).

Finding (real Claude Code): the socket Claude Code asks a person through was reachable by any
other run (its path on a command line in ``/proc``): a connection to it put a forged
``Bash: git status`` into the victim's ``pending``; a person answering it ``--always`` made a
rule for the victim, and the answer went to the attacker. Now the socket is not in another
run's world, and a connection that does not present the run's key (which only the run's
bounds reach) is refused before a byte of it is read as MCP.
"""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import psutil
import pytest

from conftest import until
from procession import Workspace
from procession.engine import confinement
from support.agent_clis import AgentSandbox
from support.models import ModelServer
from support.runs import finished, reach_from_another_run

from test_permissions import ask_for_shell

pytestmark = pytest.mark.skipif(bool(confinement.namespaces()), reason="a run cannot have a world of its own here")

FORGED = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
          "params": {"name": "ask", "arguments": {"tool_name": "Bash", "input": {"command": "git status"}}}}


def knock(path: str, key: bytes) -> bytes:
    """Connect to ``path``, present ``key``, forge a permission request; what came back."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(30)
        s.connect(path)
        s.sendall(key + json.dumps(FORGED).encode() + b"\n")
        got = b""
        try:
            while b"\n" not in got and (chunk := s.recv(65536)):
                got += chunk
        except (ConnectionResetError, TimeoutError):
            pass
        return got


async def test_no_other_run_and_no_keyless_connection_can_ask_as_a_waiting_claude_session(
        claude_sandbox: AgentSandbox, model_server: ModelServer, engine: Any, live: Workspace,
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    victim, asked = await ask_for_shell(live, claude_sandbox, model_server, monkeypatch, "echo hi > asked.txt")
    leader = psutil.Process((await live.info(victim)).pid)
    [path] = {arg for p in leader.children(recursive=True) for arg in p.cmdline() if arg.endswith("/ask.sock")}

    # Another session's run, confined as every run is: the socket and its key are not in its world.
    said = await reach_from_another_run(live, path, str(tmp_path))
    assert said == "key No such file or directory\nsocket No such file or directory"

    # A process with the machine's view (an unconfined run, say): refused without the key.
    assert await asyncio.to_thread(knock, path, b"f" * 32) == b""
    pending = await live.pending([victim])
    assert [(p.id, p.tool) for p in pending] == [(asked.id, asked.tool)]  # nothing forged joined it
    await live.deny(asked.id, why="no")
    await until(lambda: finished(live, victim))
