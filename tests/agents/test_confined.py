"""Each real agent CLI confined to its session's bounds: its own tool (Claude's Bash, Codex's
shell, opencode's bash), driven by the scripted model, does the session's work in its folder
and cannot leave it: write a key into its home's ``.ssh``, write ``/etc``, write a folder
beside its own, read a file it was not given. Nor does it see a variable the engine has and
the session was not given. The CLIs' own sandboxes still let them run their tools (Codex's
bubblewrap cannot start inside the kernel's confinement, so a confined Codex runs without
it: the kernel holds its tools instead). That a confined CLI still uses its own state and
resumes its session is test_runners' first test: every run there is confined by default.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import until
from procession import Workspace
from procession.engine import confinement
from procession.model import bounds
from support.agent_clis import AgentSandbox
from support.models import ModelServer, say, shell
from support.runs import finished

from test_runners import agent_session

pytestmark = pytest.mark.skipif(confinement.kernel() < 1, reason="this kernel has no Landlock")


async def test_an_agent_cli_works_in_its_folder_and_nowhere_else(
        agent_sandbox: AgentSandbox, model_server: ModelServer, engine: Any, live: Workspace,
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    agent = agent_sandbox
    (agent.home / ".ssh").mkdir()
    sibling, secret = tmp_path / "sibling", tmp_path / "secret.txt"
    sibling.mkdir()
    secret.write_text("TOP-SECRET")
    etc = Path(f"/etc/procession-escape-{agent.name}")
    monkeypatch.setenv("MY_SECRET_X", "engine-only-value")
    command = (f"echo ok > inside.txt; echo key > {agent.home}/.ssh/x; echo x > {etc}; echo x > {sibling}/x;"
               f" cat {secret}; echo \"secret=[$MY_SECRET_X]\"; true")
    model_server.script.add(shell(command), say("Tried."))
    sid = await agent_session(live, agent, monkeypatch)
    try:
        await live.send(sid, "try everything")
        await live.activate(sid)
        run = await until(lambda: finished(live, sid))
        assert run.outcome == "ok", run.error
        [tool] = [c for c in (await live.show(sid)).context if c.role == "tool"]
        output = tool.meta["tool"]["output"]  # type: ignore[index]
        assert (agent.workdir / "inside.txt").read_text() == "ok\n"
        assert not (agent.home / ".ssh" / "x").exists() and not etc.exists() and not (sibling / "x").exists()
        refused = output.count("Permission denied") + output.count("No such file or directory")  # or not in its world
        assert refused >= 4 and "TOP-SECRET" not in output
        assert "secret=[]" in output  # the engine's variable never reached the tool
        assert "its bounds denied:" in (run.error or "")
        assert (await live.info(sid)).confinement == confinement.said_here(bounds.ANY)
    finally:
        etc.unlink(missing_ok=True)


async def test_claude_codes_own_sandbox_turned_on_still_runs_its_tools_confined(
        claude_sandbox: AgentSandbox, model_server: ModelServer, engine: Any, live: Workspace,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With its sandbox on in the user's settings (and bubblewrap and socat there, as CI
    installs them), Claude Code would run its Bash tool under bubblewrap, which cannot mount
    inside the kernel's confinement ('Failed to make / slave'): a confined run turns it off,
    and the tool works within the session's bounds."""
    import shutil

    if not (shutil.which("bwrap") and shutil.which("socat")):
        pytest.skip("Claude Code's sandbox needs bubblewrap and socat (apt install bubblewrap socat)")
    settings = claude_sandbox.home / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps({"sandbox": {"enabled": True, "autoAllowBashIfSandboxed": True}}))
    model_server.script.add(shell("echo sandboxed-or-not > made.txt && cat made.txt"), say("Done."))
    sid = await agent_session(live, claude_sandbox, monkeypatch)
    await live.send(sid, "make it")
    await live.activate(sid)
    run = await until(lambda: finished(live, sid))
    assert run.outcome == "ok", run.error
    [tool] = [c for c in (await live.show(sid)).context if c.role == "tool"]
    assert tool.meta["tool"]["is_error"] is False, tool.meta  # type: ignore[index]
    assert (claude_sandbox.workdir / "made.txt").read_text() == "sandboxed-or-not\n"
