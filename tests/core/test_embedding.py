"""Procession embedded in a program, as its README shows it: the worked example runs as a
program of its own; a program that raises (or just ends) with a workspace open exits, and
loses nothing it was told was done; a call given the wrong type says so in one line."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from procession import IllegalTransition, InvalidArgument, State, Workspace

EMBED = Path(__file__).resolve().parents[2] / "examples" / "embed.py"


async def test_the_embedding_example_runs_a_session_to_its_end(tmp_path: Path) -> None:
    db = tmp_path / "ws.db"
    proc = subprocess.run([sys.executable, str(EMBED), str(db)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=90)
    assert proc.returncode == 0, proc.stderr
    said = dict(line.split(": ", 1) for line in proc.stdout.splitlines() if not line.startswith("refused: "))
    assert json.loads(said["spawned"]) == {"sid": 1, "notes": [], "row": 1}
    assert json.loads(said["activated"])["state"] == "ready"
    waited = json.loads(said["waited"])
    assert (waited["woke"], waited["state"], waited["run"]["outcome"]) == ("run", "sleeping", "ok")
    assert [m["content"] for m in waited["messages"]] == ["hello from an embedding program"]
    assert [line for line in proc.stdout.splitlines() if line.startswith("refused: ")] == [
        "refused: activate: sid must be a session id (int), not Spawned (an outcome record: pass its .sid)",
        "refused: cannot resume session 1: it is sleeping, not suspended"]
    async with await Workspace.open(db, create=False) as ws:  # the store says what the program printed
        assert [(e.actor, e.call) for e in await ws.journal(1)] == [
            ("embed", "spawn"), ("embed", "send"), ("embed", "activate"), ("engine", "start"), ("engine", "launch"),
            ("engine", "finish")]
        assert (await ws.info(1)).state is State.SLEEPING


UNCLOSED = """
ws = await Workspace.open(sys.argv[1])
await ws.spawn("kept", "test")
"""
IN_ASYNC_WITH = """
async with await Workspace.open(sys.argv[1]) as ws:
    await ws.spawn("kept", "test")
"""
RAISE = "raise RuntimeError('boom')"


@pytest.mark.parametrize("body, status", [(UNCLOSED + RAISE, 1), (IN_ASYNC_WITH + "    " + RAISE, 1), (UNCLOSED, 0)],
                         ids=["raises-unclosed", "raises-in-async-with", "ends-unclosed"])
async def test_a_program_exits_with_its_workspace_open_and_keeps_what_it_did(
        tmp_path: Path, body: str, status: int) -> None:
    """aiosqlite's connection thread kept such a program alive for ever (not one in ``async with``)."""
    db = tmp_path / "ws.db"
    script = tmp_path / "program.py"
    script.write_text("import asyncio, sys\nfrom procession import Workspace\n\nasync def main() -> None:\n"
                      f"{textwrap.indent(body, '    ')}\n\nasyncio.run(main())\n")
    began = time.monotonic()
    proc = subprocess.run([sys.executable, str(script), str(db)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=30)
    took = time.monotonic() - began
    assert proc.returncode == status, proc.stderr
    assert took < 15, f"it took {took:.1f} s to exit"
    if status:
        assert proc.stderr.rstrip().endswith("RuntimeError: boom"), proc.stderr
    async with await Workspace.open(db, create=False) as ws:  # what a call was told it did is there
        assert [s.name for s in await ws.ps(all=True)] == ["kept"]


async def test_a_call_given_the_wrong_type_says_so_in_one_line(ws: Workspace) -> None:
    spawned = await ws.spawn("s", "a", runner="builtin:echo")
    before = await ws.journal(limit=100)
    refusals = {
        "activate: sid must be a session id (int), not Spawned (an outcome record: pass its .sid)":
            ws.activate(spawned),  # type: ignore[arg-type]
        "activate: sid must be a session id (int), not bool": ws.activate(True),
        "activate: sid must be a session id (int), not NoneType": ws.activate(None),  # type: ignore[arg-type]
        "send: sender must be a session id (int), not str": ws.send(spawned.sid, "hi", sender="1"),  # type: ignore[arg-type]
        "nice: priority must be an int, not str": ws.nice(spawned.sid, "3"),  # type: ignore[arg-type]
    }
    for message, call in refusals.items():
        with pytest.raises(InvalidArgument) as refused:
            await call
        assert str(refused.value) == message
    # a read, or what a call reads before its transaction (a merge's plan): the store says it
    for read in ws.show(spawned), ws.merge(spawned, spawned.sid):  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match=r"^a Spawned cannot be stored or looked up .*\(an outcome"
                                                  r" record's \.sid\)$"):
            await read
    assert await ws.journal(limit=100) == before  # refused before anything was done
    await ws.send(spawned.sid, "hi", sender=None)  # an optional one may be None
    with pytest.raises(IllegalTransition):
        await ws.resume(spawned.sid)
