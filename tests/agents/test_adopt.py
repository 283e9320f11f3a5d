"""Adopting the agent CLIs' own sessions, following them as they grow, attaching to them:
against transcripts the real CLIs wrote, driven by the scripted model server.

Each test first uses the CLI directly, as a person would before Procession knew of it, then
adopts what the CLI keeps; what the CLI does afterwards (directly, or attached) must arrive
in the session exactly once, and a run of the session must resume the very same agent
session.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

import pyte
import pytest

from conftest import HANG_S, engine_on, until
from procession import State, Workspace
from procession.model.agents import CLIS
from procession.model.errors import InvalidArgument, NoneDone
from procession.present.results import describe
from support.agent_clis import AgentSandbox, ClaudeSandbox, OpencodeSandbox, session_env
from support.models import ModelServer, say, shell

TOOL = {"claude": "Bash", "codex": "exec_command", "opencode": "bash"}


def use_directly(agent: AgentSandbox, prompt: str, resume: str | None = None) -> str:
    """One turn of the CLI run by hand (not by Procession); its session id."""
    args, stdin = agent.headless(prompt, resume)
    run = agent.run(args, input=stdin)
    assert run.returncode == 0, run.stderr[-2000:]
    return agent.session_id(run)


async def give_env(ws: Workspace, sid: int, agent: AgentSandbox, monkeypatch: pytest.MonkeyPatch,
                   *more: AgentSandbox) -> None:
    """The sandboxes' settings as the session's environment (what reads like a secret passed;
    the first sandbox's HOME wins)."""
    settings, passed = session_env([agent, *more], monkeypatch.setenv)
    await ws.env(sid, set=settings, passed=passed)


def said(shown: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["role"], c["content"]) for c in shown["context"]]


async def test_adopt_a_session_follow_what_the_cli_adds_then_run_it(
        agent_sandbox: AgentSandbox, model_server: ModelServer, engine: Any, live: Workspace,
        monkeypatch: pytest.MonkeyPatch) -> None:
    agent, cli = agent_sandbox, agent_sandbox.name
    model_server.script.add(shell("echo adopted-hi", text="running it"), say("It printed adopted-hi."),
                            say("Second answer."))
    before = time.time()
    ident = use_directly(agent, "print adopted-hi")
    use_directly(agent, "and now?", resume=ident)

    adoption = await live.adopt(cli, ident, env=agent.env)
    [made] = adoption.results
    assert not made.already and made.agent == ident
    sid = made.sid
    shown = (await live.show(sid)).to_json()
    roles = [c["role"] for c in shown["context"]]
    assert roles[0] == "user" and shown["context"][0]["content"].endswith("print adopted-hi")
    tools = [c for c in shown["context"] if c["role"] == "tool"]
    assert [t["tool"]["name"] for t in tools] == [TOOL[cli]]
    assert "echo adopted-hi" in json.dumps(tools[0]["tool"]["input"]) and "adopted-hi" in tools[0]["tool"]["output"]
    assert ("assistant", "It printed adopted-hi.") in said(shown)
    assert said(shown)[-2:] == [("user", "and now?"), ("assistant", "Second answer.")]
    assert shown["agent_ref"]["id"] == ident and shown["agent_ref"]["cli"] == cli
    assert shown["runner"].startswith(f"{cli}:") and shown["cwd"] == str(agent.workdir)
    history = await live.history(sid)
    assert all(before - 1 <= m.created <= time.time() for m in history)  # the transcript's own times
    assert shown["adopted"] is True

    again = await live.adopt(cli, ident, env=agent.env)
    assert again.results[0].already and again.results[0].sid == sid
    every = await live.adopt(cli, every=True, env=agent.env)
    assert every.made == 0 and [r.sid for r in every.results] == [sid]

    # the person keeps using the CLI directly: the engine follows the transcript
    await live.send(sid, "queued while away")  # sent before the person used the CLI: the next run gives it
    length = (await live.info(sid)).length
    model_server.script.add(say("Third, outside."))
    use_directly(agent, "one more, by hand", resume=ident)
    await until(lambda: _length_over(live, sid, length))
    shown = (await live.show(sid)).to_json()
    assert said(shown)[-2:] == [("user", "one more, by hand"), ("assistant", "Third, outside.")]
    assert len(shown["context"]) == length + 2
    assert (await live.sync(sid)).messages == 0  # nothing twice

    # a run of the adopted session resumes the very same agent session, with what it saw
    await give_env(live, sid, agent, monkeypatch)
    model_server.script.add(say("Ran by Procession."))
    await live.send(sid, "now through procession")
    await live.activate(sid)
    await until(lambda: _ran(live, sid))
    last = model_server.requests[-1]
    seen = " ".join(last.texts())
    assert "one more, by hand" in seen and "now through procession" in seen and "queued while away" in seen
    assert seen.count("one more, by hand") == 1  # what the agent said outside is not given to it again
    shown = (await live.show(sid)).to_json()
    assert shown["agent_ref"]["id"] == ident
    assert said(shown)[-1] == ("assistant", "Ran by Procession.")
    assert (await live.sync(sid)).messages == 0  # what the run stored is not read again


async def _length_over(ws: Workspace, sid: int, length: int) -> bool:
    return (await ws.info(sid)).length > length


async def _ran(ws: Workspace, sid: int) -> bool:
    runs = [r for r in await ws.runs(sid) if r.outcome != "outside"]
    return bool(runs) and all(r.ended for r in runs) and (await ws.info(sid)).state is State.SLEEPING


async def test_a_cut_short_transcript_is_adopted_up_to_its_last_whole_record_and_garbage_refused(
        claude_sandbox: ClaudeSandbox, model_server: ModelServer, tmp_path: Path, live: Workspace) -> None:
    model_server.script.add(say("whole answer"))
    ident = use_directly(claude_sandbox, "a whole turn")
    [path] = (claude_sandbox.home / ".claude" / "projects").glob(f"*/{ident}.jsonl")
    records = path.read_bytes()
    with path.open("ab") as out:  # the CLI died mid-write
        out.write(b'{"type":"user","uuid":"cut-short","message":{"role":"user","content":"never fini')
    adoption = await live.adopt("claude", str(path), env=claude_sandbox.env)
    [made] = adoption.results
    shown = (await live.show(made.sid)).to_json()
    assert said(shown)[-1] == ("assistant", "whole answer") and "never fini" not in json.dumps(shown)

    junk = tmp_path / f"{'0' * 8}-0000-0000-0000-{'0' * 12}.jsonl"
    junk.write_bytes(b"this is not a transcript\n" * 3)
    before = len(await live.ps())
    with pytest.raises(InvalidArgument) as refused:
        await live.adopt("claude", str(junk), env=claude_sandbox.env)
    assert "\n" not in str(refused.value)
    assert len(await live.ps()) == before  # nothing half-made
    assert records  # the original was read, never written
    assert path.read_bytes().startswith(records)


def _onboarded(agent: ClaudeSandbox) -> None:
    """What a person's first interactive start of Claude Code leaves: onboarding done, the
    API key approved, the working folder trusted (else it asks, and checks the network)."""
    user = agent.home / ".claude.json"
    config = json.loads(user.read_text()) if user.exists() else {}
    config.update(hasCompletedOnboarding=True, customApiKeyResponses={"approved": ["sk-scripted"], "rejected": []})
    config.setdefault("projects", {})[str(agent.workdir)] = {"hasTrustDialogAccepted": True,
                                                            "hasCompletedProjectOnboarding": True}
    user.write_text(json.dumps(config))


class Terminal:
    """A process on a pseudo-terminal of ``size`` (columns, lines), read as a person watches
    it: what it writes is played on a terminal emulator (pyte), and the test reads the
    screen. Not the bytes: a full-screen CLI redraws by difference (Claude Code writes only
    the cells that changed since its last frame), so a word on the screen need not be in the
    stream whole."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path, size: tuple[int, int] = (120, 40)) -> None:
        columns, lines = size
        self.fd, child = pty.openpty()
        fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
        os.set_blocking(self.fd, False)
        env = {**env, "TERM": "xterm-256color", "COLUMNS": str(columns), "LINES": str(lines)}
        self.proc = subprocess.Popen(argv, stdin=child, stdout=child, stderr=child, env=env, cwd=cwd,
                                     start_new_session=True)
        os.close(child)
        self.screen = pyte.Screen(columns, lines)
        self._stream = pyte.ByteStream(self.screen)

    def shown(self) -> str:
        """The screen now, spaces aside (a CLI may move its cursor instead of printing them)."""
        return "".join("".join(self.screen.display).split())

    def read_until(self, words: str, timeout: float = HANG_S) -> None:
        """Wait until ``words`` show on the screen (or the process closes the terminal)."""
        wanted = "".join(words.split())
        deadline = time.monotonic() + timeout
        while wanted not in self.shown():
            if time.monotonic() > deadline:
                raise AssertionError(f"{words!r} never showed; the screen has:\n" + "\n".join(
                    line.rstrip() for line in self.screen.display))
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            if ready:
                try:
                    self._stream.feed(os.read(self.fd, 65536))
                except BlockingIOError:  # Linux may wake a pty's reader before its data is there
                    continue
                except OSError:  # EIO: the process closed the terminal
                    deadline = 0

    def type(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def exit_cli(self) -> None:
        """Leave Claude Code with ``/exit``, its Enter typed once the CLI shows the command
        as typed (its menu offers it): typed at once, it would arrive with the command and be
        read as part of a paste."""
        self.type("/exit")
        self.read_until("/exit Exit the CLI")
        self.type("\r")

    def close(self) -> int:
        """The process's exit code, once it exits (`HANG_S` is the hang guard). Called in a
        ``finally`` while the test's own failure propagates (it failed before telling the
        process to quit), it kills the process with its group at once (code -9), so that no CLI
        outlives the test and that failure is the one reported."""
        try:
            if sys.exc_info()[0] is None:
                return self.proc.wait(timeout=HANG_S)
        except subprocess.TimeoutExpired:
            pass
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
            os.close(self.fd)
        return self.proc.wait()


async def _ran_again_if_locked(ws: Workspace, sid: int, n: int = 1) -> None:
    """Wait for ``sid``'s ``n``-th run; one that opencode failed at its start with ``database is
    locked`` is activated again, as a person would. (opencode sets its busy timeout only after
    its first statement, so its start can fail while another process reads its database:
    nothing was done.)"""
    await until(lambda: _ran_n(ws, sid, n))
    for _ in range(3):
        runs = [r for r in await ws.runs(sid) if r.outcome != "outside"]  # the oldest first
        if runs[-1].outcome != "failed" or "database is locked" not in (runs[-1].error or ""):
            return
        await ws.activate(sid)
        await until(lambda: _ran_n(ws, sid, len(runs) + 1))


async def _adopted_to_open(live: Workspace, agent: ClaudeSandbox, model_server: ModelServer,
                           monkeypatch: pytest.MonkeyPatch, first: str, then: str) -> Any:
    """A Claude Code session made by hand (its answer ``first``), adopted, ready to be opened
    interactively (the next answer ``then``)."""
    model_server.script.add(say(first), say(then))
    ident = use_directly(agent, "start it by hand")
    _onboarded(agent)
    [made] = (await live.adopt("claude", ident, env=agent.env)).results
    await give_env(live, made.sid, agent, monkeypatch)
    return made


async def test_sync_of_several_sessions_one_refused_appends_nothing_for_any(
        claude_sandbox: ClaudeSandbox, model_server: ModelServer, live: Workspace, tmp_path: Path) -> None:
    """All or none, as every call on several sessions: the adopted session's new turn is not
    taken while another session given cannot be synced; given alone, it is."""
    model_server.script.add(say("First."), say("Typed outside."))
    ident = use_directly(claude_sandbox, "by hand")
    [made] = (await live.adopt("claude", ident, env=claude_sandbox.env)).results
    use_directly(claude_sandbox, "more, by hand", resume=ident)
    plain = (await live.spawn("plain", "dev", runner="builtin:echo", cwd=str(tmp_path))).sid
    length, journal = (await live.info(made.sid)).length, len(await live.journal(limit=1000))
    with pytest.raises(NoneDone) as refused:
        await live.sync_all([made.sid, plain])
    assert refused.value.refusals == [f"session {plain} has no agent session of its own to sync"]
    assert (await live.info(made.sid)).length == length and len(await live.journal(limit=1000)) == journal
    [synced] = await live.sync_all([made.sid, made.sid])
    assert synced.messages == 2 and (await live.info(made.sid)).length == length + 2


async def test_attach_opens_the_cli_on_the_session_and_brings_what_was_typed_back(
        claude_sandbox: ClaudeSandbox, model_server: ModelServer, db: Path, live: Workspace,
        monkeypatch: pytest.MonkeyPatch) -> None:
    agent = claude_sandbox
    made = await _adopted_to_open(live, agent, model_server, monkeypatch, "first, headless", "answered inside the cli")
    env = {**agent.env, "PROCESSION_DB": str(db)}
    term = Terminal([sys.executable, "-m", "procession", "attach", str(made.sid)], env, agent.workdir)
    try:
        term.read_until("first, headless")  # the CLI's own screen, resumed on the session
        assert (await live.info(made.sid)).state is State.SUSPENDED  # held: no run may start meanwhile
        term.type("typed by a person\r")
        term.read_until("answered inside the cli")
        term.exit_cli()
        term.read_until("synced from its agent's transcript")
    finally:
        code = term.close()
    assert code == 0
    shown = (await live.show(made.sid)).to_json()
    assert said(shown)[-2:] == [("user", "typed by a person"), ("assistant", "answered inside the cli")]  # no /exit
    assert shown["state"] == "sleeping"


async def test_attach_is_refused_with_the_reason_where_there_is_nothing_to_open(live: Workspace, tmp_path: Path) -> None:
    plain = (await live.spawn("plain", "dev", cwd=str(tmp_path))).sid
    with pytest.raises(InvalidArgument, match="not an agent CLI"):
        await live.attach(plain)
    fresh = (await live.spawn("fresh", "dev", runner="builtin:echo", cwd=str(tmp_path))).sid
    with pytest.raises(InvalidArgument):
        await live.sync(fresh)
    assert (await live.info(plain)).state is State.SLEEPING


async def test_migrate_between_agent_clis_gives_each_the_conversation_so_far(
        claude_sandbox: ClaudeSandbox, codex_sandbox: AgentSandbox, model_server: ModelServer, engine: Any,
        live: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    sid = (await live.spawn("mover", "dev", runner="claude:", cwd=str(claude_sandbox.workdir))).sid
    await give_env(live, sid, claude_sandbox, monkeypatch, codex_sandbox)
    model_server.script.add(say("Claude remembers the number 4417."))
    await live.send(sid, "remember 4417")
    await live.activate(sid)
    await until(lambda: _ran(live, sid))
    claude_ref = (await live.show(sid)).agent_ref
    assert claude_ref and claude_ref["cli"] == "claude"

    moved = await live.migrate(sid, "codex:")
    assert moved.agent and moved.agent["cli"] == "codex" and moved.left == claude_ref
    model_server.script.add(say("Codex sees 4417 too."))
    await live.send(sid, "which number?")
    await live.activate(sid)
    await until(lambda: _ran_n(live, sid, 2))
    seen = " ".join(model_server.requests[-1].texts())
    assert "remember 4417" in seen and "Claude remembers the number 4417." in seen and "which number?" in seen
    assert (await live.show(sid)).agent_ref["id"] == moved.agent["id"]  # Codex's own thread, resumed

    back = await live.migrate(sid, "claude:")
    assert back.agent and back.agent["cli"] == "claude" and back.agent["id"] != claude_ref["id"]
    model_server.script.add(say("Back in Claude."))
    await live.send(sid, "and now?")
    await live.activate(sid)
    await until(lambda: _ran_n(live, sid, 3))
    seen = " ".join(model_server.requests[-1].texts())
    assert all(words in seen for words in ("remember 4417", "Codex sees 4417 too.", "and now?"))
    journal = [e for e in await live.journal(sid) if e.call == "migrate"]
    assert sorted(e.outcome["left"]["cli"] for e in journal) == ["claude", "codex"]  # the old references stay there
    for cli, agent in (("claude", claude_sandbox), ("codex", codex_sandbox)):  # what it left is not adopted anew
        assert (await live.adopt(cli, every=True, env=agent.env)).made == 0


async def _ran_n(ws: Workspace, sid: int, n: int) -> bool:
    runs = [r for r in await ws.runs(sid) if r.outcome != "outside"]
    return len(runs) >= n and all(r.ended for r in runs) and (await ws.info(sid)).state is State.SLEEPING


def machine(monkeypatch: pytest.MonkeyPatch, agent: AgentSandbox) -> dict[str, Any]:
    """This process as a machine whose own configuration is ``agent``'s sandbox: its HOME and
    its CLI's state folders in the engine's environment (what the engine and the calls see of
    it), its CLI found there; the settings that point the CLI at the model server (the same on
    every machine here) returned, for the session to store, its keys passed."""
    settings, passed = session_env([agent], monkeypatch.setenv, machine=True)
    monkeypatch.setenv(f"PROCESSION_{agent.name.upper()}", settings.pop(f"PROCESSION_{agent.name.upper()}"))
    return {"env": settings, "passed": passed}


async def test_save_carries_the_agents_own_session_and_load_map_resumes_it_on_another_machine(
        agent_sandbox: AgentSandbox, model_server: ModelServer, tmp_path: Path, db: Path, live: Workspace,
        monkeypatch: pytest.MonkeyPatch) -> None:
    here = agent_sandbox
    there = type(here)(here.cli, model_server, tmp_path / "other-machine")
    sid = (await live.spawn("traveller", "dev", runner=f"{here.name}:"
                            + (here.MODEL if isinstance(here, OpencodeSandbox) else ""), cwd=str(here.workdir),
                            **machine(monkeypatch, here))).sid
    model_server.script.add(say("I will remember the word heron."))
    async with engine_on(db, slots=1):
        await live.send(sid, "remember the word heron")
        await live.activate(sid)
        await until(lambda: _ran(live, sid))
    snap = tmp_path / "traveller.json"
    saved = await live.save(sid, file=str(snap))
    assert b"agent_session" in snap.read_bytes() and saved.sha256

    machine(monkeypatch, there)  # another HOME, another folder, the same snapshot
    other = tmp_path / "other.db"
    ws = await Workspace.open(other)
    try:
        loaded = await ws.load(str(snap), mapping={str(here.workdir): str(there.workdir)})
        shown = (await ws.show(loaded.sid)).to_json()
        assert shown["cwd"] == str(there.workdir) and not shown["agent_ref"].get("fork")
        assert any("placed where" in n.text for n in loaded.notes)
        assert (await ws.info(loaded.sid)).armed is False  # still disarmed until approved
        await ws.approve(loaded.sid)
        model_server.script.add(say("The word was heron."))
        async with engine_on(other, slots=1):
            await ws.send(loaded.sid, "which word?")
            await ws.activate(loaded.sid)
            await until(lambda: _ran(ws, loaded.sid))
        seen = " ".join(model_server.requests[-1].texts())
        assert "remember the word heron" in seen and "I will remember the word heron." in seen and "which word?" in seen
        assert (await ws.show(loaded.sid)).agent_ref["id"] == shown["agent_ref"]["id"]  # resumed, not forked
    finally:
        await ws.close()



async def test_a_snapshot_loaded_where_its_agent_session_is_already_forks_it_on_its_first_run(
        agent_sandbox: AgentSandbox, model_server: ModelServer, tmp_path: Path, db: Path, live: Workspace,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Saved and loaded on the same machine (a copy, twice): each copy's first run makes a CLI
    session of its own from the carried one; neither writes into its source's. Each copy's is
    placed in its own state folder: loaded in another workspace it resumes its own copy there,
    and a snapshot its source went on from still forks what it carries."""
    agent = agent_sandbox
    sid = (await live.spawn("source", "dev", runner=f"{agent.name}:"
                            + (agent.MODEL if isinstance(agent, OpencodeSandbox) else ""), cwd=str(agent.workdir),
                            **machine(monkeypatch, agent))).sid
    model_server.script.add(say("I will remember the word heron."), say("Heron, copy one."), say("Heron, copy two."))
    async with engine_on(db, slots=1):
        await live.send(sid, "remember the word heron")
        await live.activate(sid)
        await until(lambda: _ran(live, sid))
        own = (await live.show(sid)).agent_ref["id"]
        snap = tmp_path / "source.json"
        await live.save(sid, file=str(snap))
        copies = []
        for n in ("one", "two"):
            loaded = await live.load(str(snap))
            assert (await live.show(loaded.sid)).agent_ref["fork"]
            assert any(f"is session {sid}'s: its first run makes one of its own" in note.text for note in loaded.notes)
            await live.approve(loaded.sid)
            await live.send(loaded.sid, f"which word, copy {n}?")
            asked = len(model_server.requests)
            await live.activate(loaded.sid)
            await _ran_again_if_locked(live, loaded.sid)
            seen = [" ".join(r.texts()) for r in model_server.requests[asked:]]  # opencode also asks for a title
            assert any("remember the word heron" in s and f"which word, copy {n}?" in s for s in seen)
            copies.append((await live.show(loaded.sid)).agent_ref)
    assert len({own, copies[0]["id"], copies[1]["id"]}) == 3 and not any(c.get("fork") for c in copies)
    other = await Workspace.open(tmp_path / "another.db")  # another workspace, the same machine
    try:
        elsewhere = await other.load(str(snap))
        assert not (await other.show(elsewhere.sid)).agent_ref.get("fork")  # its own copy, nobody else's there
        assert any("is placed where" in n.text for n in elsewhere.notes)
    finally:
        await other.close()
    assert (await live.sync(sid)).messages == 0  # its own session has nothing of the copies' turns
    assert said((await live.show(sid)).to_json())[-1] == ("assistant", "I will remember the word heron.")

    model_server.script.add(say("Still heron."), say("Heron, from the old snapshot."))
    async with engine_on(db, slots=1):  # the source goes on: the snapshot is behind its CLI session now
        await live.send(sid, "and now?")
        await live.activate(sid)
        await _ran_again_if_locked(live, sid, 2)
        stale = await live.load(str(snap))
        assert (await live.show(stale.sid)).agent_ref["fork"]  # the snapshot's own history, in its own folder
        assert any(f"is session {sid}'s: its first run makes one of its own" in note.text for note in stale.notes)
        await live.approve(stale.sid)
        await live.send(stale.sid, "which word, from the old snapshot?")
        asked = len(model_server.requests)
        await live.activate(stale.sid)
        await _ran_again_if_locked(live, stale.sid)
    seen = [" ".join(r.texts()) for r in model_server.requests[asked:]]
    assert any("remember the word heron" in s and "which word, from the old snapshot?" in s and "and now?" not in s
               for s in seen)
    assert (await live.show(stale.sid)).agent_ref["id"] not in {own, copies[0]["id"], copies[1]["id"]}


async def test_the_monitor_and_ps_show_a_session_its_cli_runs_outside_procession(
        claude_sandbox: ClaudeSandbox, model_server: ModelServer, live: Workspace, db: Path) -> None:
    from procession.present.cells import BY_KEY
    from procession.tui.feed import Feed

    agent = claude_sandbox
    model_server.script.add(say("made by hand"))
    ident = use_directly(agent, "a session of its own")
    _onboarded(agent)
    [made] = (await live.adopt("claude", ident, env=agent.env)).results
    feed = Feed(live, time.time)
    await feed.load_first()
    assert await feed.look_outside() == [] and feed.sessions[made.sid].outside is None
    term = Terminal([str(agent.cli.exe), "--resume", ident], agent.env, agent.workdir)
    try:
        term.read_until("made by hand")
        assert await feed.look_outside() == [made.sid]
        await asyncio.sleep(0.5)
        await feed.look_outside()  # the second look has its CPU
        row = feed.sessions[made.sid]
        assert row.outside == term.proc.pid and row.rss and row.rss > 1_000_000 and row.cpu is not None
        name = "".join(text for text, _ in BY_KEY["name"].cell(row, time.time()))
        assert f"pid {term.proc.pid}" in name and "[adopted]" in name
        ps = subprocess.run([sys.executable, "-m", "procession", "--db", str(db), "ps"], capture_output=True,
                            text=True, check=True, env=agent.env).stdout
        assert f"\nsession {made.sid}: open in its agent's own CLI (pid {term.proc.pid})\n" in ps
    finally:
        term.proc.terminate()
        term.close()
    assert await feed.look_outside() == [made.sid] and feed.sessions[made.sid].outside is None


async def test_detach_says_what_the_cli_added_though_an_engine_following_it_synced_it_first(
        claude_sandbox: ClaudeSandbox, model_server: ModelServer, live: Workspace,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine follows an agent session's transcript and may sync what was typed in the
    attached CLI before ``detach`` does (the monitor's own engine, once the CLI exits: a race
    the monitor lost one time in many, saying "in sync" for a turn it had just brought back):
    ``detach`` says what the CLI added while it was open, whoever appended it."""
    agent = claude_sandbox
    made = await _adopted_to_open(live, agent, model_server, monkeypatch, "made by hand", "answered in the cli")
    attached = await live.attach(made.sid)
    term = Terminal([str(agent.cli.exe), "--resume", attached.agent], attached.env, agent.workdir)
    try:
        term.read_until("made by hand")
        term.type("typed while attached\r")
        term.read_until("answered in the cli")
        term.exit_cli()
    finally:
        term.close()
    assert (await live.sync(made.sid)).messages == 2  # the engine's follower, first
    synced = await live.detach(attached)
    assert synced.messages == 2 and describe(synced) == f"{made.sid}: 2 messages synced from its agent's transcript"
    assert (await live.info(made.sid)).state is State.SLEEPING


async def test_resume_of_an_attached_session_waits_for_its_cli_to_close(
        claude_sandbox: ClaudeSandbox, model_server: ModelServer, live: Workspace,
        monkeypatch: pytest.MonkeyPatch) -> None:
    agent = claude_sandbox
    made = await _adopted_to_open(live, agent, model_server, monkeypatch, "made by hand", "answered in the cli")
    attached = await live.attach(made.sid)  # what attach does before it starts the CLI, with its environment
    term = Terminal([str(agent.cli.exe), "--resume", attached.agent], attached.env, agent.workdir)
    try:
        term.read_until("made by hand")
        with pytest.raises(InvalidArgument, match=rf"session {made.sid} is attached: its Claude Code is open"
                                                  rf" \(pid {term.proc.pid}\)"):
            await live.resume(made.sid)
        assert (await live.info(made.sid)).state is State.SUSPENDED
        term.type("typed before the terminal closed\r")
        term.read_until("answered in the cli")
    finally:
        term.proc.terminate()  # its terminal closed: no detach comes
        term.close()
    assert (await live.resume(made.sid)).state is State.SLEEPING
    shown = (await live.show(made.sid)).to_json()  # what was typed there synced first
    assert said(shown)[-2:] == [("user", "typed before the terminal closed"), ("assistant", "answered in the cli")]


async def test_fork_at_n_of_an_adopted_claude_session_cuts_the_clis_own_session_there(
        claude_sandbox: ClaudeSandbox, model_server: ModelServer, engine: Any, live: Workspace,
        monkeypatch: pytest.MonkeyPatch) -> None:
    model_server.script.add(say("First answer."), say("Second answer."), say("Another second answer."))
    ident = use_directly(claude_sandbox, "question one")
    use_directly(claude_sandbox, "question two", resume=ident)
    [made] = (await live.adopt("claude", ident, env=claude_sandbox.env)).results
    assert [m.content for m in await live.history(made.sid)][:2] == ["question one", "First answer."]
    child = (await live.fork(made.sid, "earlier", at=2)).sid
    await give_env(live, child, claude_sandbox, monkeypatch)
    await live.send(child, "question two, asked otherwise")
    await live.activate(child)
    await until(lambda: _ran(live, child))
    said = [i.text for i in model_server.turn_requests()[-1].items() if i.kind == "text"
            and i.role in ("user", "assistant")]
    assert "First answer." in said and "question two, asked otherwise" in said[-1]
    assert not any(t == "question two" or "Second answer." in t for t in said)
    child_ref = (await live.show(child)).agent_ref
    assert child_ref and child_ref["id"] != ident  # its own session; the adopted one is untouched
    assert (await live.sync(made.sid)).messages == 0


async def test_a_transcript_rewound_in_claude_is_not_appended_the_session_keeps_its_own(
        claude_sandbox: ClaudeSandbox, model_server: ModelServer, engine: Any, live: Workspace,
        monkeypatch: pytest.MonkeyPatch) -> None:
    model_server.script.add(say("First answer."), say("Second answer."), say("Rewound answer."),
                            say("Going on from the second."))
    ident = use_directly(claude_sandbox, "question one")
    use_directly(claude_sandbox, "question two", resume=ident)
    [made] = (await live.adopt("claude", ident, env=claude_sandbox.env)).results
    await give_env(live, made.sid, claude_sandbox, monkeypatch)  # its CLI's home, where the sync writes
    first = (await live.history(made.sid))[1]
    assert first.content == "First answer."
    args, _ = claude_sandbox.headless("question two, otherwise", ident)
    run = claude_sandbox.run([*args, "--resume-session-at", first.meta["agent_uuid"]])
    assert run.returncode == 0, run.stderr[-2000:]
    await until(lambda: _moved_off(live, made.sid, ident))  # the engine saw it, appended nothing
    assert [m.content for m in await live.history(made.sid)][-1] == "Second answer."
    again = await live.adopt("claude", ident, env=claude_sandbox.env)  # the new branch: a session of its own
    [branch] = again.results
    assert not branch.already and [m.content for m in await live.history(branch.sid)][-1] == "Rewound answer."
    await live.send(made.sid, "go on")
    await live.activate(made.sid)
    await until(lambda: _ran(live, made.sid))
    runs = [r for r in await live.runs(made.sid) if r.outcome != "outside"]
    assert runs[-1].outcome == "ok", runs[-1].error
    said = " ".join(model_server.turn_requests()[-1].texts())
    assert "Second answer." in said and "Rewound answer." not in said


async def _moved_off(ws: Workspace, sid: int, ident: str) -> bool:
    ref = (await ws.show(sid)).agent_ref
    return bool(ref and ref["id"] != ident)


async def test_o_in_the_monitor_opens_the_cli_and_comes_back_to_the_table(
        claude_sandbox: ClaudeSandbox, model_server: ModelServer, db: Path, live: Workspace,
        monkeypatch: pytest.MonkeyPatch) -> None:
    agent = claude_sandbox
    made = await _adopted_to_open(live, agent, model_server, monkeypatch, "said before the monitor",
                                  "answered in the cli, from the monitor")
    term = Terminal([sys.executable, "-m", "procession", "--db", str(db)], agent.env, agent.workdir, size=(160, 45))
    try:
        term.read_until("[adopted]")
        term.type("o")
        term.read_until("said before the monitor")  # the CLI's own screen, over the monitor's
        term.type("typed via the monitor\r")
        term.read_until("answered in the cli, from the monitor")
        term.exit_cli()
        term.read_until("messages synced from its agent's transcript")  # the monitor again, saying so
        term.type("q")
    finally:
        code = term.close()
    assert code == 0
    shown = (await live.show(made.sid)).to_json()
    assert said(shown)[-2:] == [("user", "typed via the monitor"),
                                        ("assistant", "answered in the cli, from the monitor")]


async def test_an_adopted_claude_session_has_its_models_window_before_any_run(
        claude_sandbox: ClaudeSandbox, model_server: ModelServer, live: Workspace) -> None:
    """It showed 128,000 (a window of no CLI's) until its first run."""
    model_server.script.add(say("Hello."))
    ident = use_directly(claude_sandbox, "hi")
    [made] = (await live.adopt("claude", ident, env=claude_sandbox.env)).results
    info = await live.info(made.sid)
    assert info.runner.startswith("claude:") and info.context_window == CLIS["claude"].window(info.runner.split(":", 1)[1])
    assert info.context_window in (1_000_000, 200_000)
