"""The ``openai:`` loop's own tools, attacked by a hostile model (the scripted server on
127.0.0.1 plays it): every call is answered, none reaches outside its binding, none goes
unrecorded, and none stalls the engine."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import until
from procession import Workspace
from support.models import ModelServer, Script, say, tool_call
from support.runs import finished


@pytest.fixture
def model() -> Any:
    with ModelServer(Script()) as server:
        yield server


async def loop_session(live: Workspace, model: ModelServer, folder: Path) -> int:
    return (await live.spawn("loop", "a", runner=f"openai:m@{model.url_v1}", cwd=str(folder))).sid


async def run_once(live: Workspace, model: ModelServer, sid: int, *turns: Any, runs: int = 1) -> tuple[Any, list[Any]]:
    model.script.add(*turns)
    await live.send(sid, "go")
    await live.activate(sid)
    run = await until(lambda: finished(live, sid, runs))
    return run, [m.meta["tool"] for m in await live.history(sid) if m.role == "tool"]


async def test_a_link_to_a_path_that_does_not_exist_yet_is_not_written_through(
        live: Workspace, engine: object, model: ModelServer, tmp_path: Path) -> None:
    folder, outside = tmp_path / "data", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    (folder / "dangling").symlink_to(outside / "planted.txt")
    (folder / "up").symlink_to("..")
    sid = await loop_session(live, model, tmp_path)
    await live.bind(sid, "folder", str(folder), mode="rw")
    run, tools = await run_once(live, model, sid,
                                tool_call("data_write", {"path": "dangling", "content": "gotcha"}),
                                tool_call("data_write", {"path": "up/outside/planted2.txt", "content": "gotcha"}),
                                tool_call("data_edit", {"path": "dangling", "old": "a", "new": "b"}),
                                tool_call("data_write", {"path": "fine.txt", "content": "mine"}), say("ok"))
    assert run.outcome == "ok"
    assert [t["is_error"] for t in tools] == [True, True, True, False]
    assert "a symbolic link leads out of the bound folder" in tools[0]["output"]
    assert list(outside.iterdir()) == [] and (folder / "fine.txt").read_text() == "mine"


async def test_a_fifo_or_a_device_is_refused_before_it_is_opened(
        live: Workspace, engine: object, model: ModelServer, tmp_path: Path) -> None:
    """A FIFO nobody writes would block a reader forever: it is refused at once, and the engine
    went on meanwhile (another session ran)."""
    folder = tmp_path / "data"
    folder.mkdir()
    os.mkfifo(folder / "pipe")
    (folder / "null").symlink_to("/dev/null")
    (folder / "file.txt").write_text("needle\n")
    sid = await loop_session(live, model, tmp_path)
    await live.bind(sid, "folder", str(folder), mode="rw")
    started = time.monotonic()
    run, tools = await run_once(live, model, sid, tool_call("data_read", {"path": "pipe"}),
                                tool_call("data_write", {"path": "pipe", "content": "x"}),
                                tool_call("data_search", {"pattern": "needle"}),
                                tool_call("data_read", {"path": "null"}), say("ok"))
    assert time.monotonic() - started < 20
    assert [t["is_error"] for t in tools] == [True, True, False, True]
    assert "a FIFO, not a regular file" in tools[0]["output"] and "a FIFO" in tools[1]["output"]
    assert tools[2]["output"] == "file.txt:1: needle"
    assert "a symbolic link leads out of the bound folder" in tools[3]["output"]


async def test_a_pattern_that_backtracks_forever_stalls_nothing(live: Workspace, model: ModelServer,
                                                                tmp_path: Path) -> None:
    """``(a|aa)+$`` on a long line of a's and a b takes exponential time in a backtracking
    engine: the search is answered at its time limit, and while it matched, the engine ran
    another session's step and obeyed a cancel (the verdict is the order of events, not how
    long anything took)."""
    from conftest import engine_on

    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "bomb.txt").write_text("a" * 80 + "b\n")
    sid = await loop_session(live, model, tmp_path)
    await live.bind(sid, "folder", str(folder), mode="ro")
    other = (await live.spawn("other", "a", runner="command:echo beside", cwd=str(tmp_path))).sid
    victim = (await live.spawn("victim", "a", runner="command:sleep 60", cwd=str(tmp_path))).sid
    model.script.add(tool_call("data_search", {"pattern": "(a|aa)+$"}), say("ok"))
    async with engine_on(live.path, slots=3):
        await live.send(sid, "go")
        await live.activate(sid)
        await until(lambda: _searching(live, sid))
        await live.activate(other)
        await live.activate(victim)
        await until(lambda: _running(live, victim))
        await live.cancel(victim)
        beside = await until(lambda: finished(live, other))
        cancelled = await until(lambda: finished(live, victim))
        run = await until(lambda: finished(live, sid))
    [tool] = [m for m in await live.history(sid) if m.role == "tool"]
    output = tool.meta["tool"]["output"]
    # answered at a limit: the search's own (a CPU budget), or, on a machine too busy to give it
    # that much CPU, the tool's whole deadline; never a search left to run
    assert run.outcome == "ok" and tool.meta["tool"]["is_error"]
    assert "the search took over" in output or "the tool did not finish within" in output, output
    assert beside.outcome == "ok" and cancelled.outcome == "cancelled"
    assert beside.ended < tool.created and cancelled.ended < tool.created  # both while the search matched


async def _searching(ws: Workspace, sid: int) -> bool:
    return (await ws.info(sid)).status == "data_search: {\"pattern\": \"(a|aa)+$\"}"


async def _running(ws: Workspace, sid: int) -> bool:
    return (await ws.info(sid)).state.value == "running"


async def test_arguments_too_deep_to_record_are_refused_and_nothing_runs(
        live: Workspace, engine: object, model: ModelServer, tmp_path: Path) -> None:
    """A call whose record could not hold its arguments used to run, then be dropped from the
    history ('ignored'): now it is refused before it runs, and the refusal is recorded."""
    marker = tmp_path / "ran"
    sid = await loop_session(live, model, tmp_path)
    await live.bind(sid, "tool", f"touch=touch {marker}")
    deep: Any = "x"
    for _ in range(200):
        deep = [deep]
    run, tools = await run_once(live, model, sid, tool_call("touch", {"args": deep}), say("ok"))
    assert run.outcome == "ok" and not marker.exists()
    assert len(tools) == 1 and tools[0]["is_error"] and "nested deeper" in tools[0]["output"]
    assert "refused (nothing ran)" in tools[0]["output"] and isinstance(tools[0]["input"], str)
    assert "ignored" not in (run.error or "")


async def test_sqlite_bindings_reach_no_other_file(live: Workspace, engine: object, model: ModelServer,
                                                   tmp_path: Path) -> None:
    """``VACUUM INTO`` and ``ATTACH`` make or open files anywhere, a read-only binding's too;
    ``load_extension`` loads code. All refused, whatever the mode; a read-only binding runs
    reading statements only."""
    db = tmp_path / "pay.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE pay (name TEXT, amount INT)")
        conn.execute("INSERT INTO pay VALUES ('ann', 100)")
    ro = tmp_path / "ro.db"
    ro.write_bytes(db.read_bytes())
    away = tmp_path / "away"
    away.mkdir()
    sid = await loop_session(live, model, tmp_path)
    await live.bind(sid, "sqlite", str(db), mode="rw")
    await live.bind(sid, "sqlite", str(ro), mode="ro")
    run, tools = await run_once(
        live, model, sid,
        tool_call("pay_db_query", {"sql": f"VACUUM INTO '{away / 'copy.db'}'"}),
        tool_call("pay_db_query", {"sql": f"ATTACH '{away / 'other.db'}' AS other"}),
        tool_call("pay_db_query", {"sql": "SELECT load_extension('/tmp/x')"}),
        tool_call("ro_db_query", {"sql": f"VACUUM INTO '{away / 'copy2.db'}'"}),
        tool_call("ro_db_query", {"sql": f"ATTACH '{away / 'other2.db'}' AS other"}),
        tool_call("ro_db_query", {"sql": "DELETE FROM pay"}),
        tool_call("ro_db_query", {"sql": "PRAGMA journal_mode = DELETE"}),
        tool_call("pay_db_query", {"sql": "UPDATE pay SET amount = 200"}),
        tool_call("pay_db_query", {"sql": "VACUUM"}),
        tool_call("ro_db_query", {"sql": "SELECT amount FROM pay"}), say("ok"))
    assert run.outcome == "ok"
    assert [t["is_error"] for t in tools] == [True] * 7 + [False, False, False]
    assert all(any(w in t["output"] for w in ("not authorized", "authorization denied", "too many attached"))
               for t in tools[:7])
    assert list(away.iterdir()) == [] and tools[-1]["output"] == "amount\n100"


async def test_a_database_swapped_for_a_link_is_not_followed(live: Workspace, engine: object, model: ModelServer,
                                                            tmp_path: Path) -> None:
    db = tmp_path / "work" / "ledger.db"
    db.parent.mkdir()
    sid = await loop_session(live, model, tmp_path)
    await live.bind(sid, "sqlite", str(db), mode="rw")
    target = tmp_path / "elsewhere.db"
    db.symlink_to(target)  # put in its place after binding, as a step could
    run, tools = await run_once(live, model, sid, tool_call("ledger_db_query", {"sql": "CREATE TABLE t (x)"}),
                                say("ok"))
    assert tools[0]["is_error"] and "no longer the regular file it was bound as" in tools[0]["output"]
    assert not target.exists()


async def test_a_bound_file_refuses_a_fifo_in_its_place(live: Workspace, engine: object, model: ModelServer,
                                                       tmp_path: Path) -> None:
    path = tmp_path / "rates.csv"
    os.mkfifo(path)
    sid = await loop_session(live, model, tmp_path)
    await live.bind(sid, "file", str(path), mode="rw")
    run, tools = await run_once(live, model, sid, tool_call("rates_csv_read", {}), say("ok"))
    assert run.outcome == "ok" and tools[0]["is_error"] and "a FIFO, not a regular file" in tools[0]["output"]


async def test_a_procession_server_bound_to_a_confined_step_acts_in_its_scope(
        live: Workspace, engine: object, tmp_path: Path) -> None:
    """``mcp procession`` reached from a confined ``command:`` step: through the relay, the
    server (outside the bounds: it writes the workspace) acts as the session, nothing more."""
    script = tmp_path / "step.py"
    script.write_text(
        "import asyncio, json, os\n"
        "from mcp import Client, StdioServerParameters\n"
        "from procession.model import mcp_binding\n"
        "async def main():\n"
        "    config = mcp_binding.client_config(os.environ['PROCESSION_DB'], int(os.environ['PROCESSION_SESSION']))\n"
        "    async with Client(StdioServerParameters(command=config['command'], args=config['args'])) as c:\n"
        "        await c.call_tool('memory_set', {'sid': int(os.environ['PROCESSION_SESSION']), 'key': 'k', 'value': 7})\n"
        "        other = await c.call_tool('show', {'sid': 1})\n"
        "        print(json.dumps({'other': other.is_error, 'cmd': config['command'], 'args': config['args']}))\n"
        "asyncio.run(main())\n")
    first = (await live.spawn("other agent", "b", cwd=str(tmp_path))).sid
    sid = (await live.spawn("step", "a", runner=f"command:{sys.executable} {script}", cwd=str(tmp_path))).sid
    await live.bind(sid, "mcp", "procession")
    await live.activate(sid)
    run = await until(lambda: finished(live, sid))
    assert run.outcome == "ok", run.error
    said = json.loads((await live.history(sid))[-1].content)
    assert said["other"] is True and first == 1  # out of its scope: refused
    assert said["args"][:2] == ["-I", "-S"] and said["args"][2].endswith("mcp_relay.py")
    assert (await live.show(sid)).memory == {"k": 7}
