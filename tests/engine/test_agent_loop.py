"""The ``openai:`` runner's agent loop: the session's bindings as tools, against the scripted
model server (Chat Completions), with a real engine."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest

from conftest import until
from procession import State
from procession.model.errors import InvalidArgument
from support.models import Hold, ModelServer, Script, calls, Call, say, tool_call

CALC = Path(__file__).resolve().parent.parent / "support" / "mcp_calc.py"


@pytest.fixture
def model():
    with ModelServer(Script()) as server:
        yield server


async def ended(ws, sid, n=1):
    runs = [r for r in await ws.runs(sid) if r.ended]
    return runs if len(runs) >= n else None


async def run_once(live, model, sid, *turns):
    model.script.add(*turns)
    await live.send(sid, "go")
    await live.activate(sid)
    run = (await until(lambda: ended(live, sid)))[0]
    return run, [m for m in await live.history(sid) if m.role == "tool"]


async def session(live, model, tmp_path, **env):
    return (await live.spawn("loop", "a", runner=f"openai:m@{model.url_v1}", cwd=str(tmp_path),
                             env={k: str(v) for k, v in env.items()})).sid


async def test_folder_tools_read_search_write_edit_and_store_structured_calls(live, engine, model, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "rates.csv").write_text("grade,rate\nA,0.20\nB,0.25\nC,0.30\n")
    sid = await session(live, model, tmp_path)
    await live.bind(sid, "folder", str(data), mode="rw")
    run, tools = await run_once(
        live, model, sid,
        tool_call("data_list", {}),
        tool_call("data_read", {"path": "rates.csv", "start": 2, "end": 3}),
        calls(Call.tool("data_search", {"pattern": r"0\.3"}), Call.tool("data_write", {"path": "out.txt", "content": "x"})),
        tool_call("data_edit", {"path": "rates.csv", "old": "C,0.30", "new": "C,0.35"}),
        say("Done: grade C is now 0.35."))
    assert run.outcome == "ok" and (run.tokens_in, run.tokens_out) == (500, 50)
    outputs = [t.meta["tool"]["output"] for t in tools]
    assert "rates.csv" in outputs[0] and outputs[1] == "A,0.20\nB,0.25"
    assert outputs[2] == "rates.csv:4: C,0.30" and (data / "out.txt").read_text() == "x"
    assert "C,0.35" in (data / "rates.csv").read_text()
    first = tools[1].meta["tool"]
    assert first["name"] == "data_read" and first["input"] == {"path": "rates.csv", "start": 2, "end": 3}
    assert first["is_error"] is False and first["output_size"] == len("A,0.20\nB,0.25") and tools[1].meta["run"] == run.id
    assert (await live.history(sid))[-1].content == "Done: grade C is now 0.35."
    offered = {t["function"]["name"] for t in model.turn_requests()[0].body["tools"]}
    assert offered == {"data_list", "data_read", "data_search", "data_write", "data_edit"}
    second = model.turn_requests()[2]
    assert second.results()[model.turn_requests()[1].sent[0].id] == "A,0.20\nB,0.25"


async def test_refusals_are_answers_not_failures(live, engine, model, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("a")
    (tmp_path / "secret.txt").write_text("TOP-SECRET")
    (data / "out").symlink_to(tmp_path)
    db = tmp_path / "pay.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE pay (name TEXT, amount INT)")
        conn.execute("INSERT INTO pay VALUES ('ann', 100)")
    sid = await session(live, model, tmp_path)
    await live.bind(sid, "folder", str(data), mode="ro")
    await live.bind(sid, "db", str(db), mode="ro")
    run, tools = await run_once(
        live, model, sid,
        tool_call("data_read", {"path": "../secret.txt"}),
        tool_call("data_read", {"path": "out/secret.txt"}),
        tool_call("data_write", {"path": "a.txt", "content": "b"}),
        tool_call("pay_db_query", {"sql": "DELETE FROM pay"}),
        tool_call("pay_db_query", {"sql": "SELECT name, amount FROM pay"}),
        say("ok"))
    assert run.outcome == "ok"
    got = [(t.meta["tool"]["is_error"], t.meta["tool"]["output"]) for t in tools]
    assert got[0][0] and "outside the bound folder" in got[0][1]
    assert got[1][0] and "symbolic link leads out" in got[1][1]
    assert got[2][0] and "no tool named 'data_write'" in got[2][1] and (data / "a.txt").read_text() == "a"
    assert got[3][0] and "read-only" in got[3][1]
    assert got[4] == (False, "name\tamount\nann\t100")
    assert all("TOP-SECRET" not in out for _, out in got)
    assert tools[0].content.startswith("data_read: ../secret.txt\nerror: ")


async def test_file_db_command_and_mcp_tools(live, engine, model, tmp_path):
    rates = tmp_path / "rates.csv"
    rates.write_text("A,0.2\n")
    db = tmp_path / "ledger.db"
    sid = await session(live, model, tmp_path)
    await live.bind(sid, "file", str(rates), mode="rw")
    await live.bind(sid, "sqlite", str(db), mode="rw")
    await live.bind(sid, "tool", f"upper={sys.executable} -c \"import sys; print(sys.stdin.read().upper(), *sys.argv[1:])\"")
    await live.bind(sid, "mcp", f"stdio:{sys.executable} {CALC}")
    run, tools = await run_once(
        live, model, sid,
        tool_call("rates_csv_read", {}),
        tool_call("rates_csv_write", {"content": "A,0.3\n"}),
        tool_call("ledger_db_query", {"sql": "CREATE TABLE t (x INT)"}),
        tool_call("ledger_db_query", {"sql": "INSERT INTO t VALUES (?)", "params": [7]}),
        tool_call("ledger_db_schema", {}),
        tool_call("upper", {"args": ["now"], "stdin": "hello"}),
        tool_call("mcp_calc_add", {"a": 2, "b": 40}),
        say("ok"))
    assert run.outcome == "ok", run.error
    outputs = [t.meta["tool"]["output"] for t in tools]
    assert outputs[0] == "A,0.2\n" and rates.read_text() == "A,0.3\n"
    assert outputs[3] == "ok, 1 rows changed" and outputs[4] == "CREATE TABLE t (x INT);"
    assert outputs[5] == "HELLO now\n"
    assert outputs[6] == "42" and not any(t.meta["tool"]["is_error"] for t in tools)


async def test_turn_limit_and_sampling_settings(live, engine, model, tmp_path):
    (tmp_path / "f.txt").write_text("f")
    sid = await session(live, model, tmp_path)
    await live.bind(sid, "file", str(tmp_path / "f.txt"), mode="ro")
    await live.sampling(sid, max_turns=2, temperature=0.2, max_tokens=50, fields={"top_p": 0.9, "seed": 7})
    await live.sampling(sid, fields={"seed": None})
    assert (await live.show(sid)).env == {"PROCESSION_MAX_TURNS": "2",
                                          "PROCESSION_SAMPLING": '{"max_tokens": 50, "temperature": 0.2, "top_p": 0.9}'}
    run, tools = await run_once(live, model, sid, *[tool_call("f_txt_read", {})] * 3)
    assert run.outcome == "ok" and len(model.turn_requests()) == 2 and len(tools) == 2
    assert "turn limit (2 model requests" in run.error
    body = model.turn_requests()[0].body
    assert (body["temperature"], body["max_tokens"], body["top_p"], body["stream"]) == (0.2, 50, 0.9, True)
    with pytest.raises(InvalidArgument, match="sets model itself"):
        await live.sampling(sid, fields={"model": "other"})


async def test_a_bad_setting_fails_the_run_before_any_request(live, engine, model, tmp_path):
    sid = await session(live, model, tmp_path, PROCESSION_SAMPLING="[1]")
    await live.activate(sid)
    run = (await until(lambda: ended(live, sid)))[0]
    assert run.outcome == "failed" and "PROCESSION_SAMPLING must be a JSON object" in run.error
    assert not model.requests


def test_set_takes_the_runners_settings(cli):
    cli("spawn", "s", "--agent", "a", "--runner", "openai:m@http://127.0.0.1:9/v1")
    cli("set", "1", "--max-turns", "3", "--temperature", "0.1", "--request", "seed=7", "--name", "t")
    shown = cli.json("show", "1")
    assert shown["name"] == "t" and shown["env"] == {"PROCESSION_MAX_TURNS": "3",
                                                     "PROCESSION_SAMPLING": '{"seed": 7, "temperature": 0.1}'}
    assert cli("set", "1", "--max-turns", "0", check=False).returncode == 1


async def test_suspend_holds_between_turns_and_resume_finishes(live, engine, model, tmp_path):
    (tmp_path / "f.txt").write_text("f")
    hold = Hold()
    sid = await session(live, model, tmp_path)
    await live.bind(sid, "file", str(tmp_path / "f.txt"), mode="ro")
    model.script.add(tool_call("f_txt_read", {}, hold=hold), say("the end"))
    await live.send(sid, "go")
    await live.activate(sid)
    await until(lambda: hold.reached)
    await live.suspend(sid)
    await until(lambda: engine.live[sid].step.frozen)  # the engine has seen it
    hold.release()
    run = await until(lambda: _counted(live, sid))  # the request under way finished, its usage committed
    assert run.ended is None and (await live.info(sid)).state is State.SUSPENDED
    assert len(model.turn_requests()) == 1 and [m.role for m in await live.history(sid)] == ["user"]
    await live.resume(sid)
    run = (await until(lambda: ended(live, sid)))[0]
    assert run.outcome == "ok" and len(model.turn_requests()) == 2 and run.tokens_in == 200
    assert [m.role for m in await live.history(sid)] == ["user", "tool", "assistant"]


async def test_interrupt_cancels_the_request_and_keeps_the_turns_done(live, engine, model, tmp_path):
    (tmp_path / "f.txt").write_text("f")
    hold = Hold()
    sid = await session(live, model, tmp_path)
    await live.bind(sid, "file", str(tmp_path / "f.txt"), mode="ro")
    model.script.add(tool_call("f_txt_read", {}), say("never whole", hold=hold))
    await live.send(sid, "go")
    await live.activate(sid)
    await until(lambda: hold.reached)
    await live.interrupt(sid)
    run = (await until(lambda: ended(live, sid)))[0]
    hold.release()
    assert run.outcome == "interrupted"
    history = await live.history(sid)
    assert [m.role for m in history] == ["user", "tool"] and history[1].meta["tool"]["output"] == "f"


def test_a_reply_being_streamed_is_the_runs_status_while_it_streams():
    """A long answer without tool calls showed no activity until it ended: its last words are
    the run's status while it is written (a status event, as any step may print), at most every
    ``STATUS_EVERY_S`` of the step's clock. The stream's own lines, fed as the server sends them."""
    from procession.engine.runners import http
    from procession.model.runner_spec import parse

    step = http.HttpStep(parse("openai:m@http://127.0.0.1:9/v1"))
    printed: list[tuple[str, bytes]] = []
    step.sink = lambda stream, data: printed.append((stream, data))
    now = [100.0]
    step.clock = lambda: now[0]

    def chunk(text: str) -> None:
        step._line("data: " + json.dumps({"choices": [{"delta": {"content": text}}]}))
        now[0] += 0.2

    chunk("")  # the role's chunk: nothing said yet, nothing told
    for word in ["The payroll ", "is computed ", "for everyone ", "on the first ", "of the month."]:
        chunk(word)
    told = [json.loads(data)["text"] for stream, data in printed if stream == "out"]
    assert told == ["writing: The payroll", "writing: The payroll is computed for everyone on the first"]
    assert b"".join(data for stream, data in printed if stream == "reply").decode().startswith("The payroll is")


async def test_history_tool_calls_go_back_to_the_model_as_calls(live, engine, model, tmp_path):
    (tmp_path / "f.txt").write_text("f")
    sid = await session(live, model, tmp_path)
    await live.bind(sid, "file", str(tmp_path / "f.txt"), mode="ro")
    await run_once(live, model, sid, tool_call("f_txt_read", {}), say("one"))
    await live.send(sid, "again")
    model.script.add(say("two"))
    await live.activate(sid)
    await until(lambda: ended(live, sid, 2))
    messages = model.turn_requests()[2].body["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant", "user"]
    call = messages[2]["tool_calls"][0]
    assert call["function"] == {"name": "f_txt_read", "arguments": "{}"} and messages[3]["tool_call_id"] == call["id"]


async def _counted(live, sid):
    run = (await live.runs(sid))[0]
    return run if run.tokens_in else None


def test_tool_event_of_a_command_step_is_stored_structured():
    from procession.engine.runners import protocol

    reader = protocol.Reader()
    reader.feed(json.dumps({"type": "tool", "id": "c1", "name": "grep", "input": {"pattern": "x"},
                            "output": "hit", "is_error": False}).encode() + b"\n")
    role, content, meta = reader.close().messages[0]
    assert role == "tool" and content == "grep: x\nhit" and meta["tool"]["output_size"] == 3


async def test_procession_own_mcp_server_as_tools(live, engine, model, tmp_path):
    sid = await session(live, model, tmp_path)
    await live.bind(sid, "mcp", "procession")
    run, tools = await run_once(live, model, sid, tool_call("procession_memory_set", {"sid": sid, "key": "seen", "value": 1}),
                                say("ok"))
    assert run.outcome == "ok", run.error
    assert not tools[0].meta["tool"]["is_error"], tools[0].content
    assert (await live.show(sid)).memory == {"seen": 1}
    offered = {t["function"]["name"] for t in model.turn_requests()[0].body["tools"]}
    assert {"procession_ps", "procession_send", "procession_fork"} <= offered


async def test_an_mcp_server_over_http_and_one_that_does_not_start(live, engine, model, tmp_path):
    import asyncio
    import contextlib
    import socket

    sid = await session(live, model, tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "procession", "mcp", "--db", str(live.path),
                                                "--session", str(sid), "--http", f"127.0.0.1:{port}")
    def accepting() -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
        return False

    try:
        await until(lambda: accepting() or proc.returncode is not None)  # up (or gone: the run then says why)
        await live.bind(sid, "mcp", f"http://127.0.0.1:{port}/mcp")
        run, tools = await run_once(live, model, sid, tool_call("127_0_0_1_ps", {}), say("ok"))
    finally:
        proc.terminate()
        await proc.wait()
    assert run.outcome == "ok", run.error
    assert sid in [s["sid"] for s in json.loads(tools[0].meta["tool"]["output"])]
    await live.unbind(sid, f"http://127.0.0.1:{port}/mcp")
    await live.bind(sid, "mcp", "stdio:/nonexistent/server")
    await live.activate(sid)
    run = (await until(lambda: ended(live, sid, 2)))[1]
    assert run.outcome == "failed" and "the MCP server stdio:/nonexistent/server could not be started" in run.error
    assert len(model.turn_requests()) == 2


async def test_the_demo_session_reads_its_tables_and_answers_with_no_key(tmp_path):
    import asyncio

    from procession import Workspace
    from procession.cli import demo
    from procession.cli.demo_model import DemoModel
    from procession.engine import Engine

    made = await demo.build(tmp_path / "demo.db")
    with DemoModel() as served:
        sid = await demo.with_model(made.db, served.url)
        assert await demo.with_model(made.db, served.url) == sid  # made once
        engine = Engine(made.db, slots=1, grace=0.3, triggers=False)
        await engine.start()
        stop = asyncio.Event()
        task = asyncio.ensure_future(engine.serve(stop))
        try:
            async with await Workspace.open(made.db) as ws:
                await ws.activate(sid)
                request = (await until(lambda: ws.pending([sid])))[0]  # it reads unasked, then asks to write
                assert request.tool == "answer_md_write"
                await ws.allow(request.id)
                run = (await until(lambda: ended(ws, sid)))[0]
                history = await ws.history(sid)
        finally:
            stop.set()
            await task
    said = "Grade A has the highest hourly rate, 42.00 EUR: Aiko Tanaka (160 hours this month)."
    assert run.outcome == "ok" and [m.role for m in history] == [
        "user", "assistant", "tool", "tool", "tool", "assistant", "tool", "assistant"]
    assert [m.meta["tool"]["name"] for m in history[2:5]] == ["rates_csv_read", "employees_csv_read", "answer_md_read"]
    assert history[-1].content == said and (made.folder / "payroll" / "answer.md").read_text() == said + "\n"


async def test_interrupt_in_a_tool_call_kills_it_and_stores_the_call_without_result(live, engine, model, tmp_path):
    sid = await session(live, model, tmp_path)
    await live.bind(sid, "tool", f"slow={sys.executable} -c \"import time; print('started', flush=True); time.sleep(60)\"")
    model.script.add(tool_call("slow", {}))
    await live.send(sid, "go")
    await live.activate(sid)
    await until(lambda: _status(live, sid, "slow:"))
    await live.interrupt(sid)
    run = (await until(lambda: ended(live, sid)))[0]
    assert run.outcome == "interrupted" and run.ended - run.started < 10
    call = [m for m in await live.history(sid) if m.role == "tool"][0]
    assert call.meta["tool"]["output"] is None and "(no result: the run stopped first)" in call.content


async def _status(live, sid, prefix):
    runs = await live.runs(sid)
    return bool(runs) and (runs[0].status or "").startswith(prefix)
