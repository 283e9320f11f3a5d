"""The worked example of agents managing sessions (examples/team), end to end on a real engine:
a coordinator's step talks to its own Procession MCP server, spawns two narrow sessions of other
agents, hands each its part, waits for both, and merges their findings."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from procession import State, Workspace
from support.wait import HANG_S

TEAM = Path(__file__).resolve().parents[2] / "examples" / "team"


async def test_a_coordinator_splits_the_task_waits_and_merges(live: Workspace, engine: object, tmp_path: Path) -> None:
    folder = tmp_path / "team"
    shutil.copytree(TEAM, folder)
    task = (folder / "task.txt").read_text()
    lead = (await live.spawn("coordinator", "lead", runner=f"command:{sys.executable} team.py", cwd=str(folder))).sid
    await live.bind(lead, "mcp", "procession")
    await live.send(lead, task)
    await live.activate(lead)
    woke = await live.wait(lead, HANG_S)  # a hang guard: it wakes when the run ends
    assert woke.woke == "run" and woke.run is not None and woke.run.outcome == "ok", woke
    helpers = [s for s in await live.ps(all=True) if s.id != lead]
    assert [(s.agent, s.state, s.merged_into) for s in helpers] == [
        ("researcher", State.TERMINATED, lead), ("critic", State.TERMINATED, lead)]
    memory = (await live.show(lead)).memory
    assert memory["findings.researcher"][:2] == ["payroll", "month"]
    assert memory["findings.critic"] == [
        "Employees must be paid before the month ends, and the social insurance filing must never be late.",
        "the payroll must always use the rates in force on the pay day."]
    report = woke.messages[-1]
    assert report.role == "assistant" and "key terms: payroll, month" in report.content
    assert "hard constraints (2):" in report.content
    spawns = [e for e in await live.journal(limit=100) if e.call == "spawn" and e.actor == "mcp"]
    assert [(e.session, e.other) for e in spawns] == [(h.id, lead) for h in helpers]
