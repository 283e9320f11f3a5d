"""Claude Code's transcripts read, carried and written (``procession.model.transcripts.claude``),
against files the real CLI wrote and sessions the real CLI resumes.

One session is recorded once for the module (two turns, a Bash call in the first): the real
CLI's turns cost seconds each, and reading never changes the file. Tests that make the CLI
write more work on a copy (a fork) or in a sandbox of their own. The hand-made records at the
end cover what the CLI writes only in its interactive mode (sidechains, compactions, meta
records, progress records).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from conftest import HANG_S, until
from procession.engine.runners.agents.base import Turn
from procession.engine.runners.agents.claude import ClaudeReader
from procession.model.errors import InvalidArgument
from procession.model.toolcalls import tool_message
from procession.model.transcripts import Found, Position, Said, format_of
from procession.model.transcripts.claude import FORMAT, folder_name, transcript
from support.agent_clis import ClaudeSandbox, CliRun, require_cli
from support.models import ModelServer, Usage, say, shell

FIRST, FINAL, AGAIN = Usage(1200, 30, cache_read=800), Usage(300, 12, cache_read=2000, cache_write=50), Usage(140, 9)


@dataclass
class Recorded:
    """The module's session: its sandbox, the file after each turn, the runs' events."""

    sandbox: ClaudeSandbox
    server: ModelServer
    id: str
    path: Path
    after_first: bytes
    runs: list[CliRun]
    span: tuple[float, float]  # the clock before the first run and after the second

    def found(self, path: Path | None = None) -> Found:
        return FORMAT.find(self.sandbox.env, str(path or self.path))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    cli = require_cli("claude")
    with ModelServer() as server:
        sandbox = ClaudeSandbox(cli, server, tmp_path_factory.mktemp("recorded"))
        server.script.add(shell("echo hi > file && cat file", text="Let me write it.", usage=FIRST),
                          say("The file is written.", usage=FINAL))
        began = time.time()
        first = sandbox.prompt("write hi into file")
        assert first.returncode == 0, first.stderr
        sid = sandbox.session_id(first)
        path = Path(transcript(sandbox.env, str(sandbox.workdir), sid))
        after_first = path.read_bytes()
        server.script.add(say("Again, done.", usage=AGAIN))
        second = sandbox.prompt("and once more", resume=sid)
        assert second.returncode == 0, second.stderr
        yield Recorded(sandbox, server, sid, path, after_first, [first, second], (began, time.time()))
    assert not server.unserved, "a turn request found the script empty"


def runner_messages(recorded: Recorded, run: CliRun) -> list[tuple[str, str, dict[str, Any] | None]]:
    """What the claude runner stores of a run, from the same CLI's stream of events."""
    reader = ClaudeReader(Turn(1, "", 0, "", "", str(recorded.sandbox.workdir), None, env=recorded.sandbox.env))
    reader.feed(run.stdout.encode())
    return reader.close().messages


def shape(messages: list[Said]) -> list[tuple[str, str, dict[str, Any] | None]]:
    return [(m.role, m.content, m.meta) for m in messages]


def copy(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / f"{uuid.uuid4()}.jsonl"
    path.write_bytes(data)
    return path


# ---------------------------------------------------------------------------------- the real CLI's files

def test_a_read_gives_the_conversation_as_the_runner_stores_it(recorded: Recorded) -> None:
    found = recorded.found()
    assert (found.id, found.cwd, found.size) == (recorded.id, str(recorded.sandbox.workdir), recorded.path.stat().st_size)
    read = FORMAT.read(found)
    assert [m.role for m in read.messages] == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert [m.content for m in read.messages if m.role != "tool"] == [
        "write hi into file", "Let me write it.", "The file is written.", "and once more", "Again, done."]
    tool = read.messages[2].meta["tool"]  # type: ignore[index]
    assert (tool["name"], tool["input"], tool["output"], tool["is_error"]) == (
        "Bash", {"command": "echo hi > file && cat file"}, "hi", False)
    # the same messages, with the same agent_uuid, as the runner stored from the runs' events
    runs = [m for m in shape(read.messages) if m[0] != "user"]
    assert runs == runner_messages(recorded, recorded.runs[0]) + runner_messages(recorded, recorded.runs[1])

    stamps = [m.ts for m in read.messages]
    assert all(isinstance(t, float) for t in stamps) and stamps == sorted(stamps)
    assert read.started == stamps[0] and recorded.span[0] <= stamps[0] < stamps[-1] <= recorded.span[1]
    assert read.model == recorded.server.turn_requests()[0].body["model"]  # the scripted server echoes it
    calls = (FIRST, FINAL, AGAIN)  # one record per content block, the call's usage repeated: counted once
    assert (read.tokens_in, read.tokens_out, read.cache_read, read.cache_write) == (
        sum(c.input for c in calls), sum(c.output for c in calls), sum(c.cache_read for c in calls),
        sum(c.cache_write for c in calls))
    assert read.context == (AGAIN.prompt, None)
    assert (read.cwd, read.title, read.branched, read.problems) == (str(recorded.sandbox.workdir),
                                                                     "write hi into file", False, [])
    assert read.position.offset == recorded.path.stat().st_size
    assert read.position.last == read.messages[-1].meta["agent_uuid"]  # type: ignore[index]
    assert read.ref() == {"cli": "claude", "id": recorded.id, "cwd": str(recorded.sandbox.workdir),
                          "transcript": str(recorded.path)}


def test_a_read_from_a_saved_position_gives_exactly_the_new_turn_without_reading_the_old_part(
        recorded: Recorded, tmp_path: Path) -> None:
    first = FORMAT.read(recorded.found(copy(tmp_path, recorded.after_first)))
    assert len(first.messages) == 4 and first.position.offset == len(recorded.after_first)
    grown = FORMAT.read(recorded.found(), first.position)
    assert shape(grown.messages) == [("user", "and once more", None)] + runner_messages(recorded, recorded.runs[1])
    assert (grown.tokens_in, grown.tokens_out, grown.context) == (AGAIN.input, AGAIN.output, (AGAIN.prompt, None))
    assert grown.position == FORMAT.read(recorded.found()).position and not grown.branched
    # the part read before is not parsed again: blanked out, the new part reads the same
    whole = recorded.path.read_bytes()
    blanked = copy(tmp_path, b" " * (len(recorded.after_first) - 1) + b"\n" + whole[len(recorded.after_first):])
    assert shape(FORMAT.read(recorded.found(blanked), first.position).messages) == shape(grown.messages)
    assert FORMAT.read(recorded.found(), grown.position).messages == []


def test_a_record_cut_short_is_left_for_later_and_a_broken_one_inside_is_skipped_and_said(
        recorded: Recorded, tmp_path: Path) -> None:
    whole, done = recorded.path.read_bytes(), len(recorded.after_first)
    user_line = whole.index(b'"and once more"', done)
    half = whole.rindex(b"\n", 0, user_line) + 1  # the new user record's line starts here
    path = copy(tmp_path, whole[:user_line])
    found = recorded.found(path)
    start = FORMAT.read(found)
    cut = FORMAT.read(found, Position(done, start.position.last))
    assert cut.messages == [] and cut.position.offset == half and cut.problems == []
    path.write_bytes(whole)
    later = FORMAT.read(found, cut.position)
    assert [(m.role, m.content) for m in later.messages] == [("user", "and once more"), ("assistant", "Again, done.")]

    lines = whole.splitlines(keepends=True)
    broken = copy(tmp_path, b"".join(lines[:3]) + b'{"type": "user", "mess\n' + b"".join(lines[3:]))
    read = FORMAT.read(recorded.found(broken))
    assert shape(read.messages) == shape(FORMAT.read(recorded.found()).messages)
    at = len(b"".join(lines[:3]))
    assert read.problems == [f"the record at byte {at} of {broken} is not valid JSON; skipped"]


def test_a_file_that_is_not_a_claude_transcript_is_refused_in_one_line(recorded: Recorded, tmp_path: Path) -> None:
    other = tmp_path / "rollout.jsonl"
    other.write_text('{"timestamp": "2026-01-01T00:00:00Z", "type": "session_meta", "payload": {}}\n')
    prose = tmp_path / "notes.jsonl"
    prose.write_text("not json\nat all\n")
    for path in (other, prose):
        with pytest.raises(InvalidArgument, match="is not a Claude Code transcript$"):
            FORMAT.read(FORMAT.find({}, str(path)))
    with pytest.raises(InvalidArgument, match="^no Claude Code transcript at"):
        FORMAT.find({}, str(tmp_path / "gone.jsonl"))
    with pytest.raises(InvalidArgument, match="^no Claude Code session 'ffff' in"):
        FORMAT.find(recorded.sandbox.env, "ffff")


def test_discover_lists_every_session_newest_first_and_find_takes_a_prefix(recorded: Recorded,
                                                                            tmp_path: Path) -> None:
    env = {"CLAUDE_CONFIG_DIR": str(tmp_path / "config")}
    folder = Path(transcript(env, "/some/work", "x")).parent
    folder.mkdir(parents=True)
    ids = ["aaaa1111-0000-4000-8000-000000000000", "aaaa2222-0000-4000-8000-000000000000"]
    for age, ident in enumerate(ids):
        shutil.copy(recorded.path, folder / f"{ident}.jsonl")
        stamp = 1_700_000_000 + age
        os.utime(folder / f"{ident}.jsonl", (stamp, stamp))
    (folder / "agent-1234.jsonl").write_text("{}\n")  # an old CLI's sidechain file: not a session
    listed = list(FORMAT.discover(env))
    assert [f.id for f in listed] == ids[::-1]
    assert {f.cwd for f in listed} == {str(recorded.sandbox.workdir)}
    assert FORMAT.find(env, "aaaa2").id == ids[1]
    with pytest.raises(InvalidArgument, match="^2 Claude Code sessions start with 'aaaa'"):
        FORMAT.find(env, "aaaa")
    assert list(FORMAT.discover({"CLAUDE_CONFIG_DIR": str(tmp_path / "none")})) == []


def test_a_fork_reads_whole_and_a_resume_at_an_earlier_message_is_a_branch(recorded: Recorded, tmp_path: Path) -> None:
    sandbox, server = recorded.sandbox, recorded.server
    parent, untouched = FORMAT.read(recorded.found()), recorded.path.read_bytes()
    server.script.add(say("In the fork."), say("Rewound."))
    forked = sandbox.run(["-p", "fork it", "--output-format", "stream-json", "--verbose", "--resume", recorded.id,
                          "--fork-session"])
    assert forked.returncode == 0, forked.stderr
    fork = FORMAT.find(sandbox.env, sandbox.session_id(forked))
    read = FORMAT.read(fork)
    assert shape(read.messages[:-2]) == shape(parent.messages)  # the CLI copies the records, uuids kept
    assert [m.content for m in read.messages[-2:]] == ["fork it", "In the fork."]
    at = parent.messages[3].meta["agent_uuid"]  # type: ignore[index]  # "The file is written."
    rewound = sandbox.run(["-p", "again from there", "--output-format", "stream-json", "--verbose",
                           "--resume", fork.id, "--resume-session-at", at])
    assert rewound.returncode == 0, rewound.stderr
    branched = FORMAT.read(fork, read.position)
    assert branched.branched and branched.messages == []
    again = FORMAT.read(fork)
    assert [m.content for m in again.messages if m.role != "tool"] == [
        "write hi into file", "Let me write it.", "The file is written.", "again from there", "Rewound."]
    assert branched.position == read.position and FORMAT.read(fork, branched.position).branched  # until read anew
    assert recorded.path.read_bytes() == untouched


def sleeping(pid: int) -> bool:
    """The tool's ``sleep`` runs (the CLI runs it in a session of its own, still its descendant)."""
    try:
        return any(p.name() == "sleep" for p in psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return False


async def test_a_tool_still_running_is_left_for_the_read_after_it_returns(
        claude_sandbox: ClaudeSandbox, model_server: ModelServer) -> None:
    model_server.script.add(shell("sleep 600", text="Sleeping."), say("Stopped, then."))
    args, _ = claude_sandbox.headless("sleep please")
    process = claude_sandbox.start(args)
    try:
        # the tool runs, and the CLI has written its call (it writes its records a little behind)
        running = await until(lambda: sleeping(process.pid) and next(
            (f for f in FORMAT.discover(claude_sandbox.env) if b'"tool_use"' in Path(f.path).read_bytes()), None))
        during = FORMAT.read(running)
        assert [(m.role, m.content) for m in during.messages] == [("user", "sleep please"), ("assistant", "Sleeping.")]
        process.send_signal(signal.SIGINT)  # the CLI kills the tool, and may exit before it writes the result
        process.communicate(timeout=HANG_S)
    finally:
        process.kill()
    assert claude_sandbox.prompt("go on", resume=running.id).returncode == 0
    after = FORMAT.read(FORMAT.find(claude_sandbox.env, running.id), during.position)
    assert [(m.role, m.content) for m in after.messages if m.role != "tool"] == [
        ("user", "go on"), ("assistant", "Stopped, then.")]  # the interruption's marker is not the user's words
    # The CLI writes the killed tool's result, or (when it exited first) resumes from before the
    # call, leaving it off the conversation: the read follows the file either way.
    tools = [m.meta["tool"] for m in after.messages if m.role == "tool"]  # type: ignore[index]
    written = b'"tool_result"' in Path(running.path).read_bytes()
    assert [(t["input"], t["is_error"]) for t in tools] == ([({"command": "sleep 600"}, True)] if written else [])


def test_a_session_run_through_a_symbolic_link_is_found_where_the_cli_filed_it(
        claude_sandbox: ClaudeSandbox, model_server: ModelServer, tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(claude_sandbox.workdir)
    model_server.script.add(say("hi"))
    run = subprocess.run([str(claude_sandbox.cli.exe), "-p", "hello", "--output-format", "json"], cwd=link,
                         env={**claude_sandbox.env, "PWD": str(link)}, capture_output=True, text=True, timeout=HANG_S)
    assert run.returncode == 0, run.stderr
    sid = json.loads(run.stdout)["session_id"]
    assert Path(transcript(claude_sandbox.env, str(link), sid)).is_file()


# ---------------------------------------------------------------------------------- carried, written

def test_a_carried_session_placed_under_another_home_and_folder_is_resumed_there(
        recorded: Recorded, claude_sandbox: ClaudeSandbox, model_server: ModelServer) -> None:
    ref = FORMAT.read(recorded.found()).ref()
    carried = FORMAT.carry(ref, recorded.sandbox.env)
    assert carried is not None
    carried = json.loads(json.dumps(carried))  # as a snapshot file keeps it
    old, new = str(recorded.sandbox.workdir), str(claude_sandbox.workdir)
    placed = FORMAT.place(carried, claude_sandbox.env, new, {old: new})
    assert placed == {"cli": "claude", "id": recorded.id, "cwd": new,
                      "transcript": transcript(claude_sandbox.env, new, recorded.id)}
    records = [json.loads(line) for line in Path(placed["transcript"]).read_text().splitlines()]
    assert {r["cwd"] for r in records if "cwd" in r} == {new}
    assert FORMAT.place(carried, claude_sandbox.env, new, {old: new}) == {**placed, "already": True}  # again: said
    changed = {**carried, "records": carried["records"][:-3]}
    with pytest.raises(InvalidArgument, match="^Claude Code session .* is already at .*, with another history"):
        FORMAT.place(changed, claude_sandbox.env, new, {old: new})

    model_server.script.add(say("We wrote hi into file."))
    run = claude_sandbox.prompt("what did we do?", resume=recorded.id)
    assert run.returncode == 0, run.stderr
    sent = model_server.turn_requests()[-1]
    users = " ".join(sent.texts("user"))
    assert "write hi into file" in users and "and once more" in users and "what did we do?" in users
    assert "hi" in sent.results().values() and "Again, done." in sent.texts("assistant")
    assert FORMAT.carry({"cli": "claude", "id": str(uuid.uuid4()), "cwd": new}, claude_sandbox.env) is None


def test_a_written_history_is_resumed_by_the_real_cli_with_its_earlier_turns(
        claude_sandbox: ClaudeSandbox, model_server: ModelServer) -> None:
    cwd = str(claude_sandbox.workdir)
    history = [Said("user", "how many files are there?", ts=1_767_225_600.0),
               Said("assistant", "Let me look.", ts=1_767_225_601.0),
               Said(*tool_message("call_1", "exec_command", {"cmd": "ls | wc -l"}, "2", False), ts=1_767_225_602.0),
               Said("user", "and what are they?", ts=1_767_225_603.0)]
    ref = FORMAT.write(history, claude_sandbox.env, cwd, "claude-sonnet-4-5")
    assert ref is not None and ref["cwd"] == cwd and Path(ref["transcript"]).exists()
    read = FORMAT.read(FORMAT.find(claude_sandbox.env, ref["id"]))
    assert [(m.role, m.content, m.ts) for m in read.messages] == [(m.role, m.content, m.ts) for m in history]
    assert read.messages[2].meta["tool"]["input"] == {"cmd": "ls | wc -l"}  # type: ignore[index]

    model_server.script.add(say("Two files: a and b."))
    run = claude_sandbox.prompt("answer now", resume=ref["id"])
    assert run.returncode == 0, run.stderr + run.stdout[-2000:]
    sent = model_server.turn_requests()[-1]
    # the whole history, in order; the CLI answers a conversation that ended on the user itself
    assert [(i.role, i.kind, i.name, i.text) for i in sent.items() if "<system-reminder>" not in i.text] == [
        ("user", "text", "", "how many files are there?"), ("assistant", "text", "", "Let me look."),
        ("assistant", "call", "exec_command", '{"cmd": "ls | wc -l"}'), ("tool", "result", "", "2"),
        ("user", "text", "", "and what are they?"), ("assistant", "text", "", "No response requested."),
        ("user", "text", "", "answer now")]
    grown = FORMAT.read(FORMAT.find(claude_sandbox.env, ref["id"]), read.position)
    assert [(m.role, m.content) for m in grown.messages] == [("user", "answer now"), ("assistant", "Two files: a and b.")]


def test_a_compacted_session_reads_whole_and_carries_the_long_output_the_cli_saved_beside_it(
        claude_sandbox: ClaudeSandbox, model_server: ModelServer, tmp_path: Path) -> None:
    model_server.script.add(shell("seq 1 40000"), say("Many lines."), say("Summary: numbers were printed."),
                            say("After compaction."))
    first = claude_sandbox.prompt("print many lines")
    sid = claude_sandbox.session_id(first)
    for prompt in ("/compact", "go on"):
        assert claude_sandbox.prompt(prompt, resume=sid).returncode == 0
    read = FORMAT.read(FORMAT.find(claude_sandbox.env, sid))
    said = [(m.role, m.content) for m in read.messages if m.role == "assistant" or "<" not in m.content]
    assert said == [("user", "print many lines"), ("assistant", "Many lines."), ("user", "go on"),
                    ("assistant", "After compaction.")]  # the summary the CLI put in their place is not said
    # the CLI's own command is never conversation (it may exit before it records it at all)
    assert not any(m.content.startswith("<command-name>") for m in read.messages)
    tool = read.messages[1].meta["tool"]  # type: ignore[index]
    old_folder = read.path[:-len(".jsonl")]
    assert f"Full output saved to: {old_folder}/tool-results/" in tool["output"]

    carried = FORMAT.carry(read.ref(), claude_sandbox.env)
    assert carried is not None
    [(name, text)] = carried["files"].items()
    assert name.startswith("tool-results/") and text.endswith("39999\n40000\n")
    other = ClaudeSandbox(claude_sandbox.cli, model_server, tmp_path / "other")
    placed = FORMAT.place(carried, other.env, str(other.workdir), {})
    moved = FORMAT.read(FORMAT.find(other.env, placed["transcript"]))
    folder = placed["transcript"][:-len(".jsonl")]
    assert f"Full output saved to: {folder}/{name}" in moved.messages[1].meta["tool"]["output"]  # type: ignore[index]
    assert Path(folder, name).read_text() == text and moved.cwd == str(other.workdir)
    with pytest.raises(InvalidArgument, match="^the carried Claude Code session has a file outside its folder"):
        FORMAT.place({**carried, "files": {"../../escape.txt": "x"}}, other.env, str(tmp_path / "third"), {})


# ---------------------------------------------------------------------------------- hand-made records

class Records:
    """A transcript written record by record, chained as the CLI chains them."""

    def __init__(self, path: Path) -> None:
        self.path, self.parent, self.n = path, None, 0
        self.session = path.stem

    def add(self, kind: str, parent: Any = "chain", **fields: Any) -> str:
        self.n += 1
        uid = f"00000000-0000-4000-8000-{self.n:012d}"
        record = {"parentUuid": self.parent if parent == "chain" else parent, "isSidechain": False, "type": kind,
                  "uuid": uid, "timestamp": f"2026-01-01T00:00:{self.n:02d}.000Z", "cwd": "/w",
                  "sessionId": self.session, **fields}
        self.line(record)
        if not fields.get("isSidechain"):
            self.parent = uid
        return uid

    def line(self, record: dict[str, Any]) -> None:
        with self.path.open("a") as out:
            out.write(json.dumps(record) + "\n")

    def user(self, content: Any, **fields: Any) -> str:
        return self.add("user", message={"role": "user", "content": content}, **fields)

    def assistant(self, block: dict[str, Any], call: str = "msg_1", usage: dict[str, int] | None = None,
                  **fields: Any) -> str:
        message = {"id": call, "role": "assistant", "model": "claude-x", "content": [block],
                   "usage": usage or {"input_tokens": 10, "output_tokens": 1}}
        return self.add("assistant", message=message, **fields)


@pytest.fixture
def records(tmp_path: Path) -> Records:
    return Records(tmp_path / f"{uuid.uuid4()}.jsonl")


def read(records: Records, position: Position | None = None) -> Any:
    return FORMAT.read(FORMAT.find({}, str(records.path)), position)


def test_sidechains_meta_attachments_and_system_records_are_walked_through_never_said(records: Records) -> None:
    records.user("go")
    records.add("attachment", attachment={"type": "skill_listing"})
    records.assistant({"type": "text", "text": "a subagent said this"}, "msg_side", isSidechain=True)
    records.user("<local-command-caveat>", isMeta=True)
    records.add("system", subtype="turn_duration")
    records.line({"type": "queue-operation", "operation": "enqueue", "sessionId": records.session})
    records.add("progress")  # bridged over: the next record's parent is this one
    records.assistant({"type": "thinking", "thinking": "hm"})
    records.assistant({"type": "text", "text": "done"})
    records.user([{"type": "text", "text": "[Request interrupted by user]"}])
    got = read(records)
    assert [(m.role, m.content) for m in got.messages] == [("user", "go"), ("assistant", "done")]
    assert got.tokens_in == 10  # msg_1 once; the sidechain's call is not this conversation's


def test_the_clis_own_commands_typed_at_its_prompt_are_not_conversation(records: Records) -> None:
    """Leaving an attached session with ``/exit`` added two user messages to its history on
    every attach (``<command-name>/exit…``, ``<local-command-stdout>Goodbye!…``)."""
    records.user("go")
    records.assistant({"type": "text", "text": "done"})
    records.user("<command-name>/exit</command-name>\n<command-message>exit</command-message>\n<command-args></command-args>")
    records.user([{"type": "text", "text": "<local-command-stdout>Goodbye!</local-command-stdout>"}])
    records.user("and one more")
    assert [(m.role, m.content) for m in read(records).messages] == [("user", "go"), ("assistant", "done"),
                                                                    ("user", "and one more")]


def test_a_tool_use_waiting_for_its_result_ends_the_part_read(records: Records) -> None:
    records.user("run two")
    records.assistant({"type": "text", "text": "Both."}, "msg_1")
    records.assistant({"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "a"}}, "msg_1")
    records.assistant({"type": "tool_use", "id": "t2", "name": "Bash", "input": {"command": "b"}}, "msg_1")
    records.user([{"type": "tool_result", "tool_use_id": "t1", "content": "A"}])
    first = read(records)
    assert [m.content for m in first.messages] == ["run two", "Both."]
    records.user([{"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "B"}],
                   "is_error": True}])
    records.assistant({"type": "text", "text": "A and B."}, "msg_2")
    later = read(records, first.position)
    assert [(m.role, m.meta["tool"]["output"] if m.role == "tool" else m.content,  # type: ignore[index]
             m.meta["tool"]["is_error"] if m.role == "tool" else None) for m in later.messages] == [  # type: ignore[index]
        ("tool", "A", False), ("tool", "B", True), ("assistant", "A and B.", None)]
    assert later.tokens_in == 10  # msg_1 was counted by the first read
    whole = read(records)
    assert shape(whole.messages) == shape(first.messages + later.messages) and whole.tokens_in == 20


def test_a_model_call_read_in_part_is_counted_once(records: Records) -> None:
    records.user("go")
    records.assistant({"type": "text", "text": "First, a look."}, "msg_1")
    first = read(records)
    records.assistant({"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}, "msg_1")
    records.user([{"type": "tool_result", "tool_use_id": "t1", "content": "a"}])
    records.assistant({"type": "text", "text": "One file."}, "msg_2", usage={"input_tokens": 7, "output_tokens": 2})
    later = read(records, first.position)
    assert [m.role for m in later.messages] == ["tool", "assistant"]
    assert (first.tokens_in, later.tokens_in, later.tokens_out, later.context) == (10, 7, 2, (7, None))


def test_a_tool_that_never_returned_before_the_next_prompt_is_said_without_a_result(records: Records) -> None:
    records.user("run")
    records.assistant({"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "sleep 9"}})
    records.user("stop that")
    got = read(records)
    assert [m.role for m in got.messages] == ["user", "tool", "user"]
    assert got.messages[1].meta["tool"]["output"] is None  # type: ignore[index]


def test_a_compaction_is_read_through_to_what_it_compacted(records: Records) -> None:
    records.user("first")
    before = records.assistant({"type": "text", "text": "one"})
    records.add("system", parent=None, subtype="compact_boundary", logicalParentUuid=before)
    records.user("Summary of the conversation", isCompactSummary=True)
    records.user("second")
    records.assistant({"type": "text", "text": "two"}, "msg_2")
    assert [m.content for m in read(records).messages] == ["first", "one", "second", "two"]


def test_the_leaf_is_the_last_prompts_unless_a_newer_record_descends_from_it(records: Records) -> None:
    records.user("q")
    answer = records.assistant({"type": "text", "text": "a"})
    records.user("q2")
    records.assistant({"type": "text", "text": "a2"}, "msg_2")
    records.line({"type": "last-prompt", "leafUuid": answer, "explicit": True, "sessionId": records.session})
    assert [m.content for m in read(records).messages] == ["q", "a"]  # rewound in the CLI, nothing new yet
    records.parent = answer
    records.user("q3")
    assert [m.content for m in read(records).messages] == ["q", "a", "q3"]


def test_a_long_folder_is_named_as_the_cli_names_it() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not on PATH")
    cwd = "/home/ü" + "/deep" * 60 + "/😀"
    script = ("const e=process.argv[1];let t=e.replace(/[^a-zA-Z0-9]/g,'-');let h=0;"
              "for(let n=0;n<e.length;n++)h=(h<<5)-h+e.charCodeAt(n)|0;"
              "console.log(t.length<=200?t:`${t.slice(0,200)}-${Math.abs(h).toString(36)}`)")
    for folder in (cwd, "/tmp/a b/ü😀"):
        expected = subprocess.run([node, "-e", script, folder], capture_output=True, text=True, check=True).stdout
        assert folder_name(folder) == expected.strip()
    assert format_of("claude") is FORMAT


def test_a_written_history_reads_back_as_it_was_given(tmp_path: Path) -> None:
    env = {"CLAUDE_CONFIG_DIR": str(tmp_path)}
    history = [Said("user", "go", ts=1.5), Said("assistant", " \n"), Said("assistant", "On it."),
               Said(*tool_message("call:7/x", "ns.tool name", "not an object", None, False)),
               Said("tool", "a tool message without its call"), Said("assistant", "Done.")]
    ref = FORMAT.write(history, env, "/w", "")
    assert ref is not None
    got = read_ref(ref)
    assert [(m.role, m.content) for m in got.messages] == [
        ("user", "go"), ("assistant", "On it."),
        ("tool", 'ns_tool_name: {"input":"not an object"}\nerror: (no result: the run stopped first)'),
        ("user", "a tool message without its call"), ("assistant", "Done.")]
    tool = got.messages[2].meta["tool"]  # type: ignore[index]
    assert (tool["id"], tool["input"], tool["output"], tool["is_error"]) == (
        "call_7_x", {"input": "not an object"}, "(no result: the run stopped first)", True)
    assert got.messages[0].ts == 1.5 and got.title == "go"
    written = [json.loads(line) for line in Path(ref["transcript"]).read_text().splitlines()]
    texts = [b["text"] for r in written if r["type"] == "assistant" for b in r["message"]["content"] if "text" in b]
    assert texts == ["On it.", "Done."]  # no empty text: the API refuses one


def test_a_position_that_is_not_where_a_line_ended_reads_the_whole_file(records: Records) -> None:
    asked = records.user("q")
    records.assistant({"type": "text", "text": "a"})
    assert [m.content for m in read(records, Position(5, asked)).messages] == ["a"]
    assert read(records, Position(10 ** 9, asked)).position.offset == records.path.stat().st_size


def read_ref(ref: dict[str, Any]) -> Any:
    return FORMAT.read(FORMAT.find({}, ref["transcript"]))
