"""Steps that run long and say little cost their engine nothing while they say nothing: its
leader's exit is learnt from its pidfd (no poll, no thread per child), what it says is flushed
when it says it (no timer), and nothing it said is lost for that (issue 38). Real engines,
real processes, real lock contention."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import engine_on, until
from procession import Workspace
from procession.engine import reaper
from procession.engine.running import FLUSH_S, LiveRun
from procession.engine.runners.agents.base import Conversation
from procession.engine.runners.process import ProcessStep
from procession.model import runner_spec
from procession.engine.runners.process import LINGER_S
from procession.store import sqlite as store_sqlite
from support.runs import finished, running_pid
from support.wait import slow_factor
from test_trust import hold_the_write_lock

SAID = 'echo \'{"type": "message", "content": "%s"}\''


async def test_a_step_whose_leader_exited_is_over_within_its_linger_though_a_grandchild_holds_its_pipes(
        db: Path, live: Workspace, tmp_path: Path) -> None:
    stamp = tmp_path / "leader-exits"
    step = f"command:setsid sleep 300 & date +%s.%N > {stamp}"  # the grandchild holds stdout and stderr
    sid = (await live.spawn("leaves one behind", "a", runner=step, cwd=str(tmp_path))).sid
    async with engine_on(db):
        await live.activate(sid)
        run = await until(lambda: finished(live, sid))
    assert run.outcome == "ok", run.error
    assert run.ended - float(stamp.read_text()) < LINGER_S + 1.0 * slow_factor()


SERVER = """
import os, signal, subprocess, sys, time
saver = subprocess.Popen(["/bin/sh", "-c", 'trap "sleep 0.5; echo saved > $0; exit 0" TERM; while :; do sleep 0.05; done',
                          sys.argv[1]], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(0.3)  # the saver's trap is set
sys.stdin.read()  # its conversation: until its stdin is closed
saver.send_signal(signal.SIGTERM)  # its session saved by the child it started, as an SDK does
if sys.argv[2] == "closes first":  # its output closed as it ends, its exit a moment behind
    os.close(1)
    os.close(2)
    time.sleep(0.3)
os._exit(0)  # and gone at once, the child still saving
"""


@pytest.mark.parametrize("ending", ["exits", "closes first"])
async def test_what_an_agent_server_left_saving_its_session_ends_by_itself_within_its_linger(
        tmp_path: Path, ending: str) -> None:
    """Either way its output ends with the server: the engine waits for the server's exit, then
    for what it left, before killing anything."""
    saved = tmp_path / "saved"
    talk = Conversation()
    talk.terminate, talk.linger = True, 5.0
    tracker = reaper.tracker("test-engine", "test-" + tmp_path.name, run=tmp_path.name)
    step = await ProcessStep.start(runner_spec.parse("command:x"), str(tmp_path), dict(os.environ), tracker,
                                   command=[sys.executable, "-c", SERVER, str(saved), ending], talk=talk)
    try:
        await asyncio.sleep(0.5)
        talk.hang_up()
        result = await step.run(None, lambda stream, chunk: None)
    finally:
        tracker.kill()
        tracker.close()
    assert result.exit_code == 0, result.stderr
    assert saved.read_text() == "saved\n"  # killed with its server, it would have saved nothing
    assert not tracker.living()


async def test_a_silent_step_is_never_flushed_and_one_that_speaks_is_flushed_at_once(
        db: Path, live: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    flushes: dict[int, list[float]] = defaultdict(list)
    flush = LiveRun.flush

    async def counted(self: LiveRun) -> None:
        flushes[self.sid].append(time.time())
        await flush(self)

    monkeypatch.setattr(LiveRun, "flush", counted)
    silent = (await live.spawn("silent", "a", runner="command:sleep 600", cwd=str(tmp_path))).sid
    go = tmp_path / "go"
    step = f"command:while [ ! -e go ]; do sleep 0.02; done; {SAID % 'hello'}; sleep 600"
    speaker = (await live.spawn("speaker", "a", runner=step, cwd=str(tmp_path))).sid
    async with engine_on(db):
        for sid in (silent, speaker):
            await live.activate(sid)
            await until(lambda: running_pid(live, sid))
        assert not [t.name for t in threading.enumerate() if "waitpid" in t.name]  # no thread per child
        await asyncio.sleep(5 * FLUSH_S)  # a timer would have flushed each five times by now
        go.touch()
        await until(lambda: _said(live, speaker))
        await asyncio.sleep(5 * FLUSH_S)
        _, chunks = await live.run_log(speaker)
        for sid in (silent, speaker):
            assert await running_pid(live, sid)
        assert not flushes[silent]  # (each is flushed once more as its run ends, when the engine stops)
        assert len(flushes[speaker]) == 1 and 0 <= flushes[speaker][0] - chunks[0].ts < FLUSH_S


async def test_what_a_busy_workspace_refused_is_stored_while_the_step_goes_on_in_silence(
        db: Path, live: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_sqlite, "BUSY_TIMEOUT_MS", 200)  # the engine's flush gives up fast...
    go = tmp_path / "go"
    step = f"command:while [ ! -e go ]; do sleep 0.02; done; {SAID % 'said while locked'}; sleep 600"
    sid = (await live.spawn("s", "a", runner=step, cwd=str(tmp_path))).sid
    async with engine_on(db):
        await live.activate(sid)
        await until(lambda: running_pid(live, sid))
        holder = hold_the_write_lock(db, 3 * FLUSH_S + 0.2)  # ...and is refused, more than once
        go.touch()
        await asyncio.to_thread(holder.join)
        await until(lambda: _said(live, sid))  # tried again with nothing new said
        assert await running_pid(live, sid)
    assert [m.content for m in await live.history(sid)] == ["said while locked"]


async def _said(ws: Workspace, sid: int) -> bool:
    return bool(await ws.history(sid))
