"""The engine with real child processes, real signals and a real store."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HANG_S, proc_state, until
from support.runs import PID_NS, pid_in, start_engine_process
from procession import EngineBusy, State, Workspace
from procession.engine import Engine


async def state_of(ws: Workspace, sid: int) -> State:
    return (await ws.info(sid)).state


async def last_run(ws: Workspace, sid: int):
    runs = await ws.runs(sid)
    return runs[-1] if runs else None


async def finished(ws: Workspace, sid: int, n: int = 1):
    runs = await ws.runs(sid)
    return len(runs) >= n and all(r.ended for r in runs) and runs[-1]


async def test_plain_text_reply_joins_history(live, engine, tmp_path):
    sid = (await live.spawn("echoer", "a", runner="command:cat > /dev/null; echo 'hello from a step'")).sid
    await live.send(sid, "hi")
    await live.activate(sid)
    run = await until(lambda: finished(live, sid))
    assert run.outcome == "ok" and run.exit_code == 0
    history = await live.history(sid)
    assert [(m.role, m.content, m.author) for m in history[1:]] == [("assistant", "hello from a step", "runner")]
    assert await state_of(live, sid) is State.SLEEPING


async def test_step_reads_the_whole_context_document(live, engine, tmp_path):
    out = tmp_path / "doc.json"
    sid = (await live.spawn("reader", "docs", system="be brief", goal="read", runner=f"command:cat > {out}",
                           cwd=str(tmp_path))).sid
    await live.send(sid, "first")
    await live.memory_set(sid, "k", {"v": 1})
    await live.bind(sid, "file", "notes.md", mode="ro")
    await live.activate(sid)
    await until(lambda: finished(live, sid))
    doc = json.loads(out.read_text())
    assert doc["session"]["id"] == sid and doc["session"]["agent"] == "docs" and doc["session"]["goal"] == "read"
    assert doc["system"] == "be brief"
    assert [(m["role"], m["content"]) for m in doc["messages"]] == [("user", "first")]
    assert doc["memory"] == {"k": {"v": 1}}
    assert doc["resources"] == [{"kind": "file", "uri": str(tmp_path / "notes.md"), "mode": "ro"}]
    assert doc["run"]["cause"][0]["kind"] == "manual"


async def test_json_lines_events(live, engine, tmp_path):
    other = (await live.spawn("other", "b")).sid
    script = tmp_path / "step.py"
    script.write_text(
        "import json, sys\n"
        "doc = json.load(sys.stdin)\n"
        "emit = lambda **e: print(json.dumps(e))\n"
        "emit(type='message', role='assistant', content='computed')\n"
        "emit(type='memory', set={'total': 42}, delete=['old'])\n"
        f"emit(type='send', to={other}, text='payroll ready')\n"
        "emit(type='usage', **{'in': 100, 'out': 7})\n"
        "emit(type='done')\n"
    )
    sid = (await live.spawn("payroll", "hr", runner=f"command:{sys.executable} {script}")).sid
    await live.memory_set(sid, "old", 1)
    await live.activate(sid)
    run = await until(lambda: finished(live, sid))
    assert run.outcome == "ok" and (run.tokens_in, run.tokens_out) == (100, 7)
    info = await live.info(sid)
    assert info.state is State.TERMINATED and info.reason == "done"
    detail = await live.show(sid)
    assert detail.memory == {"total": 42}
    assert [c.content for c in detail.context] == ["computed"]
    inbox = await live.history(other)
    assert [(m.content, m.author) for m in inbox] == [("payroll ready", f"session:{sid}")]


async def test_failed_step_keeps_stderr_and_the_engine_goes_on(live, engine):
    sid = (await live.spawn("broken", "a", runner="command:echo 'partial'; echo 'it broke: no rates' >&2; exit 3")).sid
    await live.activate(sid)
    run = await until(lambda: finished(live, sid))
    assert run.outcome == "failed" and run.exit_code == 3
    assert "it broke: no rates" in run.error and "exit status 3" in run.error
    assert len(await live.history(sid)) == 0
    assert await state_of(live, sid) is State.SLEEPING
    good = (await live.spawn("good", "a")).sid
    await live.activate(good)
    assert (await until(lambda: finished(live, good))).outcome == "ok"


async def test_step_runs_in_the_bound_folder(live, engine, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    sid = (await live.spawn("pwd", "a", runner="command:pwd")).sid
    await live.bind(sid, "folder", str(work))
    await live.activate(sid)
    await until(lambda: finished(live, sid))
    assert (await live.history(sid))[-1].content == str(work)


async def test_a_session_whose_folder_is_not_on_the_engines_machine_is_held_not_failed(
        live: Workspace, engine: object, tmp_path, caplog) -> None:
    """An engine that took a host over from another machine finds sessions whose folders are
    not on its own: it runs none of them and counts no failure; each is suspended saying why
    (reason ``absent``) and runs once resumed where its folder is."""
    folder = tmp_path / "project"
    folder.mkdir()
    sid = (await live.spawn("elsewhere", "a", runner="command:echo ran > ran.txt", cwd=str(folder))).sid
    folder.rmdir()  # (as on a machine that never had it)
    await live.activate(sid)
    held = await until(lambda: _suspended(live, sid))
    assert held.reason == "absent" and held.failures == 0
    assert await live.runs(sid) == []  # nothing ran, nothing failed
    [row] = [e for e in await live.journal(sid) if e.call == "suspend"]
    assert row.actor == "engine"
    assert f"session {sid}: its folder {folder} is not on this machine" in caplog.text  # said, and how to go on
    assert f"procession move {sid} --to HOST" in caplog.text
    folder.mkdir()
    await live.resume(sid)  # its queued run runs on resume
    await until(lambda: (folder / "ran.txt").exists())
    [run] = await until(lambda: _ran(live, sid))
    assert run.outcome == "ok"


async def _suspended(ws: Workspace, sid: int):
    info = await ws.info(sid)
    return info if info.state == State.SUSPENDED else None


async def _ran(ws: Workspace, sid: int):
    runs = await ws.runs(sid)
    return runs if runs and all(r.ended for r in runs) else None


async def test_timeout(live, engine):
    # the timeout counts the step's running time; 5 s leaves a loaded machine time to echo
    sid = (await live.spawn("slow", "a", runner="command:echo started; sleep 300", timeout=5)).sid
    await live.activate(sid)
    run = await until(lambda: finished(live, sid))
    assert run.outcome == "timeout"
    assert run.ended - run.started < 300  # stopped, not run to its end
    last = (await live.history(sid))[-1]
    assert last.content == "started" and last.meta["outcome"] == "timeout"


async def test_output_is_bounded(live, engine):
    sid = (await live.spawn("flood", "a", runner="command:head -c 5000000 /dev/zero | tr '\\0' x; echo; echo END")).sid
    await live.activate(sid)
    run = await until(lambda: finished(live, sid))
    assert run.outcome == "ok"
    content = (await live.history(sid))[-1].content
    assert len(content) < 1_100_000
    assert "bytes of output cut" in content and content.endswith("END")
    assert "bytes of output cut" in run.error


async def running_pid(ws: Workspace, sid: int) -> int | None:
    info = await ws.info(sid)
    return info.pid if info.state is State.RUNNING else None


async def test_suspend_resume_stop_the_process_for_real(db, live):
    # a grace period long enough for a loaded machine: the step must end by its SIGINT handler
    engine = Engine(db, grace=5.0)
    await engine.start()
    stop = asyncio.Event()
    serving = asyncio.ensure_future(engine.serve(stop))
    try:
        await _suspend_resume_interrupt(live)
    finally:
        stop.set()
        await serving


async def _said(ws, sid: int, text: str) -> bool:
    _, chunks = await ws.run_log(sid)
    return any(text in c.data for c in chunks)


async def _suspend_resume_interrupt(live):
    sid = (await live.spawn("sleeper", "a", runner="builtin:sleep:30")).sid
    await live.activate(sid)
    pid = await until(lambda: running_pid(live, sid))
    await until(lambda: _said(live, sid, "started"))  # past its start: it handles SIGINT now
    await live.suspend(sid)
    await until(lambda: proc_state(pid) == "T")
    await live.resume(sid)
    await until(lambda: proc_state(pid) in ("S", "R"))
    await live.interrupt(sid)
    run = await until(lambda: finished(live, sid))
    assert run.outcome == "interrupted" and run.exit_code == 130
    last = (await live.history(sid))[-1]
    assert last.content.startswith("started") and last.content.endswith("interrupted")
    assert last.meta == {"outcome": "interrupted", "run": run.id}
    assert proc_state(pid) is None


async def test_interrupt_escalates_to_sigkill(live, engine, tmp_path):
    script = tmp_path / "stubborn.sh"
    script.write_text("trap '' INT TERM\necho stubborn\nwhile true; do sleep 0.05; done\n")
    sid = (await live.spawn("stubborn", "a", runner=f"command:exec sh {script}")).sid
    await live.activate(sid)
    pid = await until(lambda: running_pid(live, sid))
    await asyncio.sleep(0.2)
    await live.interrupt(sid)
    run = await until(lambda: finished(live, sid))
    assert run.outcome == "interrupted" and run.exit_code == -signal.SIGKILL
    assert proc_state(pid) is None


async def test_cancel_kills_the_whole_group(live, engine, tmp_path):
    pids = tmp_path / "pids"
    sid = (await live.spawn("forker", "a", runner=f"command:sleep 60 & echo $! {PID_NS} > {pids}; sleep 60")).sid
    await live.activate(sid)
    await until(lambda: running_pid(live, sid))
    child = await until(lambda: pid_in(pids))
    await live.cancel(sid)
    run = await until(lambda: finished(live, sid))
    assert run.outcome == "cancelled"
    await until(lambda: proc_state(child) in (None, "Z"))
    info = await live.info(sid)
    assert info.state is State.TERMINATED and info.reason == "cancelled"


async def test_children_that_outlive_the_step_are_cleaned_up(live, engine, tmp_path):
    pids = tmp_path / "pids"
    sid = (await live.spawn("leaver", "a", runner=f"command:(sleep 60 >/dev/null 2>&1 & echo $! {PID_NS} > {pids});"
                                                  " sleep 0.5; echo done")).sid
    await live.activate(sid)
    child = await until(lambda: pid_in(pids))
    run = await until(lambda: finished(live, sid))
    assert run.outcome == "ok"
    await until(lambda: proc_state(child) in (None, "Z"))


async def test_priority_then_age_decides_who_runs_first(db, live, tmp_path):
    order = tmp_path / "order"
    sids = {}
    for name, prio in (("low", 0), ("high", 10), ("mid", 5), ("mid2", 5)):
        sids[name] = (await live.spawn(name, "a", priority=prio, runner=f"command:echo {name} >> {order}")).sid
        await live.activate(sids[name])
    eng = Engine(db, slots=1, grace=0.3)
    stop = asyncio.Event()
    task = asyncio.ensure_future(eng.serve(stop))
    try:
        await until(lambda: order.exists() and len(order.read_text().split()) == 4)
    finally:
        stop.set()
        await task
    assert order.read_text().split() == ["high", "mid", "mid2", "low"]


async def test_slots_limit_concurrency(db, live):
    sids = [(await live.spawn(f"s{i}", "a", runner="builtin:sleep:30")).sid for i in range(3)]
    for sid in sids:
        await live.activate(sid)
    eng = Engine(db, slots=2, grace=0.3)
    stop = asyncio.Event()
    task = asyncio.ensure_future(eng.serve(stop))
    try:
        await until(lambda: _count(live, State.RUNNING, 2))
        await asyncio.sleep(0.3)
        states = [(await live.info(s)).state for s in sids]
        assert states.count(State.RUNNING) == 2 and states.count(State.READY) == 1
    finally:
        stop.set()
        await task
    # a clean stop interrupts the running steps and records them as interrupted
    outcomes = sorted(r.outcome for r in await live.runs())
    assert outcomes == ["interrupted", "interrupted"]
    assert [(await live.info(s)).state for s in sids].count(State.SLEEPING) == 2


async def _count(ws: Workspace, state: State, n: int) -> bool:
    return sum(1 for s in await ws.ps() if s.state is state) == n


async def test_ps_shows_pid_cpu_and_rss_of_a_running_step(live, engine, cli):
    sid = (await live.spawn("busy", "a", runner="command:while true; do :; done")).sid
    await live.activate(sid)
    pid = await until(lambda: running_pid(live, sid))
    info = await until(lambda: _sampled(live, sid))
    assert info.pid == pid and info.rss > 0 and info.cpu > 10 and info.run_started
    row = next(r for r in cli.json("ps") if r["sid"] == sid)
    assert row["pid"] == pid and row["rss"] > 0 and row["cpu"] is not None and row["run_started"]
    await live.cancel(sid)


async def _sampled(ws: Workspace, sid: int):
    info = await ws.info(sid)
    return info if info.cpu else None


async def test_second_engine_is_refused_with_the_holder_named(db, engine):
    other = Engine(db)
    with pytest.raises(EngineBusy, match=f"pid {os.getpid()}"):
        await other.start()


async def test_killed_engine_is_replaced_and_its_step_is_reaped(db, live, tmp_path):
    """Unconfined: a confined run ends with its engine (tests/engine/test_trust.py); this one's
    step outlives it, and the next engine reaps it."""
    sid = (await live.spawn("long", "a", runner="builtin:sleep:60", confine="off")).sid
    first = start_engine_process(db)
    try:
        await until(lambda: live.store and _holder(live))
        await live.activate(sid)
        pid = await until(lambda: running_pid(live, sid))
        first.kill()
        first.wait()
        assert proc_state(pid) not in (None, "Z")  # the orphaned step is still alive
        second = start_engine_process(db)
        try:
            await until(lambda: proc_state(pid) in (None, "Z"))
            run = await until(lambda: finished(live, sid))
            assert run.outcome == "lost"
            assert await state_of(live, sid) is State.SLEEPING
            await live.activate(sid)
            await until(lambda: running_pid(live, sid))
        finally:
            second.send_signal(signal.SIGTERM)
            _, err = second.communicate(timeout=HANG_S)
        assert second.returncode == 0
        assert "took over" in err and "recovered" in err
    finally:
        if first.poll() is None:
            first.kill()
    assert (await last_run(live, sid)).outcome == "interrupted"


async def _holder(ws: Workspace):
    from procession.engine.ledger import Ledger

    return await Ledger(ws.store).holder()


async def test_cli_call_reaches_the_step_of_another_process(db, live, cli):
    """A suspend made by another process reaches the engine's step (how soon is
    bench/engine.py's figure: a time asserted here failed on a loaded machine)."""
    sid = (await live.spawn("sleeper", "a", runner="builtin:sleep:30")).sid
    eng = start_engine_process(db)
    try:
        await until(lambda: _holder(live))
        await live.activate(sid)
        pid = await until(lambda: running_pid(live, sid))
        cli("suspend", str(sid))
        await until(lambda: proc_state(pid) == "T")
        cli("cancel", str(sid))
        await until(lambda: proc_state(pid) in (None, "Z"))
    finally:
        eng.send_signal(signal.SIGINT)
        eng.communicate(timeout=HANG_S)


def test_activate_now_runs_in_the_foreground_without_an_engine(cli):
    sid = cli("spawn", "one-off", "--agent", "a").stdout.strip()
    cli("send", sid, "what is the digest?")
    out = cli("activate", sid, "--now")
    assert "run 1 ok" in out.stdout and "digest" in out.stdout
    queued = cli("activate", sid)
    assert "no engine runs on this workspace" in queued.stderr
    runs = cli.json("runs", sid)
    assert [r["outcome"] for r in runs] == ["ok"]


async def test_steps_can_be_interrupted_even_if_the_engine_ignores_sigint(db, live):
    """An engine started as a background job has SIGINT ignored; its steps must not inherit that."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        engine = Engine(db, grace=5.0)
        await engine.start()
        stop = asyncio.Event()
        serving = asyncio.ensure_future(engine.serve(stop))
        try:
            sid = (await live.spawn("sleeper", "a", runner="builtin:sleep:30")).sid
            await live.activate(sid)
            await until(lambda: running_pid(live, sid))
            await until(lambda: _said(live, sid, "started"))  # past its start: it handles SIGINT now
            await live.interrupt(sid)
            run = await until(lambda: finished(live, sid))
            assert run.outcome == "interrupted" and run.exit_code == 130  # its own SIGINT handler ended it
        finally:
            stop.set()
            await serving
    finally:
        signal.signal(signal.SIGINT, previous)


def test_activate_now_runs_the_asked_session_even_behind_another_in_the_queue(cli):
    first = cli("spawn", "first", "--agent", "a").stdout.strip()
    second = cli("spawn", "second", "--agent", "a").stdout.strip()
    cli("activate", first)  # queued, no engine
    out = subprocess.run([sys.executable, "-m", "procession", "activate", "--now", second], capture_output=True,
                         text=True, timeout=HANG_S, env={**os.environ, "PROCESSION_DB": str(cli.db)}, cwd=cli.cwd)
    assert out.returncode == 0 and "run 1 ok" in out.stdout
    assert [s["state"] for s in cli.json("ps") if s["sid"] == int(first)] == ["ready"]  # left for an engine
    assert "run 2 ok" in cli("activate", "--now", first).stdout  # already queued: --now runs it


async def test_a_context_over_its_window_is_not_sent_to_the_runner(live, engine):
    sid = (await live.spawn("tight", "a", window=50, runner="command:cat > /dev/null; echo ran")).sid
    await live.send(sid, "x" * 1000)
    await live.activate(sid)
    run = await until(lambda: finished(live, sid))
    assert run.outcome == "failed" and "over its window (50)" in run.error and "compress" in run.error
    assert [m.content for m in await live.history(sid)] == ["x" * 1000]
