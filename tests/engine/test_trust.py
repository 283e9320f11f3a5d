"""An engine to trust with real work: nothing lost, nothing escapes, nothing hidden.

Each test is one defect found by trying the engine as a user would and by attacking it: real
processes, real signals, real lock contention from a second connection.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import HANG_S, engine_on, until
from procession import EngineBusy, State, Workspace
from procession.engine import Engine
from procession.store import sqlite as store_sqlite
from support.runs import PID_NS, alive, finished, pid_in, proc_state, running_pid, start_engine_process, state_of

TRACKERS = ["cgroup", "marker"]


def cgroup_possible() -> bool:
    from procession.engine.reaper import CgroupTracker

    made = CgroupTracker.make("probe", "probe")
    if made is None:
        return False
    made.close()
    return True


@pytest.fixture(params=TRACKERS)
async def tracked(request, db: Path, live: Workspace):
    """An engine following processes by a cgroup, then by the environment marker."""
    if request.param == "cgroup" and not cgroup_possible():
        pytest.skip("no cgroup v2 can be made on this machine")
    eng = Engine(db, slots=2, grace=0.3, tracker=request.param)
    await eng.start()
    stop = asyncio.Event()
    task = asyncio.ensure_future(eng.serve(stop))
    yield eng
    stop.set()
    await task


# ---------------------------------------------------------------- nothing lost


def hold_the_write_lock(path: Path, seconds: float) -> threading.Thread:
    """Another connection holding BEGIN IMMEDIATE: every writer waits."""
    ready = threading.Event()

    def hold() -> None:
        con = sqlite3.connect(path, isolation_level=None)
        con.execute("BEGIN IMMEDIATE")
        ready.set()
        time.sleep(seconds)
        con.execute("ROLLBACK")
        con.close()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    ready.wait()
    return thread


async def test_a_finished_step_is_recorded_however_long_the_workspace_is_held(db, live, monkeypatch):
    monkeypatch.setattr(store_sqlite, "BUSY_TIMEOUT_MS", 200)  # the engine's connection gives up fast...
    eng = Engine(db, grace=0.3)
    await eng.start()
    stop = asyncio.Event()
    task = asyncio.ensure_future(eng.serve(stop))
    try:
        sid = (await live.spawn("quick", "a", runner="command:sleep 0.5; echo 'the answer'")).sid
        await live.activate(sid)
        await until(lambda: running_pid(live, sid))
        holder = hold_the_write_lock(db, 3.0)  # ...and the step ends while another holds the lock for 3 s
        await asyncio.to_thread(holder.join)
        run = await until(lambda: finished(live, sid))
        assert run.outcome == "ok", run.error
        assert [m.content for m in await live.history(sid)] == ["the answer"]
    finally:
        stop.set()
        await task


async def test_an_engine_started_while_the_workspace_is_locked_waits_instead_of_giving_up(db, live, monkeypatch):
    monkeypatch.setattr(store_sqlite, "BUSY_TIMEOUT_MS", 200)  # each try gives up fast...
    holder = hold_the_write_lock(db, 1.5)  # ...and the lock is held for many of them
    eng = Engine(db, grace=0.3)
    await eng.start()  # returns once it got through
    assert not holder.is_alive()
    try:
        assert (await live.activity())["engine"]["pid"] == os.getpid()
    finally:
        stop = asyncio.Event()
        stop.set()
        await eng.serve(stop)


async def test_what_a_step_said_while_its_flush_waited_on_a_lock_is_kept_when_the_run_ends(db, live, tmp_path):
    go = tmp_path / "go"
    step = ("command:while [ ! -e go ]; do sleep 0.02; done;"
            " echo '{\"type\": \"message\", \"content\": \"said while locked\"}'; sleep 0.5")
    sid = (await live.spawn("s", "a", runner=step, cwd=str(tmp_path))).sid
    eng = Engine(db, grace=0.3)
    await eng.start()
    stop = asyncio.Event()
    task = asyncio.ensure_future(eng.serve(stop))
    try:
        await live.activate(sid)
        await until(lambda: running_pid(live, sid))
        holder = hold_the_write_lock(db, 2.5)  # the step's flush will wait for it...
        go.touch()  # ...with the message taken from the step, while the step ends
        await asyncio.to_thread(holder.join)
        run = await until(lambda: finished(live, sid))
        assert run.outcome == "ok", run.error
        assert [m.content for m in await live.history(sid)] == ["said while locked"]
    finally:
        stop.set()
        await task


async def test_a_busy_engine_is_not_taken_over_and_its_step_lives(db, live):
    sid = (await live.spawn("long", "a", runner="builtin:sleep:60")).sid
    first = start_engine_process(db)
    try:
        await until(lambda: live.activity())
        await until(lambda: _engine_pid(live))
        await live.activate(sid)
        pid = await until(lambda: running_pid(live, sid))
        first.send_signal(19)  # SIGSTOP: its loop and its heartbeat stand still, as a stalled engine's would
        con = sqlite3.connect(db, isolation_level=None)
        con.execute("UPDATE engines SET heartbeat = heartbeat - 3600")  # as if it had not beaten for an hour
        con.close()
        second = Engine(db)
        with pytest.raises(EngineBusy, match=f"pid {first.pid}"):
            await second.start()
        first.send_signal(18)  # SIGCONT
        assert alive(pid) and await state_of(live, sid) is State.RUNNING
    finally:
        first.terminate()
        first.wait(timeout=HANG_S)


def _move(db: Path) -> str:
    db.rename(db.with_name("elsewhere.db"))
    return "is gone"


def _replace(db: Path) -> str:
    copy = db.with_name("copy.db")
    sqlite3.connect(copy).close()
    copy.replace(db)
    return "is another file now"


def _drop_wal(db: Path) -> str:
    Path(f"{db}-wal").unlink()
    return "-wal was deleted or replaced"


@pytest.mark.parametrize("change", [_move, _replace, _drop_wal], ids=["moved", "replaced", "wal-deleted"])
async def test_an_engine_whose_workspace_file_is_moved_replaced_or_loses_its_wal_stops_and_says_why(
        db, live, tmp_path, change):
    pidfile = tmp_path / "step.pid"
    sid = (await live.spawn("long", "a", runner=f"command:echo $$ {PID_NS} > {pidfile}; exec sleep 60")).sid
    engine = start_engine_process(db)
    try:
        await until(lambda: _engine_pid(live))
        await live.activate(sid)
        pid = await until(lambda: pid_in(pidfile))
        said = change(db)
        rc = await asyncio.to_thread(engine.wait, 20)
        stderr = engine.stderr.read() if engine.stderr else ""
        assert rc == 1, stderr
        last = stderr.strip().splitlines()[-1]
        assert last.startswith("procession: error: the engine stopped: ") and said in last, stderr
        assert "Traceback" not in stderr
        await until(lambda: not alive(pid))  # its step did not go on alone
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait()


async def _engine_pid(ws: Workspace) -> int | None:
    engine = (await ws.activity())["engine"]
    return engine["pid"] if engine else None


# ---------------------------------------------------------------- nothing escapes


async def test_a_step_whose_leader_left_a_grandchild_is_over_and_the_grandchild_gone(tracked, live, tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    step = (f"command:setsid sh -c 'echo $$ {PID_NS} > {pidfile}; exec sleep 300' &"
            f" until [ -s {pidfile} ]; do sleep 0.01; done; echo started")
    sid = (await live.spawn("leaves one behind", "a", runner=step)).sid
    await live.activate(sid)
    run = await until(lambda: finished(live, sid))
    assert run.outcome == "ok" and run.ended - run.started < 5  # not held open by the grandchild's pipes
    grandchild = await until(lambda: pid_in(pidfile))
    await until(lambda: not alive(grandchild))


async def test_an_orphan_that_cleared_its_environment_does_not_outlive_its_run(tracked, live, tmp_path):
    pidfile = tmp_path / "orphan.pid"
    # no marker to find it by, in a session of its own, and its parent gone at once
    step = (f"command:{sys.executable} -c \"import os, subprocess; p = subprocess.Popen(['/bin/sleep', '300'],"
            f" env={{}}, start_new_session=True); open('{pidfile}', 'w').write(str(p.pid) + ' '"
            f" + os.readlink('/proc/self/ns/pid'))\"")
    sid = (await live.spawn("clears its env", "a", runner=step)).sid
    await live.activate(sid)
    run = await until(lambda: finished(live, sid))
    assert run.outcome == "ok", run.error
    orphan = await until(lambda: pid_in(pidfile))
    await until(lambda: not alive(orphan))


async def test_suspend_stops_and_cancel_kills_every_process_of_the_tree(tracked, live, tmp_path):
    pidfile = tmp_path / "tool.pid"
    # a tool in a session of its own, as agent CLIs start them; and one that double-forks
    step = (f"command:setsid sh -c 'echo $$ {PID_NS} > {pidfile}; exec sleep 300' & "
            f"( ( sleep 300 & ) ) ; echo started; sleep 300")
    sid = (await live.spawn("tree", "a", runner=step)).sid
    await live.activate(sid)
    leader = await until(lambda: running_pid(live, sid))
    tool = await until(lambda: pid_in(pidfile))
    tree = await until(lambda: _tree(tracked, sid) if len(_tree(tracked, sid)) >= 4 else None)
    assert leader in tree and tool in tree
    await live.suspend(sid)
    await until(lambda: all(proc_state(p) == "T" for p in tree))
    await live.resume(sid)
    await until(lambda: all(proc_state(p) in ("S", "R") for p in tree))
    await live.cancel(sid)
    await until(lambda: not any(alive(p) for p in tree))
    assert (await until(lambda: finished(live, sid))).outcome == "cancelled"


def _tree(engine: Engine, sid: int) -> set[int]:
    live_run = engine.live.get(sid)
    return live_run.tracker.members() if live_run and live_run.tracker else set()


async def test_an_orphan_grandchild_of_a_dead_engine_is_killed_by_the_next(db, live, tmp_path):
    """Unconfined (a confined run's world ends with its engine: the test below), a tool in a
    session of its own outlives a SIGKILLed engine; the next engine finds it by its tracker."""
    pidfile = tmp_path / "tool.pid"
    step = f"command:setsid sh -c 'echo $$ {PID_NS} > {pidfile}; exec sleep 300' & sleep 300"
    sid = (await live.spawn("orphan maker", "a", runner=step, confine="off")).sid
    first = start_engine_process(db)
    try:
        await until(lambda: _engine_pid(live))
        await live.activate(sid)
        tool = await until(lambda: pid_in(pidfile))
        first.kill()
        first.wait()
        assert alive(tool)  # escaped the dead engine's group: only the next engine can find it
        second = start_engine_process(db)
        try:
            await until(lambda: not alive(tool))
            assert (await until(lambda: finished(live, sid))).outcome == "lost"
        finally:
            second.terminate()
            second.communicate(timeout=HANG_S)
    finally:
        if first.poll() is None:
            first.kill()


async def test_a_confined_run_ends_with_the_engine_that_started_it(db, live, tmp_path):
    """Its launcher dies with the engine (a parent-death signal), and its world with it: no
    process of the run goes on alone; the next engine records the run lost."""
    pidfile = tmp_path / "tool.pid"
    step = f"command:setsid sh -c 'echo $$ {PID_NS} > {pidfile}; exec sleep 300' & sleep 300"
    sid = (await live.spawn("dies with its engine", "a", runner=step)).sid
    first = start_engine_process(db)
    try:
        await until(lambda: _engine_pid(live))
        await live.activate(sid)
        tool = await until(lambda: pid_in(pidfile))
        leader = await until(lambda: running_pid(live, sid))
        assert alive(tool) and alive(leader)
        first.kill()
        first.wait()
        await until(lambda: not alive(tool) and not alive(leader))
    finally:
        if first.poll() is None:
            first.kill()
    second = start_engine_process(db)
    try:
        assert (await until(lambda: finished(live, sid))).outcome == "lost"
    finally:
        second.terminate()
        second.communicate(timeout=HANG_S)


def _subreaper() -> bool:
    import ctypes

    flag = ctypes.c_int()
    assert ctypes.CDLL(None).prctl(37, ctypes.byref(flag), 0, 0, 0) == 0  # PR_GET_CHILD_SUBREAPER
    return bool(flag.value)


async def test_a_process_whose_engine_stopped_is_an_ordinary_parent_again(db, live, tmp_path):
    """A program embedding an engine lives on after it: the orphans the engine was given are
    ended and collected, and later ones are not given to it (no zombies nobody reaps)."""
    pidfile = tmp_path / "tool.pid"
    sid = (await live.spawn("leaves a tool", "a",
                            runner=f"command:setsid sh -c 'echo $$ {PID_NS} > {pidfile}; exec sleep 2' &"
                                   f" until [ -s {pidfile} ]; do sleep 0.01; done; echo left")).sid
    async with engine_on(db):
        assert _subreaper()
        await live.activate(sid)
        assert (await until(lambda: finished(live, sid))).outcome == "ok"
        tool = await until(lambda: pid_in(pidfile))
    assert not _subreaper()
    time.sleep(2.5)  # the tool's own end, had it been left running
    assert proc_state(tool) is None  # not a zombie of this process's


async def test_a_step_that_writes_before_it_reads_does_not_deadlock(live, engine):
    sid = (await live.spawn("chatty", "a", window=4_000_000,
                            runner="command:head -c 2000000 /dev/zero | tr '\\0' x; cat > /dev/null; echo; echo END")).sid
    await live.send(sid, "y" * 3_000_000)  # a document far bigger than a pipe
    await live.activate(sid)
    run = await until(lambda: finished(live, sid))
    assert run.outcome == "ok"
    assert (await live.history(sid))[-1].content.endswith("END")


# ---------------------------------------------------------------- scheduling as an OS does it


async def test_a_suspended_step_gives_up_its_slot_and_resume_goes_on_at_once(db, live):
    eng = Engine(db, slots=1, grace=0.3)
    await eng.start()
    stop = asyncio.Event()
    task = asyncio.ensure_future(eng.serve(stop))
    try:
        first = (await live.spawn("first", "a", runner="builtin:sleep:30")).sid
        second = (await live.spawn("second", "a", runner="builtin:sleep:30")).sid
        await live.activate(first)
        pid = await until(lambda: running_pid(live, first))
        await live.suspend(first)
        await until(lambda: proc_state(pid) == "T")
        await live.activate(second)  # the only slot is free: a stopped step does not hold it
        await until(lambda: running_pid(live, second))
        await live.resume(first)  # goes on at once, over the slot count...
        await until(lambda: proc_state(pid) in ("S", "R"))
        stats = await live.activity()
        assert stats["running"] == 2 and stats["engine"]["slots"] == 1  # ...and the header shows it
    finally:
        stop.set()
        await task


async def test_the_timeout_counts_running_time_not_time_frozen(live, engine):
    # about time itself: 6 s of running time leaves a loaded machine room for a 0.4 s step
    sid = (await live.spawn("paused", "a", runner="command:sleep 0.4; echo done", timeout=6)).sid
    await live.activate(sid)
    pid = await until(lambda: running_pid(live, sid))
    await live.suspend(sid)
    await until(lambda: proc_state(pid) == "T")
    await asyncio.sleep(7.0)  # longer than the timeout, frozen
    await live.resume(sid)
    run = await until(lambda: finished(live, sid))
    assert run.outcome == "ok", run.error
    assert [m.content for m in await live.history(sid)] == ["done"]


# ---------------------------------------------------------------- visible while it happens


async def test_a_running_steps_events_are_in_the_store_while_it_runs(live, engine, cli):
    events = [{"type": "message", "role": "assistant", "content": "working on it"},
              {"type": "memory", "set": {"stage": "halfway"}}, {"type": "usage", "in": 120, "out": 7}]
    lines = "\\n".join(json.dumps(e).replace('"', '\\"') for e in events)
    sid = (await live.spawn("slow talker", "a", runner=f'command:printf "{lines}\\n"; echo oops >&2; sleep 600')).sid
    await live.activate(sid)
    await until(lambda: running_pid(live, sid))
    shown = await until(lambda: _has_context(cli, sid))
    assert [c["content"] for c in shown["context"]] == ["working on it"] and shown["memory"] == {"stage": "halfway"}
    assert shown["state"] == "running"
    runs = cli.json("runs", str(sid))
    assert runs[0]["tokens_in"] == 120 and runs[0]["ended"] is None
    assert "working on it" in cli("logs", str(sid)).stdout  # what made its history is in its log already
    await until(lambda: "oops" in cli("logs", str(sid)).stdout)  # its standard error, read on its own
    follow = subprocess.Popen([sys.executable, "-m", "procession", "logs", str(sid), "-f", "--stream", "err"],
                              stdout=subprocess.PIPE, text=True, env=cli.env())
    await asyncio.sleep(0.5)
    assert follow.poll() is None  # following a live run
    await live.interrupt(sid)
    out, _ = await asyncio.to_thread(follow.communicate, timeout=HANG_S)  # the engine runs in this loop
    assert out == "oops\n" and follow.returncode == 0


async def test_logs_follow_after_activate_waits_for_the_queued_run(live, db, cli):
    """``activate`` then ``logs -f`` said "no run yet" (or printed the run before and ended):
    it follows the run the session is queued for, once an engine starts it."""
    sid = (await live.spawn("counter", "a", runner='command:n=$(cat n 2>/dev/null || echo 0); n=$((n+1));'
                            ' echo $n > n; echo run-$n')).sid
    async with engine_on(db):
        await live.activate(sid)
        await until(lambda: finished(live, sid))
    await live.activate(sid)  # queued: no engine runs now
    follow = subprocess.Popen([sys.executable, "-m", "procession", "logs", str(sid), "-f"],
                              stdout=subprocess.PIPE, text=True, env=cli.env())
    await asyncio.sleep(1.0)
    assert follow.poll() is None  # waiting for the queued run, not done with the one before
    async with engine_on(db):
        out, _ = await asyncio.to_thread(follow.communicate, timeout=HANG_S)
    assert out == "run-2\n" and follow.returncode == 0


def _has_context(cli, sid: int):
    shown = cli.json("show", str(sid))
    return shown if shown["context"] else None


async def test_a_session_failing_run_after_run_is_suspended_and_its_triggers_back_off(live, engine, cli):
    sid = (await live.spawn("broken", "a", runner="builtin:fail")).sid
    await live.trigger_add(sid, "every", ["1s"])
    run = await until(lambda: finished(live, sid))
    assert run.outcome == "failed"
    assert cli.json("ps")[0]["last_outcome"] == "failed" and "failed" in cli("ps").stdout
    await asyncio.sleep(2.5)  # every 1s, but a failed trigger-fired run backs off (10 s)
    assert len(await live.runs(sid)) == 1
    info = await live.info(sid)
    assert info.state is State.SLEEPING and any(t.pending for t in info.triggers)  # the wake is kept
    for n in (2, 3):  # by hand: no back-off
        await until(lambda: _sleeping(live, sid))
        await live.activate(sid)
        await until(lambda: finished(live, sid, n))
    info = await until(lambda: _failing(live, sid))
    assert info.failures == 3 and info.last_outcome == "failed"
    journal = [e for e in await live.journal(sid) if e.actor == "engine" and e.call == "suspend"]
    assert journal and journal[-1].outcome == {"failures": 3, "fail_limit": 3}
    assert "(failing)" in cli("ps").stdout
    await live.set(sid, fail_limit=0)  # never suspend it again
    assert (await live.resume(sid)).state is State.SLEEPING


async def _sleeping(ws: Workspace, sid: int) -> bool:
    return (await ws.info(sid)).state is State.SLEEPING


async def _failing(ws: Workspace, sid: int):
    info = await ws.info(sid)
    return info if info.state is State.SUSPENDED and info.reason == "failing" else None
