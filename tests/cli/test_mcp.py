"""``procession mcp``, driven by the MCP SDK's own client over stdio (and once over HTTP): the
tools and their schemas against the CLI's declarations, every tool, every kind of refusal
(with the CLI's own line), the journal rows, and two clients at once."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from procession import Workspace
from procession.cli import main
from procession.cli.mcp.tools import TOOLS
from procession.cli.registry import COMMANDS
from procession.model import mcp_binding

READS = ["ps", "show", "history", "memory_get", "wait", "pending"]


@contextlib.asynccontextmanager
async def served(db: Path, *args: str) -> AsyncIterator[Client]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "procession", "mcp", "--db", str(db), *args])
    async with Client(params) as client:
        yield client


async def ok(client: Client, tool: str, **args: Any) -> Any:
    result = await client.call_tool(tool, args)
    assert not result.is_error, (tool, result.content)
    data = json.loads(result.content[0].text)
    assert result.structured_content == (data if isinstance(data, dict) else {"result": data})
    return data


async def refused(client: Client, tool: str, **args: Any) -> str:
    """A refusal: an error result with one line of text per refusal."""
    result = await client.call_tool(tool, args)
    assert result.is_error, (tool, result.content)
    text = result.content[0].text
    assert text and "Traceback" not in text
    return text


def cli_refusal(capsys: pytest.CaptureFixture[str], db: Path, *args: str) -> str:
    """The line the CLI prints for the same refusal, without its ``procession: error:``."""
    assert main(["--db", str(db), *args]) != 0
    err = capsys.readouterr().err.strip()
    assert err.startswith("procession: error: ") and "\n" not in err, err
    return err.removeprefix("procession: error: ")


async def setup(db: Path, tmp_path: Path) -> None:
    """Session 1 (agent lead) acts; session 2 is another agent's, out of its reach."""
    async with await Workspace.open(db) as ws:
        await ws.spawn("lead", "lead", runner="builtin:echo", cwd=str(tmp_path))
        await ws.spawn("stranger", "other", cwd=str(tmp_path))


async def test_tools_and_their_schemas_are_the_cli_s(db: Path, tmp_path: Path) -> None:
    await setup(db, tmp_path)
    async with served(db, "--session", "1") as client:
        listed = (await client.list_tools()).tools
        templates = (await client.list_resource_templates()).resource_templates
    assert [t.name for t in listed] == list(TOOLS) == [
        "ps", "show", "history", "spawn", "send", "fork", "merge", "memory_get", "memory_set", "memory_delete",
        "activate", "suspend", "resume", "interrupt", "cancel", "compress", "expand", "save", "trigger_add",
        "trigger_remove", "wait", "pending", "allow", "deny"]
    for t in listed:
        tool = TOOLS[t.name]
        assert t.input_schema == tool.input_schema()
        cmd = COMMANDS[tool.command]
        declared = {a.dest for a in [*cmd.args, *(cmd.ops[tool.op] if tool.op else [])]}
        assert set(t.input_schema["properties"]) == declared - set(tool.skip), t.name
        assert t.description.startswith(cmd.help)
        assert t.annotations.read_only_hint is (t.name in READS)
    spawn = next(t for t in listed if t.name == "spawn").input_schema
    assert spawn["required"] == ["name"]  # the agent defaults to the server's
    assert spawn["properties"]["window"] == {"type": "integer", "default": 128000, "description": "context window in tokens"}
    send = next(t for t in listed if t.name == "send").input_schema
    assert send["required"] == ["sid", "text"] and send["properties"]["text"]["description"] == "the message"
    assert send["properties"]["sid"]["minimum"] == 1 and send["additionalProperties"] is False
    activate = next(t for t in listed if t.name == "activate").input_schema
    assert activate["properties"]["sids"]["type"] == "array" and "now" not in activate["properties"]
    assert {t.uri_template for t in templates} == {"procession://session/{sid}/context",
                                                  "procession://session/{sid}/memory"}


async def test_every_tool_as_a_session_each_call_journaled(db: Path, tmp_path: Path) -> None:
    await setup(db, tmp_path)
    async with served(db, "--session", "1") as c:
        assert [s["sid"] for s in await ok(c, "ps")] == [1]  # session 2 is another agent's
        helper = (await ok(c, "spawn", name="helper", agent="research"))["sid"]
        assert helper == 3
        for n in range(12):
            await ok(c, "send", sid=helper, text=f"message {n}")
        assert [s["sid"] for s in await ok(c, "ps")] == [1, 3]
        shown = await ok(c, "show", sid=helper, last=2)
        assert [m["content"] for m in shown["context"]] == ["message 10", "message 11"]
        assert shown["agent"] == "research" and shown["cwd"] == str(tmp_path)
        page = await ok(c, "history", sid=helper, after=4, limit=3)
        assert [m["seq"] for m in page] == [5, 6, 7] and page[0]["author"] == "session:1"
        await ok(c, "memory_set", sid=helper, key="topic", value={"a": 1})
        assert await ok(c, "memory_get", sid=helper, key="topic") == {"a": 1}
        await ok(c, "memory_set", sid=helper, key="said", value='{"a": 1}')  # a string, as given
        assert await ok(c, "memory_get", sid=helper, key="said") == '{"a": 1}'
        await ok(c, "memory_delete", sid=helper, key="said")
        fork = (await ok(c, "fork", sid=helper, name="side quest"))["sid"]
        await ok(c, "memory_set", sid=fork, key="found", value=42)
        await ok(c, "memory_delete", sid=helper, key="topic")
        trig = (await ok(c, "trigger_add", sid=helper, kind="inbox"))["trigger"]["id"]
        await ok(c, "trigger_remove", sid=helper, tid=trig)
        assert (await ok(c, "save", sid=helper, name="before"))["checkpoint"]["name"] == "before"
        assert (await ok(c, "compress", sid=helper, keep_last=4))["sid"] == helper
        assert (await ok(c, "expand", sid=helper))["sid"] == helper
        assert [o["state"] for o in await ok(c, "activate", sids=[helper])] == ["ready"]
        assert [o["state"] for o in await ok(c, "suspend", sids=[helper])] == ["suspended"]
        assert [o["state"] for o in await ok(c, "resume", sids=[helper])] == ["ready"]
        assert [o["state"] for o in await ok(c, "interrupt", sids=[helper])] == ["sleeping"]
        merged = await ok(c, "merge", source=fork, target=helper)
        assert merged["memory_changed"] == ["found"] and merged["base"] == helper
        assert (await ok(c, "wait", sid=helper, timeout=0.1))["woke"] == "timeout"
        waiting = asyncio.ensure_future(ok(c, "wait", sid=helper, timeout=30))
        await asyncio.sleep(0.2)
        await ok(c, "send", sid=helper, text="while you wait")
        woke = await waiting
        assert woke["woke"] == "message" and woke["messages"][-1]["content"] == "while you wait"
        assert [o["state"] for o in await ok(c, "cancel", sids=[helper])] == ["terminated"]
        memory = json.loads((await c.read_resource(f"procession://session/{helper}/memory")).contents[0].text)
        assert memory == {"found": 42}
        context = json.loads((await c.read_resource(f"procession://session/{helper}/context")).contents[0].text)
        assert context[-1]["content"] == "while you wait"
        listed = {r.uri for r in (await c.list_resources()).resources}
        assert "procession://session/1/memory" in listed and "procession://session/2/memory" not in listed
    async with await Workspace.open(db) as ws:
        rows = [e for e in await ws.journal(limit=200) if e.actor == "mcp"]
    assert {e.call for e in rows} == {"spawn", "send", "memory", "fork", "trigger", "save", "compress", "expand",
                                      "activate", "suspend", "resume", "interrupt", "merge", "cancel"}
    for e in rows:  # the session it acts as, where the call has no second session of its own
        expected = {"fork": e.outcome.get("sid") if isinstance(e.outcome, dict) else None, "merge": fork}
        assert e.other == expected.get(e.call, 1), e
    assert next(e for e in rows if e.call == "spawn").session == helper


def test_refusals_say_what_the_cli_says(db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async def prepare() -> None:
        await setup(db, tmp_path)
        async with await Workspace.open(db) as ws:
            child = (await ws.fork(1, "child")).sid
            await ws.memory_set(1, "k", "ours")
            await ws.memory_set(child, "k", "theirs")

    asyncio.run(prepare())
    lines = {
        "unknown": cli_refusal(capsys, db, "show", "99"),
        "illegal": cli_refusal(capsys, db, "resume", "1"),
        "fork": cli_refusal(capsys, db, "fork", "99"),
    }
    assert main(["--db", str(db), "merge", "3", "1", "--json"]) == 3
    conflict = json.loads(capsys.readouterr().out)

    async def check() -> None:
        async with served(db, "--session", "1") as c:
            assert await refused(c, "show", sid=99) == lines["unknown"] == "no session 99"
            assert await refused(c, "resume", sids=[1]) == lines["illegal"]
            assert await refused(c, "fork", sid=99) == lines["fork"]
            both = await c.call_tool("suspend", {"sids": [1, 2]})
            assert both.is_error and both.content[0].text.startswith("session 2 is out of reach: session 1 (agent lead)")
            assert both.structured_content["refused"] == both.content[0].text.splitlines()[:1]  # 1 not suspended either
            assert (await ok(c, "show", sid=1))["state"] != "suspended"
            for tool, args in [("show", {"sid": 2}), ("history", {"sid": 2}), ("fork", {"sid": 2}),
                               ("memory_get", {"sid": 2, "key": "k"}), ("wait", {"sid": 2, "timeout": 0}),
                               ("merge", {"source": 2, "target": 1}), ("cancel", {"sids": [2]}),
                               ("trigger_add", {"sid": 1, "kind": "after", "args": ["2"]})]:
                assert (await refused(c, tool, **args)).startswith("session 2 is out of reach"), tool
            assert (await ok(c, "send", sid=2, text="hello, other agent"))["sid"] == 2  # send reaches anyone
            merge = await c.call_tool("merge", {"source": 3, "target": 1})
            assert merge.is_error and merge.structured_content == conflict
            assert merge.content[0].text == conflict["error"]
            assert (await ok(c, "merge", source=3, target=1, pick=["k=theirs"]))["sid"] == 1
            made = await ok(c, "spawn", name="x", runner="command:rm -rf /")  # no person chose it: disarmed
            assert made["notes"][0]["text"] == "its runner waits for a person's approval"
            assert (await ok(c, "show", sid=made["sid"]))["armed"] is False
            assert (await ok(c, "spawn", name="same runner", runner="builtin:echo"))["sid"] == made["sid"] + 1
            assert await refused(c, "spawn", agent="x") == "spawn: 'name' is a required property"
            assert await refused(c, "show", sid=0) == "spawn: sid: 0 is less than the minimum of 1".replace(
                "spawn", "show")
            assert await refused(c, "send", sid=1, text="x", sender=2) == (
                "send: Additional properties are not allowed ('sender' was unexpected)")
            with pytest.raises(MCPError, match="no tool 'fly'"):
                await c.call_tool("fly", {})
            with pytest.raises(MCPError, match="session 2 is out of reach"):
                await c.read_resource("procession://session/2/context")

    asyncio.run(check())
    assert cli_refusal(capsys, db, "mcp", "--allow", "fly").startswith("--allow: no tool 'fly'; tools are ps, show,")
    assert cli_refusal(capsys, db, "mcp", "--session", "1", "--agent", "other") == "session 1 is agent lead's, not other's"
    assert cli_refusal(capsys, db, "mcp", "--http", "0.0.0.0:8000") == (
        "--http serves on a loopback address only (127.0.0.1, ::1, localhost), not '0.0.0.0'")


async def test_allow_readonly_and_an_agent_s_scope(db: Path, tmp_path: Path) -> None:
    await setup(db, tmp_path)
    async with served(db, "--session", "1", "--readonly") as c:
        assert [t.name for t in (await c.list_tools()).tools] == READS
        assert await refused(c, "spawn", name="x") == "spawn is not allowed: this server is read-only (--readonly)"
        assert (await ok(c, "show", sid=1))["name"] == "lead"
    async with served(db, "--session", "1", "--allow", "send,memory") as c:
        assert [t.name for t in (await c.list_tools()).tools] == ["send", "memory_get", "memory_set", "memory_delete"]
        assert await refused(c, "ps") == (
            "ps is not allowed: this server allows memory_delete, memory_get, memory_set, send (--allow)")
        await ok(c, "memory_set", sid=1, key="k", value=1)
    async with served(db, "--agent", "lead") as c:
        assert (await refused(c, "spawn", name="x", agent="other")).startswith("agent lead spawns only its own")
        mine = (await ok(c, "spawn", name="mine"))["sid"]
        assert [s["sid"] for s in await ok(c, "ps")] == [1, mine]
        assert (await refused(c, "show", sid=2)).startswith("session 2 is out of reach: agent lead acts on")



async def test_two_clients_at_once(db: Path, tmp_path: Path) -> None:
    await setup(db, tmp_path)
    async with served(db, "--session", "1") as one, served(db, "--session", "2") as two:
        async def work(c: Client, to: int, n: int) -> list[int]:
            made = []
            for i in range(n):
                made.append((await ok(c, "spawn", name=f"child {i}", agent="helpers"))["sid"])
                await ok(c, "send", sid=to, text=f"hello {i}")
            return made

        mine, theirs = await asyncio.gather(work(one, 2, 8), work(two, 1, 8))
        assert sorted(mine + theirs) == list(range(3, 19))
        assert [s["sid"] for s in await ok(one, "ps")] == [1, *mine]
        assert [s["sid"] for s in await ok(two, "ps")] == [2, *theirs]
        assert (await refused(one, "show", sid=theirs[0])).startswith(f"session {theirs[0]} is out of reach")
    async with await Workspace.open(db) as ws:
        assert (await ws.info(1)).messages == (await ws.info(2)).messages == 8
        spawned = {e.session: e.other for e in await ws.journal(limit=100) if e.call == "spawn" and e.actor == "mcp"}
    assert spawned == {**{s: 1 for s in mine}, **{s: 2 for s in theirs}}


async def test_streamable_http_on_loopback_only(db: Path, tmp_path: Path) -> None:
    await setup(db, tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "procession", "mcp", "--db", str(db), "--session",
                                                "1", "--http", f"127.0.0.1:{port}", stderr=subprocess.PIPE)
    try:
        for _ in range(200):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            await asyncio.sleep(0.05)
        async with Client(f"http://127.0.0.1:{port}/mcp") as c:
            assert [s["sid"] for s in await ok(c, "ps")] == [1]
    finally:
        proc.terminate()
        await proc.wait()


async def test_the_server_a_binding_stands_for(db: Path, tmp_path: Path) -> None:
    await setup(db, tmp_path)
    async with await Workspace.open(db) as ws:
        bound = (await ws.bind(1, "mcp", "procession?allow=ps,show,spawn", mode="ro")).resource
    assert mcp_binding.is_procession(bound.kind, bound.uri) and not mcp_binding.is_procession("mcp", "other")
    config = mcp_binding.client_config(db, 1, uri=bound.uri, mode=bound.mode)
    assert config == {"command": sys.executable, "args": ["-m", "procession", "mcp", "--db", str(db), "--session", "1",
                                                          "--readonly", "--allow", "ps,show,spawn"]}
    async with Client(StdioServerParameters(command=config["command"], args=config["args"])) as c:
        assert [t.name for t in (await c.list_tools()).tools] == ["ps", "show"]
    with pytest.raises(Exception, match="unknown setting deny"):
        mcp_binding.allowed("procession?deny=spawn")
