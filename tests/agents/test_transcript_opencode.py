"""opencode's session store as a transcript format: sessions written by the real opencode
(against the scripted model server) read back, carried to another home and resumed there, and
written from a Procession history for the real CLI to resume; the rules the CLI's runs do not
reach (a step still being written, synthetic and reasoning parts, a rewound session) on a
small database made by hand with opencode's own tables."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from procession import Workspace
from procession.model import agent_homes
from procession.model.errors import InvalidArgument
from procession.model.toolcalls import tool_message
from procession.model.transcripts import Found, Position, Said, format_of
from procession.model.transcripts.opencode import SESSION_COLUMNS, database
from support.agent_clis import OpencodeSandbox, require_cli
from support.models import Hold, ModelServer, Usage, say, shell
from conftest import until
from support.runs import last_run
from test_runners import agent_session, ask

FORMAT = format_of("opencode")
FIRST, SECOND, THIRD = Usage(1200, 30, cache_read=800), Usage(300, 12, cache_read=2000), Usage(400, 7)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[OpencodeSandbox, str]]:
    """A session of two turns, the first with a bash call, made once for the module's tests
    (which only read it, or carry it elsewhere)."""
    with ModelServer() as server:
        agent = OpencodeSandbox(require_cli("opencode"), server, tmp_path_factory.mktemp("recorded"))
        server.script.add(shell("echo hi > file && cat file", usage=FIRST), say("The file is written.", usage=SECOND),
                          say("Again, done.", usage=THIRD))
        first = agent.prompt("write hi into file")
        assert first.returncode == 0, first.stderr
        sid = agent.session_id(first)
        assert agent.prompt("and once more", resume=sid).returncode == 0
        yield agent, sid


def test_a_session_reads_as_its_turns_in_order_with_its_tool_call_model_and_usage(
        recorded: tuple[OpencodeSandbox, str]) -> None:
    agent, sid = recorded
    found = FORMAT.find(agent.env, sid[:12])
    assert (found.id, found.path, found.cwd) == (sid, database(agent.env), str(agent.workdir))
    assert found.path == str(agent.home / ".local" / "share" / "opencode" / "opencode.db")

    read = FORMAT.read(found)
    assert [m.role for m in read.messages] == ["user", "tool", "assistant", "user", "assistant"]
    assert [m.content for m in read.messages if m.role != "tool"] == [
        "write hi into file", "The file is written.", "and once more", "Again, done."]
    tool = read.messages[1].meta["tool"]  # type: ignore[index]
    assert (tool["name"], tool["input"]["command"], tool["output"], tool["is_error"]) == (
        "bash", "echo hi > file && cat file", "hi\n", False)
    assert read.messages[1].meta["exit_code"] == 0  # type: ignore[index]
    stamps = [m.ts for m in read.messages]
    assert all(stamps) and stamps == sorted(stamps) and read.started and read.started <= stamps[0]  # type: ignore[operator]
    assert (read.model, read.cwd, read.title) == ("scripted/scripted-model", str(agent.workdir), "Scripted session title")
    assert (read.tokens_in, read.tokens_out, read.cache_read) == (
        FIRST.input + SECOND.input + THIRD.input, FIRST.output + SECOND.output + THIRD.output,
        FIRST.cache_read + SECOND.cache_read)
    assert read.context == (THIRD.prompt + THIRD.output, None)
    assert read.position.last.startswith("msg_") and not read.branched and not read.problems
    assert read.ref() == {"cli": "opencode", "id": sid, "cwd": str(agent.workdir), "transcript": found.path}
    assert FORMAT.read(found, read.position).messages == []


def test_carry_is_what_opencode_export_prints(recorded: tuple[OpencodeSandbox, str]) -> None:
    agent, sid = recorded
    exported = agent.run(["export", sid])
    assert exported.returncode == 0, exported.stderr
    assert FORMAT.carry({"id": sid, "transcript": database(agent.env)}, agent.env) == json.loads(exported.stdout)
    assert FORMAT.carry({"id": "ses_gone"}, agent.env) is None


def test_a_carried_session_is_placed_in_another_home_and_folder_and_resumed_there(
        recorded: tuple[OpencodeSandbox, str], model_server: ModelServer, tmp_path: Path) -> None:
    agent, sid = recorded
    carried = json.loads(json.dumps(FORMAT.carry({"id": sid}, agent.env)))  # as a snapshot file keeps it
    there = OpencodeSandbox(agent.cli, model_server, tmp_path / "there")
    mapping = {str(agent.workdir): str(there.workdir)}
    ref = FORMAT.place(carried, there.env, str(there.workdir), mapping)
    assert ref == {"cli": "opencode", "id": sid, "cwd": str(there.workdir), "transcript": database(there.env)}
    placed = FORMAT.read(FORMAT.find(there.env, sid))
    original = FORMAT.read(FORMAT.find(agent.env, sid))
    assert [(m.role, m.content) for m in placed.messages] == [(m.role, m.content) for m in original.messages]
    steps = [m["info"] for m in FORMAT.carry(ref, there.env)["messages"] if m["info"]["role"] == "assistant"]  # type: ignore[index]
    assert {s["path"]["cwd"] for s in steps} == {str(there.workdir)}

    assert FORMAT.place(carried, there.env, str(there.workdir), mapping) == {**ref, "already": True}  # taken as it is
    other = json.loads(json.dumps(carried))
    other["messages"][0]["info"]["id"] = "msg_000000000001AAAAAAAAAAAAAA"
    with pytest.raises(InvalidArgument, match="is already in .*, with another history"):
        FORMAT.place(other, there.env, str(there.workdir), mapping)
    shorter = {**carried, "messages": carried["messages"][:-1]}  # the session went on here: a fork cannot cut it
    with pytest.raises(InvalidArgument, match="is already in .*, with another history"):
        FORMAT.place(shorter, there.env, str(there.workdir), mapping)
    back = OpencodeSandbox(agent.cli, model_server, tmp_path / "back")  # it left from here early, went on, came back
    FORMAT.place(shorter, back.env, str(back.workdir), {str(agent.workdir): str(back.workdir)})
    assert FORMAT.place(carried, back.env, str(back.workdir), {str(agent.workdir): str(back.workdir)}) == {
        **ref, "cwd": str(back.workdir), "transcript": database(back.env)}  # brought up to date, not refused
    assert len(FORMAT.read(FORMAT.find(back.env, sid)).messages) == len(original.messages)
    skipped = {**carried, "messages": carried["messages"][1:]}  # held here: a message the carried one lacks
    with pytest.raises(InvalidArgument, match="is already in .*, with another history"):
        FORMAT.place(skipped, back.env, str(back.workdir), {str(agent.workdir): str(back.workdir)})

    model_server.script.add(say("Resumed there."))
    resumed = there.prompt("third prompt", resume=sid)
    assert resumed.returncode == 0 and there.session_id(resumed) == sid, resumed.stderr
    seen = model_server.turn_requests()[-1]
    assert seen.texts("user") == ["write hi into file", "and once more", "third prompt"]
    assert "The file is written." in seen.texts("assistant") and list(seen.results().values()) == ["hi\n"]


def test_a_written_history_is_a_session_the_real_cli_resumes_with_its_earlier_turns(
        opencode_sandbox: OpencodeSandbox, model_server: ModelServer) -> None:
    agent = opencode_sandbox
    history = [Said("user", "write hi into file", ts=1_767_225_600.0),
               Said(*tool_message("toolu_1", "Bash", {"command": "echo hi > file"}, "", False), ts=1_767_225_601.0),
               Said(*tool_message("toolu_2", "Bash", {"command": "cat file"}, "hi\n", False), ts=1_767_225_602.0),
               Said("assistant", "The file says hi.", ts=1_767_225_603.0),
               Said("user", "thanks"), Said("assistant", "You are welcome.")]
    ref = FORMAT.write(history, agent.env, str(agent.workdir), "")  # the model its configuration names
    assert ref is not None and ref["cwd"] == str(agent.workdir) and ref["transcript"] == database(agent.env)
    read = FORMAT.read(FORMAT.find(agent.env, ref["id"]))
    assert [(m.role, m.content) for m in read.messages] == [(m.role, m.content) for m in history]
    assert read.model == OpencodeSandbox.MODEL

    model_server.script.add(say("Going on."))
    resumed = agent.prompt("and now?", resume=ref["id"])
    assert resumed.returncode == 0 and agent.session_id(resumed) == ref["id"], resumed.stderr
    seen = model_server.turn_requests()[-1]
    assert seen.texts("user") == ["write hi into file", "thanks", "and now?"]
    assert seen.texts("assistant") == ["The file says hi.", "You are welcome."]
    assert [i.name for i in seen.items() if i.kind == "call"] == ["Bash", "Bash"]
    assert list(seen.results().values()) == ["", "hi\n"]
    assert FORMAT.read(FORMAT.find(agent.env, ref["id"]), read.position).messages[-1].content == "Going on."


def test_a_resumed_turn_reads_from_the_saved_position_as_exactly_the_new_part(
        opencode_sandbox: OpencodeSandbox, model_server: ModelServer) -> None:
    agent = opencode_sandbox
    model_server.script.add(say("Hello."), shell("ls", usage=FIRST), say("Listed.", usage=SECOND))
    sid = agent.session_id(agent.prompt("hi"))
    before = FORMAT.read(FORMAT.find(agent.env, sid))
    assert [m.content for m in before.messages] == ["hi", "Hello."]

    assert agent.prompt("list the files", resume=sid).returncode == 0
    after = FORMAT.read(FORMAT.find(agent.env, sid), Position.of(before.position.as_json()))
    assert [m.role for m in after.messages] == ["user", "tool", "assistant"]
    assert after.messages[0].content == "list the files" and after.messages[-1].content == "Listed."
    assert (after.tokens_in, after.tokens_out) == (FIRST.input + SECOND.input, FIRST.output + SECOND.output)
    assert after.position != before.position and not after.branched


async def test_a_step_cut_short_by_a_kill_is_held_while_newest_and_passed_once_the_session_goes_on(
        opencode_sandbox: OpencodeSandbox, model_server: ModelServer) -> None:
    agent, hold = opencode_sandbox, Hold()
    model_server.script.add(say("never finished", hold=hold), say("Back again."))
    args, stdin = agent.headless("hello")
    run = agent.start(args, stdin)
    hold.wait_reached()
    found = await until(lambda: step_begun(agent))
    run.kill()
    run.wait()
    hold.release()
    cut = FORMAT.read(found)
    assert [m.content for m in cut.messages] == ["hello"]

    assert agent.prompt("are you there?", resume=found.id).returncode == 0
    after = FORMAT.read(found, cut.position)
    assert [(m.role, m.content) for m in after.messages] == [("user", "are you there?"), ("assistant", "Back again.")]


def step_begun(agent: OpencodeSandbox) -> Found | None:
    """The sandbox's one session, once its step's message is written (as the reply starts)."""
    if not os.path.isfile(database(agent.env)):
        return None
    found = next(FORMAT.discover(agent.env), None)
    carried = FORMAT.carry({"id": found.id}, agent.env) if found else None
    return found if carried and carried["messages"][-1]["info"]["role"] == "assistant" else None


# ------------------------------------------------------------------------------------------
# A database made by hand, with the tables (and the columns read) of opencode's own


class Store:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.con = sqlite3.connect(path, isolation_level=None)
        self.con.execute("PRAGMA journal_mode=WAL")
        self.con.execute(f"CREATE TABLE session ({SESSION_COLUMNS})")
        self.con.execute("CREATE TABLE message (id, session_id, time_created, time_updated, data)")
        self.con.execute("CREATE TABLE part (id, message_id, session_id, time_created, time_updated, data)")
        self.env = {"HOME": str(path.parent), "OPENCODE_DB": str(path)}

    def session(self, sid: str, directory: str = "/work", at: int = 1000) -> None:
        row = {"id": sid, "project_id": "global", "slug": "s", "directory": directory, "title": "t", "version": "1",
               "cost": 0, "tokens_input": 0, "tokens_output": 0, "tokens_reasoning": 0, "tokens_cache_read": 0,
               "tokens_cache_write": 0, "time_created": at, "time_updated": at}
        self.con.execute(f"INSERT INTO session ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))

    def message(self, sid: str, mid: str, at: int, role: str, *parts: dict[str, Any], done: bool = True,
                **data: Any) -> None:
        info = {"role": role, "time": {"created": at, **({"completed": at + 1} if done and role == "assistant" else {})},
                **data}
        self.con.execute("INSERT INTO message VALUES (?, ?, ?, ?, ?)", (mid, sid, at, at, json.dumps(info)))
        for n, part in enumerate(parts):
            self.con.execute("INSERT INTO part VALUES (?, ?, ?, ?, ?, ?)",
                             (f"prt_{mid[4:]}{n:02d}", mid, sid, at, at, json.dumps(part)))

    def complete(self, mid: str, at: int) -> None:
        self.con.execute("UPDATE message SET data = json_set(data, '$.time.completed', ?) WHERE id = ?", (at, mid))


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "opencode.db")


def text(value: str, **extra: Any) -> dict[str, Any]:
    return {"type": "text", "text": value, **extra}


def test_a_step_still_being_written_is_left_for_the_next_read(store: Store) -> None:
    store.session("ses_a")
    store.message("ses_a", "msg_1", 10, "user", text("go"))
    store.message("ses_a", "msg_2", 20, "assistant", text("working"), done=False)
    found = FORMAT.find(store.env, "ses_a")
    first = FORMAT.read(found)
    assert [m.content for m in first.messages] == ["go"] and first.position.last == "msg_1"
    store.complete("msg_2", 30)
    second = FORMAT.read(found, first.position)
    assert [m.content for m in second.messages] == ["working"] and second.position.last == "msg_2"


def test_a_prompt_whose_parts_are_not_written_yet_waits(store: Store) -> None:
    store.session("ses_a")
    store.message("ses_a", "msg_1", 10, "user")
    assert FORMAT.read(FORMAT.find(store.env, "ses_a")).position.last == ""


def test_reasoning_steps_and_synthetic_parts_are_not_messages_and_a_failed_tool_is_an_error(store: Store) -> None:
    store.session("ses_a")
    store.message("ses_a", "msg_1", 10, "user", text("look"), text("Called the Read tool", synthetic=True))
    failed = {"type": "tool", "tool": "read", "callID": "c1",
              "state": {"status": "error", "input": {"filePath": "/x"}, "error": "no such file"}}
    stopped = {"type": "tool", "tool": "bash", "callID": "c2", "state": {"status": "running", "input": {"command": "x"}}}
    store.message("ses_a", "msg_2", 20, "assistant", {"type": "step-start"}, {"type": "reasoning", "text": "hmm"},
                  failed, stopped, {"type": "step-finish", "tokens": {"input": 5, "output": 1, "reasoning": 2}},
                  error={"name": "APIError", "data": {"message": "overloaded"}}, providerID="p", modelID="m")
    read = FORMAT.read(FORMAT.find(store.env, "ses_a"))
    assert [m.role for m in read.messages] == ["user", "tool", "tool"] and read.messages[0].content == "look"
    tools = [m.meta["tool"] for m in read.messages[1:]]  # type: ignore[index]
    assert [(t["output"], t["is_error"]) for t in tools] == [("no such file", True), (None, True)]
    assert (read.tokens_in, read.tokens_out, read.context, read.model) == (5, 3, (6, None), "p/m")
    assert read.problems == ["opencode: overloaded"]


def test_messages_are_in_opencodes_order_and_a_rewound_session_reads_whole_and_branched(store: Store) -> None:
    store.session("ses_a")
    store.message("ses_a", "msg_9", 10, "user", text("first"))  # a fork's copy: a new id, its old time
    store.message("ses_a", "msg_1", 20, "user", text("second"))
    found = FORMAT.find(store.env, "ses_a")
    read = FORMAT.read(found)
    assert [m.content for m in read.messages] == ["first", "second"]
    assert FORMAT.read(found, Position(last="msg_9")).messages[0].content == "second"
    rewound = FORMAT.read(found, Position(last="msg_gone"))
    assert rewound.branched and [m.content for m in rewound.messages] == ["first", "second"]


def test_sessions_are_listed_newest_first_and_found_by_a_prefix_only_when_it_is_unambiguous(store: Store) -> None:
    store.session("ses_ab1", "/one", at=1000)
    store.session("ses_ab2", "/two", at=3000)
    assert [(f.id, f.cwd, f.updated) for f in FORMAT.discover(store.env)] == [("ses_ab2", "/two", 3.0),
                                                                            ("ses_ab1", "/one", 1.0)]
    assert FORMAT.find(store.env, "ab1").cwd == "/one"
    with pytest.raises(InvalidArgument, match="ambiguous"):
        FORMAT.find(store.env, "ses_ab")
    with pytest.raises(InvalidArgument, match="no opencode session 'ses_zz'"):
        FORMAT.find(store.env, "ses_zz")
    with pytest.raises(InvalidArgument, match="several"):
        FORMAT.find(store.env, str(store.path))


def test_a_history_is_not_written_when_no_model_is_named_anywhere(tmp_path: Path) -> None:
    assert FORMAT.write([Said("user", "hi")], {"HOME": str(tmp_path)}, str(tmp_path), "") is None


def test_a_database_that_is_not_opencodes_is_refused_in_one_line(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE notes (body)")
    text_file = tmp_path / "notes.txt"
    text_file.write_text("not a database at all " * 100)
    for path in (other, text_file):
        with pytest.raises(InvalidArgument, match="not opencode's database") as refused:
            FORMAT.find({"HOME": str(tmp_path)}, str(path))
        assert "\n" not in str(refused.value)
    assert list(FORMAT.discover({"HOME": str(tmp_path / "nobody")})) == []


async def test_a_read_holds_what_the_runner_stored_for_the_same_turns(
        opencode_sandbox: OpencodeSandbox, model_server: ModelServer, engine: Any, live: Workspace,
        monkeypatch: pytest.MonkeyPatch) -> None:
    model_server.script.add(shell("echo hi > file && cat file", usage=FIRST), say("The file is written.", usage=SECOND))
    sid = await agent_session(live, opencode_sandbox, monkeypatch)
    assert (await ask(live, sid, "write hi into file", 1)).outcome == "ok"
    shown = (await live.show(sid)).to_json()
    # the session's own state folder (agent_homes), where its runs keep the CLI's store
    env = agent_homes.environment("opencode", opencode_sandbox.env, shown["agent_home"]["folder"])
    read = FORMAT.read(FORMAT.find(env, shown["agent_ref"]["id"]))
    assert [(m.role, m.content, m.meta or {}) for m in read.messages] == [
        (c["role"], c["content"], {k: v for k, v in (c.get("meta") or {}).items() if k != "run"})
        for c in shown["context"]]
    # the run's end settled where the transcript was read to: exactly where a whole read ends
    assert {**read.ref(), "position": read.position.as_json()} == shown["agent_ref"]
    spent = await last_run(live, sid)
    assert (read.tokens_in, read.tokens_out, read.cache_read) == (spent.tokens_in, spent.tokens_out, spent.cache_read)
