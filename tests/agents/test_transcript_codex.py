"""Codex CLI's rollouts as transcripts: read from files the real CLI wrote (against the
scripted model server), carried to another home and resumed there by the real CLI, and
written for a history the real CLI then resumes, its model seeing the earlier turns.

One recorded thread (two prompts, a shell call among them, then a third prompt resumed with
``exec resume`` and a fork) is made once for the module; tests that change files work on
copies of it or in sandboxes of their own.
"""

from __future__ import annotations

import json
import shutil
import signal
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from procession.engine.runners.agents.base import Turn
from procession.engine.runners.agents.codex import thread_total
from procession.model.errors import InvalidArgument
from procession.model.transcripts import Found, Position, Said, Transcript, format_of
from procession.model.transcripts.codex import FORMAT, home, uuid7
from procession.model.toolcalls import tool_message
from conftest import HANG_S, until
from support.agent_clis import CodexSandbox, require_cli
from support.models import ModelServer, Usage, say, shell

FIRST, SECOND, THIRD = Usage(1200, 30, cache_read=800), Usage(300, 12, cache_read=2000), Usage(400, 7, cache_read=100)


@dataclass
class Recorded:
    """The module's thread: its sandbox, what the first read found after two prompts, and
    the fork made after the third."""

    sandbox: CodexSandbox
    server: ModelServer
    thread: str
    started: float
    first: Transcript  # read after the first two prompts
    events: list[dict[str, Any]]  # what codex exec --json said in the first prompt (what the runner reads)
    found: Found  # after the third
    fork: str

    @property
    def env(self) -> dict[str, str]:
        return self.sandbox.env


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    with ModelServer() as server:
        sandbox = CodexSandbox(require_cli("codex"), server, tmp_path_factory.mktemp("recorded"))
        started = time.time()
        server.script.add(shell("echo hi > file && cat file", usage=FIRST), say("The file is written.", usage=SECOND))
        run = sandbox.prompt("write hi into file")
        assert run.returncode == 0, run.stderr
        thread = sandbox.session_id(run)
        server.script.add(say("Again, done."))
        assert sandbox.prompt("and once more", resume=thread).returncode == 0
        first = FORMAT.read(FORMAT.find(sandbox.env, thread))
        server.script.add(say("Third answer.", usage=THIRD))
        assert sandbox.prompt("a third prompt", resume=thread).returncode == 0
        found = FORMAT.find(sandbox.env, thread)
        server.script.add(say("On the fork."))
        forked = sandbox.run(["exec", "fork", "--json", "--skip-git-repo-check", thread, "a fork's prompt"])
        assert forked.returncode == 0, forked.stderr
        yield Recorded(sandbox, server, thread, started, first, run.events, found, sandbox.session_id(forked))
        assert not server.unserved


def indexed(env: dict[str, str]) -> dict[str, tuple[str, str]]:
    """The threads the CLI's own index lists: id -> (rollout path, cwd)."""
    index = sqlite3.connect(home(env) / "state_5.sqlite")
    try:
        return {i: (p, c) for i, p, c in index.execute("SELECT id, rollout_path, cwd FROM threads")}
    finally:
        index.close()


def said(transcript: Transcript) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in transcript.messages]


# ------------------------------------------------------------------------------ the real CLI's files


def test_two_prompts_with_a_shell_call_read_as_the_runner_stores_them(recorded: Recorded) -> None:
    got = recorded.first
    assert format_of("codex") is FORMAT
    assert [m.role for m in got.messages] == ["user", "tool", "assistant", "user", "assistant"]
    assert [m.content for m in got.messages if m.role != "tool"] == [
        "write hi into file", "The file is written.", "and once more", "Again, done."]
    tool = got.messages[1]
    assert tool.meta is not None and tool.meta["exit_code"] == 0
    assert tool.meta["tool"] == {**tool.meta["tool"], "name": "exec_command", "output": "hi\n", "is_error": False}
    [command] = [e["item"] for e in recorded.events
                 if e["type"] == "item.completed" and e["item"]["type"] == "command_execution"]
    assert tool.meta["tool"]["input"] == {"command": command["command"]}  # as the runner stores it from exec --json
    assert "echo hi > file && cat file" in command["command"] and command["aggregated_output"] == "hi\n"
    stamps = [m.ts for m in got.messages]
    assert all(s is not None for s in stamps) and stamps == sorted(stamps)  # type: ignore[type-var]
    assert recorded.started - 1 <= stamps[0] <= stamps[-1] <= time.time()  # type: ignore[operator]
    assert (got.id, got.cwd, got.title) == (recorded.thread, str(recorded.sandbox.workdir), "write hi into file")
    assert got.model == recorded.server.turn_requests()[0].body["model"] and got.started is not None
    calls = (FIRST, SECOND, Usage())
    assert got.tokens_in == sum(u.input for u in calls) and got.tokens_out == sum(u.output for u in calls)
    assert (got.cache_read, got.cache_write) == (sum(u.cache_read for u in calls), 0)
    assert got.context is not None and got.context[0] == Usage().prompt + Usage().output and got.context[1]
    assert got.problems == [] and got.forked_from is None and not got.branched
    assert got.ref() == {"cli": "codex", "id": recorded.thread, "cwd": str(recorded.sandbox.workdir),
                         "transcript": recorded.found.path}


def test_a_read_from_the_saved_position_returns_exactly_the_resumed_turn(recorded: Recorded) -> None:
    after = FORMAT.read(recorded.found, recorded.first.position)
    assert said(after) == [("user", "a third prompt"), ("assistant", "Third answer.")]
    assert (after.tokens_in, after.tokens_out, after.cache_read) == (THIRD.input, THIRD.output, THIRD.cache_read)
    assert after.position.offset == Path(recorded.found.path).stat().st_size
    again = FORMAT.read(recorded.found, after.position)
    assert said(again) == [] and again.tokens_in == 0 and again.position == after.position
    whole = FORMAT.read(recorded.found)
    assert said(whole) == said(recorded.first) + said(after)


def test_the_threads_are_discovered_newest_first_and_found_by_id_prefix_or_path(recorded: Recorded) -> None:
    listed = list(FORMAT.discover(recorded.env))
    assert [f.id for f in listed] == [recorded.fork, recorded.thread]
    assert all(f.cwd == str(recorded.sandbox.workdir) and f.size == Path(f.path).stat().st_size for f in listed)
    assert FORMAT.find(recorded.env, recorded.thread[:-4]).id == recorded.thread
    assert FORMAT.find(recorded.env, recorded.found.path) == recorded.found
    with pytest.raises(InvalidArgument, match="no Codex thread"):
        FORMAT.find(recorded.env, "0000")
    with pytest.raises(InvalidArgument, match="2 Codex threads"):
        FORMAT.find(recorded.env, recorded.thread[:4])


def test_a_fork_reads_with_the_history_it_was_forked_with(recorded: Recorded) -> None:
    fork = FORMAT.read(FORMAT.find(recorded.env, recorded.fork))
    whole = FORMAT.read(recorded.found)
    assert fork.forked_from == recorded.thread
    assert said(fork) == said(whole) + [("user", "a fork's prompt"), ("assistant", "On the fork.")]
    assert fork.tokens_in == Usage().input  # the parent's calls are the parent's


def test_a_fork_without_its_parents_rollout_reads_its_own_part_and_is_not_carried(
        recorded: Recorded, tmp_path: Path) -> None:
    fork = FORMAT.find(recorded.env, recorded.fork)
    alone = tmp_path / "codex" / "sessions" / Path(fork.path).relative_to(home(recorded.env) / "sessions")
    alone.parent.mkdir(parents=True)
    shutil.copy(fork.path, alone)
    env = {"CODEX_HOME": str(tmp_path / "codex")}
    read = FORMAT.read(FORMAT.find(env, recorded.fork))
    assert said(read) == [("user", "a fork's prompt"), ("assistant", "On the fork.")]
    assert read.problems == [f"the rollout of thread {recorded.thread}, which this one was forked from, is not beside"
                             " it: its history is left out"]
    assert FORMAT.carry({"cli": "codex", "id": recorded.fork, "transcript": str(alone)}, env) is None


def test_a_line_cut_short_waits_a_bad_line_is_skipped_and_another_file_is_refused(
        recorded: Recorded, tmp_path: Path) -> None:
    lines = Path(recorded.found.path).read_bytes().splitlines(keepends=True)
    copy = tmp_path / Path(recorded.found.path).name
    copy.write_bytes(b"".join(lines[:-1]) + lines[-1][:20])
    cut = FORMAT.read(FORMAT.find(recorded.env, str(copy)))
    assert cut.position.offset == sum(map(len, lines[:-1])) and cut.problems == []
    with copy.open("ab") as file:
        file.write(lines[-1][20:])
    rest = FORMAT.read(FORMAT.find(recorded.env, str(copy)), cut.position)
    assert rest.position.offset == copy.stat().st_size and rest.problems == []
    assert said(FORMAT.read(FORMAT.find(recorded.env, str(copy)))) == said(FORMAT.read(recorded.found))

    middle = len(lines) // 2
    copy.write_bytes(b"".join(lines[:middle]) + b'{"type": "response_item", "payl\n' + b"".join(lines[middle:]))
    skipped = FORMAT.read(FORMAT.find(recorded.env, str(copy)))
    assert said(skipped) == said(FORMAT.read(recorded.found))
    assert skipped.problems == [f"the rollout line at byte {sum(map(len, lines[:middle]))} is not valid JSON; skipped"]

    other = tmp_path / "other.jsonl"
    other.write_text('{"type": "user", "message": "a Claude transcript"}\n')
    with pytest.raises(InvalidArgument, match="is not a Codex rollout"):
        FORMAT.find(recorded.env, str(other))
    with pytest.raises(InvalidArgument, match="is not a Codex rollout"):
        FORMAT.read(Found("codex", "x", str(other), "", 0.0))


def test_an_adopted_threads_first_run_counts_only_its_own_tokens(recorded: Recorded) -> None:
    """The runner's usage is the difference of running totals: an adopted reference keeps
    none, so the rollout's last count stands for it."""
    turn = Turn(1, "go on", 1, "", "", str(recorded.sandbox.workdir), recorded.first.ref(), env=recorded.env)
    final = FORMAT.read(recorded.found)
    prompts = sum(u.prompt for u in (FIRST, SECOND, Usage(), THIRD))
    assert thread_total(turn) == {"input_tokens": prompts, "cached_input_tokens": final.cache_read,
                                  "cache_write_input_tokens": 0, "output_tokens": final.tokens_out}


async def test_a_read_during_a_tool_call_stops_before_it_and_the_next_read_has_the_interrupted_call(
        codex_sandbox: CodexSandbox, model_server: ModelServer) -> None:
    model_server.script.add(shell("touch started && sleep 600"))
    process = codex_sandbox.start(["exec", "--json", "--skip-git-repo-check", "wait for it"], input="")
    try:
        await until(lambda: (codex_sandbox.workdir / "started").exists())
        found = next(FORMAT.discover(codex_sandbox.env))
        during = FORMAT.read(found)  # the command runs: its output is still to come
        assert said(during) == [("user", "wait for it")]
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=HANG_S) == 1
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    after = FORMAT.read(found, during.position)
    [tool] = after.messages
    assert tool.meta is not None and tool.meta["tool"]["name"] == "exec_command" and after.problems == []
    assert "sleep 600" in json.dumps(tool.meta["tool"]["input"])
    # the CLI says it one of two ways: its output item alone ("aborted by user"), or also the
    # command's end (failed) when it writes that before it exits
    assert "aborted" in tool.meta["tool"]["output"] or tool.meta["tool"]["is_error"]


# ------------------------------------------------------------------------------ carried, placed, resumed


def test_a_carried_thread_is_placed_in_another_home_and_the_cli_resumes_it_there(
        recorded: Recorded, codex_sandbox: CodexSandbox, model_server: ModelServer) -> None:
    carried = FORMAT.carry(FORMAT.read(recorded.found).ref(), recorded.env)
    assert carried is not None and json.loads(json.dumps(carried)) == carried
    target = codex_sandbox
    model_server.script.add(say("A thread of this home's own."))
    assert target.prompt("hello").returncode == 0  # its index made and filled: a placed thread is not in it
    assert len(indexed(target.env)) == 1 and recorded.thread not in indexed(target.env)
    ref = FORMAT.place(carried, target.env, str(target.workdir), {str(recorded.sandbox.home): str(target.home)})
    assert ref["id"] == recorded.thread and ref["cwd"] == str(target.workdir)
    assert Path(ref["transcript"]).is_relative_to(home(target.env) / "sessions")
    placed = FORMAT.read(FORMAT.find(target.env, recorded.thread))
    assert said(placed) == said(FORMAT.read(recorded.found)) and placed.cwd == str(target.workdir)
    settings = [json.loads(line) for line in Path(ref["transcript"]).read_text().splitlines()]
    assert {r["payload"]["cwd"] for r in settings if r["type"] in ("session_meta", "turn_context")} == {
        str(target.workdir)}
    assert FORMAT.place(carried, target.env, str(target.workdir),
                        {str(recorded.sandbox.home): str(target.home)}) == {**ref, "already": True}

    model_server.script.add(say("Resumed elsewhere."))
    run = target.prompt("go on over here", resume=recorded.thread)
    assert run.returncode == 0, run.stderr
    sent = model_server.turn_requests()[-1]
    assert ["write hi into file", "and once more", "a third prompt"] == [
        t for t in sent.texts("user") if not t.startswith("<")][:3]
    assert "hi" in " ".join(sent.results().values()) and sent.texts("user")[-1] == "go on over here"
    assert said(FORMAT.read(FORMAT.find(target.env, recorded.thread), placed.position)) == [
        ("user", "go on over here"), ("assistant", "Resumed elsewhere.")]
    assert indexed(target.env)[recorded.thread] == (ref["transcript"], str(target.workdir))  # by the CLI itself

    other = dict(carried, rollouts=[dict(carried["rollouts"][0], text=carried["rollouts"][0]["text"].replace(
        "Third answer.", "Another answer."))])
    before = Path(ref["transcript"]).read_bytes()
    with pytest.raises(InvalidArgument, match="already at"):
        FORMAT.place(other, target.env, str(target.workdir), {})
    assert Path(ref["transcript"]).read_bytes() == before
    with pytest.raises(InvalidArgument, match="already at"):  # the CLI went on with it here: not the carried one
        FORMAT.place(carried, target.env, str(target.workdir), {str(recorded.sandbox.home): str(target.home)})


def test_a_carried_fork_takes_its_parent_along_and_resumes_in_another_home(
        recorded: Recorded, codex_sandbox: CodexSandbox, model_server: ModelServer) -> None:
    fork = FORMAT.find(recorded.env, recorded.fork)
    carried = FORMAT.carry({"cli": "codex", "id": fork.id, "cwd": fork.cwd, "transcript": fork.path}, recorded.env)
    assert carried is not None and [Path(r["path"]).name[-42:-6] for r in carried["rollouts"]] == [
        recorded.thread, recorded.fork]
    assert FORMAT.carry({"cli": "codex", "id": "01a00000-0000-7000-8000-000000000000"}, recorded.env) is None
    ref = FORMAT.place(carried, codex_sandbox.env, str(codex_sandbox.workdir), {})
    model_server.script.add(say("Fork resumed."))
    run = codex_sandbox.prompt("on with the fork", resume=ref["id"])
    assert run.returncode == 0, run.stderr
    users = model_server.turn_requests()[-1].texts("user")
    assert "write hi into file" in users and "a fork's prompt" in users and users[-1] == "on with the fork"


def test_a_written_history_is_a_thread_the_cli_resumes_with_the_earlier_turns(
        codex_sandbox: CodexSandbox, model_server: ModelServer) -> None:
    role, content, meta = tool_message("toolu_1", "Bash", {"command": "ls"}, "notes.txt\n", False)
    history = [Said("system", "a system prompt the runner gives itself"), Said("user", "list the files", ts=1_767_225_600.0),
               Said(role, content, meta, 1_767_225_601.0), Said("assistant", "There is notes.txt.", ts=1_767_225_602.0)]
    ref = FORMAT.write(history, codex_sandbox.env, str(codex_sandbox.workdir), "")
    assert ref is not None and ref["cwd"] == str(codex_sandbox.workdir)
    assert ref["id"][14] == "7"  # a UUIDv7, as the CLI makes its own
    back = FORMAT.read(FORMAT.find(codex_sandbox.env, ref["id"]))
    assert said(back) == [(s.role, s.content) for s in history[1:]] and [m.ts for m in back.messages] == [
        s.ts for s in history[1:]]

    model_server.script.add(say("Still notes.txt."))
    run = codex_sandbox.prompt("anything new?", resume=ref["id"])
    assert run.returncode == 0, run.stderr
    sent = model_server.turn_requests()[-1]
    assert [t for t in sent.texts("user") if not t.startswith("<")] == ["list the files", "anything new?"]
    assert "There is notes.txt." in sent.texts("assistant") and list(sent.results().values()) == ["notes.txt\n"]
    assert "a system prompt the runner gives itself" not in json.dumps(sent.body)


# ------------------------------------------------------------------------------ hand-made records


def rollout(path: Path, *records: dict[str, Any], meta: dict[str, Any] | None = None) -> Found:
    """A rollout file of ``records`` (each ``{"type": ..., "payload": ...}``) after a session_meta."""
    head = {"type": "session_meta", "payload": {"id": "t-1", "cwd": "/w", "timestamp": "2026-01-01T00:00:00.000Z",
                                                **(meta or {})}}
    lines = (json.dumps({"timestamp": "2026-01-01T00:00:01.000Z", **r}, ensure_ascii=False) for r in (head, *records))
    path.write_text("".join(line + "\n" for line in lines))  # non-ASCII raw, as the CLI writes it
    return Found("codex", "t-1", str(path), "/w", 0.0)


def message(role: str, text: str, **extra: Any) -> dict[str, Any]:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "response_item", "payload": {"type": "message", "role": role,
                                                 "content": [{"type": kind, "text": text}], **extra}}


def item(**payload: Any) -> dict[str, Any]:
    return {"type": "response_item", "payload": payload}


def event(**payload: Any) -> dict[str, Any]:
    return {"type": "event_msg", "payload": payload}


def count(total: int, last: int, window: int = 1000) -> dict[str, Any]:
    usage = {"input_tokens": last - 1, "cached_input_tokens": 0, "output_tokens": 1, "total_tokens": last}
    return event(type="token_count", info={"total_token_usage": {"total_tokens": total}, "last_token_usage": usage,
                                           "model_context_window": window})


def test_what_codex_injects_and_what_the_model_thinks_are_left_out(tmp_path: Path) -> None:
    harness = {"internal_chat_message_metadata_passthrough": {"content_item_metadata": [
        {"provenance": {"type": "harness"}}]}}
    found = rollout(tmp_path / "r.jsonl",
                    message("developer", "<permissions instructions>"),
                    message("user", "# AGENTS.md instructions for /w\n<INSTRUCTIONS>be brief</INSTRUCTIONS>"),
                    message("user", "<environment_context><cwd>/w</cwd></environment_context>"),
                    message("user", "context marked by its provenance", **harness),
                    {"type": "turn_context", "payload": {"cwd": "/w", "model": "gpt-x"}},
                    message("user", "the real question"),
                    item(type="reasoning", summary=[], encrypted_content="..."),
                    message("assistant", "the answer"))
    got = FORMAT.read(found)
    assert said(got) == [("user", "the real question"), ("assistant", "the answer")]
    assert (got.model, got.title) == ("gpt-x", "the real question")


def test_a_call_waits_for_its_output_and_a_turn_that_ended_without_it_closes_it(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    call = item(type="custom_tool_call", name="apply_patch", input="*** Begin Patch", call_id="c1")
    found = rollout(path, message("user", "patch it"), call, message("assistant", "patching"))
    first = FORMAT.read(found)
    assert said(first) == [("user", "patch it")]
    with path.open("a") as file:
        file.write(json.dumps(item(type="custom_tool_call_output", call_id="c1", output="Done!")) + "\n")
    second = FORMAT.read(found, first.position)
    assert [(m.role, (m.meta or {}).get("tool", {}).get("output")) for m in second.messages] == [
        ("tool", "Done!"), ("assistant", None)]
    assert second.messages[0].meta["tool"]["input"] == "*** Begin Patch"  # type: ignore[index]

    aborted = rollout(tmp_path / "a.jsonl", item(type="function_call", name="exec_command", arguments='{"cmd": "sleep 9"}',
                                                 call_id="c2"), event(type="turn_aborted", reason="interrupted"))
    [tool] = FORMAT.read(aborted).messages
    assert tool.meta is not None and tool.meta["tool"]["output"] is None and tool.meta["tool"]["is_error"]


def test_an_mcp_call_and_a_namespaced_call_are_named_as_the_runner_names_them(tmp_path: Path) -> None:
    call = item(type="function_call", name="add", namespace="mcp__calc", arguments='{"a": 2, "b": 3}', call_id="m1")
    done = event(type="item_completed", item={"type": "McpToolCall", "id": "m1", "server": "calc", "tool": "add",
                                              "arguments": {"a": 2, "b": 3}, "status": "completed",
                                              "result": {"content": [{"type": "text", "text": "5"}]}})
    output = item(type="function_call_output", call_id="m1", output="Wall time: 0.0022 seconds\nOutput:\n5")
    plain = item(type="function_call", name="add", namespace="mcp__calc", arguments="{}", call_id="m2")
    failed = item(type="function_call_output", call_id="m2", output={"content": "no such tool", "success": False})
    tools = [m.meta["tool"] for m in FORMAT.read(rollout(tmp_path / "r.jsonl", call, done, output, plain, failed)
                                               ).messages if m.meta]
    assert [(t["name"], t["input"], t["output"], t["is_error"]) for t in tools] == [
        ("mcp__calc__add", {"a": 2, "b": 3}, "5", False), ("mcp__calc__add", {}, "no such tool", True)]


def test_a_bad_line_is_said_once_even_when_it_ends_the_file(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    found = rollout(path, message("user", "hello"))
    with path.open("a") as file:
        file.write("[1, 2]\n")
    first = FORMAT.read(found)
    assert said(first) == [("user", "hello")] and first.position.offset == path.stat().st_size
    assert first.problems == [f"the rollout line at byte {path.stat().st_size - 7} is not a rollout record; skipped"]
    assert FORMAT.read(found, first.position).problems == []


def test_usage_is_summed_per_call_once_even_when_a_count_repeats(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    found = rollout(path, count(100, 100), count(100, 100), count(150, 50, window=2000))
    first = FORMAT.read(found)
    assert (first.tokens_in, first.tokens_out, first.context) == (148, 2, (50, 2000))  # two calls, not three
    with path.open("a") as file:
        file.write(json.dumps(count(150, 50)) + "\n" + json.dumps(count(170, 20)) + "\n")
    second = FORMAT.read(found, first.position)
    assert (second.tokens_in, second.tokens_out, second.context) == (19, 1, (20, 1000))
    assert Position.of(second.position.as_json()) == second.position


def test_a_line_separator_inside_a_string_survives_carry_and_place(tmp_path: Path) -> None:
    """The CLI writes U+2028 raw (measured): a rollout is split at newlines only."""
    thread = uuid7()
    old, new = {"CODEX_HOME": str(tmp_path / "old")}, {"CODEX_HOME": str(tmp_path / "new")}
    path = tmp_path / "old" / "sessions" / "2026" / "01" / "02" / f"rollout-2026-01-02T03-04-05-{thread}.jsonl"
    path.parent.mkdir(parents=True)
    rollout(path, message("user", "one\u2028line"), {"type": "turn_context", "payload": {"cwd": "/old/w"}},
            meta={"id": thread, "cwd": "/old/w"})
    carried = FORMAT.carry({"cli": "codex", "id": thread, "cwd": "/old/w"}, old)
    assert carried is not None and carried["rollouts"][0]["path"] == f"2026/01/02/{path.name}"
    ref = FORMAT.place(carried, new, "/new/w", {})
    placed = FORMAT.read(FORMAT.find(new, thread))
    assert said(placed) == [("user", "one\u2028line")] and placed.cwd == "/new/w" and ref["cwd"] == "/new/w"
    assert ref["transcript"] == str(tmp_path / "new" / "sessions" / carried["rollouts"][0]["path"])


def test_a_place_refuses_paths_outside_the_sessions_folder(tmp_path: Path) -> None:
    env = {"CODEX_HOME": str(tmp_path / "codex")}
    bad = {"id": "t", "cwd": "/w", "rollouts": [{"path": "../../etc/rollout-x.jsonl", "text": "{}\n"}]}
    with pytest.raises(InvalidArgument, match="not a dated sessions path"):
        FORMAT.place(bad, env, "/w", {})
    with pytest.raises(InvalidArgument, match="holds no rollout"):
        FORMAT.place({"rollouts": []}, env, "/w", {})
    assert not (tmp_path / "codex").exists()


def test_thread_ids_are_uuid7_stamped_with_the_time() -> None:
    before = int(time.time() * 1000)
    made = uuid7()
    assert made[14] == "7" and made[19] in "89ab"
    assert before <= int(made.replace("-", "")[:12], 16) <= int(time.time() * 1000)
