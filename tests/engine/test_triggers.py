"""Triggers: real files changing, real timers, the inbox and other sessions' runs."""

from __future__ import annotations

import asyncio
import datetime
import os
import sqlite3
import time


import pytest

from conftest import until
from procession import InvalidArgument, State, Workspace
from procession.engine import Engine, next_due
from procession.calls.watched import compile_pattern, scan


async def runs_of(ws: Workspace, sid: int):
    return [r for r in await ws.runs(sid) if r.ended]


async def n_runs(ws: Workspace, sid: int, n: int):
    runs = await runs_of(ws, sid)
    return runs if len(runs) >= n else None


def test_glob_semantics():
    py = compile_pattern("/p/src/**/*.py")
    assert py.match("/p/src/a.py") and py.match("/p/src/x/y/z.py")
    assert not py.match("/p/src/a.txt") and not py.match("/p/other/a.py")
    star = compile_pattern("/p/*.csv")
    assert star.match("/p/rates.csv") and not star.match("/p/sub/rates.csv")
    folder = compile_pattern("/p/src")
    assert folder.match("/p/src") and folder.match("/p/src/deep/file") and not folder.match("/p/srcx")
    assert compile_pattern("/p/[ab].md").match("/p/a.md") and not compile_pattern("/p/[!ab].md").match("/p/a.md")


def test_cron_is_due_in_local_time():
    base = datetime.datetime(2026, 3, 15, 12, 0).astimezone().timestamp()
    due = datetime.datetime.fromtimestamp(next_due("cron", {"expr": "0 9 1 * *"}, base))
    assert (due.month, due.day, due.hour, due.minute) == (4, 1, 9, 0)
    assert next_due("every", {"seconds": 300}, base) == base + 300


async def test_watch_fires_once_per_debounce_window_with_all_paths(live, engine, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    sid = (await live.spawn("docs", "docs", cwd=str(tmp_path))).sid
    await live.trigger_add(sid, "watch", ["src/**/*.py"], debounce_ms=200)
    await asyncio.sleep(0.3)  # the watcher arms after the engine sees the new trigger
    for i in range(20):
        (src / f"m{i}.py").write_text(f"x = {i}\n")
    (src / "notes.txt").write_text("ignored")
    runs = await until(lambda: n_runs(live, sid, 1))
    await asyncio.sleep(0.6)
    runs = await runs_of(live, sid)
    assert len(runs) == 1
    cause = runs[0].cause[0]
    assert cause["kind"] == "watch"
    assert sorted(cause["paths"]) == sorted(str(src / f"m{i}.py") for i in range(20))
    (src / "m0.py").write_text("x = 100\n")
    runs = await until(lambda: n_runs(live, sid, 2))
    assert runs[1].cause[0]["paths"] == [str(src / "m0.py")]
    entries = [e for e in await live.journal(sid) if e.call == "wake"]
    assert len(entries) == 2 and entries[0].actor == "trigger" and entries[0].outcome["result"] == "queued"
    info = await live.info(sid)
    assert info.triggers[0].fired == 2 and info.triggers[0].last_fired


async def test_watch_sees_a_file_replaced_by_an_editor(live, engine, tmp_path):
    rates = tmp_path / "rates.csv"
    rates.write_text("grade,rate\nA,10\n")
    sid = (await live.spawn("payroll", "hr", cwd=str(tmp_path))).sid
    await live.trigger_add(sid, "watch", ["rates.csv"], debounce_ms=50)
    await asyncio.sleep(0.3)
    tmp = tmp_path / ".rates.csv.swp"
    tmp.write_text("grade,rate\nA,11\n")
    os.replace(tmp, rates)
    runs = await until(lambda: n_runs(live, sid, 1))
    assert str(rates) in runs[0].cause[0]["paths"]


async def test_cron_catches_up_once_for_missed_times(db, live):
    sid = (await live.spawn("monthly", "hr")).sid
    tid = (await live.trigger_add(sid, "cron", ["0 9 1 * *"])).trigger.id
    three_months_ago = time.time() - 90 * 86400
    with sqlite3.connect(db) as raw:
        raw.execute("UPDATE triggers SET created = ? WHERE id = ?", (three_months_ago, tid))
    eng = Engine(db, grace=0.3)
    stop = asyncio.Event()
    task = asyncio.ensure_future(eng.serve(stop))
    try:
        runs = await until(lambda: n_runs(live, sid, 1))
        await asyncio.sleep(0.5)
        runs = await runs_of(live, sid)
        assert len(runs) == 1
        assert runs[0].cause[0]["kind"] == "cron" and runs[0].cause[0]["catch_up"] is True
    finally:
        stop.set()
        await task
    trig = (await live.info(sid)).triggers[0]
    assert trig.fired == 1 and next_due("cron", trig.spec, trig.last_fired) > time.time()


async def test_every_fires_on_its_interval(live, engine):
    sid = (await live.spawn("ticker", "a")).sid
    await live.trigger_add(sid, "every", ["1s"])
    start = time.time()
    runs = await until(lambda: n_runs(live, sid, 2))
    # never early; late only by what a loaded machine adds (the exact latency is in bench/)
    assert 0.95 <= runs[1].started - runs[0].started < 3.0
    assert 0.95 <= runs[0].started - start < 3.0


async def test_inbox_and_after(live, engine):
    chat = (await live.spawn("chat", "a")).sid
    await live.trigger_add(chat, "inbox")
    follower = (await live.spawn("follower", "b")).sid
    await live.trigger_add(follower, "after", [str(chat)])
    sender = (await live.spawn("sender", "c")).sid
    await live.send(chat, "are you there?", sender=sender)
    runs = await until(lambda: n_runs(live, chat, 1))
    assert runs[0].cause[0]["kind"] == "inbox" and runs[0].cause[0]["from"] == f"session:{sender}"
    after = await until(lambda: n_runs(live, follower, 1))
    assert after[0].cause[0] == {"kind": "after", "trigger": after[0].cause[0]["trigger"], "session": chat,
                                 "run": runs[0].id, "outcome": "ok"}


async def test_suspended_session_gets_its_triggers_once_on_resume(live, engine, tmp_path):
    sid = (await live.spawn("watcher", "a", cwd=str(tmp_path))).sid
    await live.trigger_add(sid, "watch", ["in"], debounce_ms=50)
    await live.trigger_add(sid, "inbox")
    await live.suspend(sid)
    await asyncio.sleep(0.3)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a").write_text("1")
    await until(lambda: _fired(live, sid, "watch"))
    await live.send(sid, "while you were away")
    await asyncio.sleep(0.3)
    assert await runs_of(live, sid) == []
    assert (await live.info(sid)).state is State.SUSPENDED
    await live.resume(sid)
    runs = await until(lambda: n_runs(live, sid, 1))
    await asyncio.sleep(0.4)
    runs = await runs_of(live, sid)
    assert len(runs) == 1
    assert sorted(c["kind"] for c in runs[0].cause) == ["inbox", "watch"]


async def _fired(ws: Workspace, sid: int, kind: str) -> bool:
    return any(t.fired for t in (await ws.info(sid)).triggers if t.kind == kind)


async def test_trigger_during_a_run_runs_again_after_it(live, engine, tmp_path):
    sid = (await live.spawn("busy", "a", runner="command:sleep 0.5; echo done")).sid
    await live.trigger_add(sid, "inbox")
    await live.send(sid, "one")
    await until(lambda: _state(live, sid, State.RUNNING))
    await live.send(sid, "two")
    await live.send(sid, "three")
    runs = await until(lambda: n_runs(live, sid, 2))
    await asyncio.sleep(0.8)
    runs = await runs_of(live, sid)
    assert len(runs) == 2
    assert [c["kind"] for c in runs[1].cause] == ["inbox", "inbox"]


async def _state(ws: Workspace, sid: int, state: State) -> bool:
    return (await ws.info(sid)).state is state


async def test_terminated_sessions_do_not_wake(live, engine, tmp_path):
    sid = (await live.spawn("ended", "a", cwd=str(tmp_path))).sid
    await live.trigger_add(sid, "watch", ["f"], debounce_ms=50)
    await live.trigger_add(sid, "inbox")
    await live.cancel(sid)
    await asyncio.sleep(0.3)
    (tmp_path / "f").write_text("x")
    await asyncio.sleep(0.5)
    assert await live.runs(sid) == []
    assert all(t.fired == 0 for t in (await live.info(sid)).triggers)


async def test_watch_catches_up_on_changes_made_while_no_engine_ran(db, live, tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("a = 1\n")
    (tmp_path / "src" / "b.py").write_text("b = 1\n")
    sid = (await live.spawn("docs", "docs", cwd=str(tmp_path))).sid
    await live.trigger_add(sid, "watch", ["src"], debounce_ms=50)
    untouched = (await live.spawn("untouched", "docs", cwd=str(tmp_path))).sid
    (tmp_path / "other").mkdir()
    await live.trigger_add(untouched, "watch", ["other"], debounce_ms=50)
    (tmp_path / "src" / "a.py").write_text("a = 2  # changed while no engine ran\n")
    (tmp_path / "src" / "c.py").write_text("c = 1\n")
    eng = Engine(db, grace=0.3)
    stop = asyncio.Event()
    task = asyncio.ensure_future(eng.serve(stop))
    try:
        runs = await until(lambda: n_runs(live, sid, 1))
        await asyncio.sleep(0.4)
        assert len(await runs_of(live, sid)) == 1 and await runs_of(live, untouched) == []
        cause = runs[0].cause[0]
        assert cause["catch_up"] is True
        assert cause["paths"] == [str(tmp_path / "src" / "a.py"), str(tmp_path / "src" / "c.py")]
    finally:
        stop.set()
        await task


def test_fingerprint_lists_files_or_digests_many(tmp_path):
    (tmp_path / "a").write_text("1")
    fp = scan([str(tmp_path)])
    assert list(fp["files"]) == [str(tmp_path / "a")]


async def test_ps_json_shows_triggers_and_last_firing(live, engine, cli):
    sid = (await live.spawn("chat", "a")).sid
    await live.trigger_add(sid, "inbox")
    await live.trigger_add(sid, "cron", ["0 9 1 * *"])
    await live.send(sid, "hello")
    await until(lambda: n_runs(live, sid, 1))
    row = next(r for r in cli.json("ps") if r["sid"] == sid)
    kinds = {t["kind"]: t for t in row["triggers"]}
    assert kinds["inbox"]["fired"] == 1 and kinds["inbox"]["last_fired"]
    assert kinds["cron"]["fired"] == 0 and kinds["cron"]["spec"] == {"expr": "0 9 1 * *"}


async def test_after_triggers_cannot_make_a_loop(ws):
    a, b, c = [(await ws.spawn(n, "x")).sid for n in "abc"]
    await ws.trigger_add(b, "after", [str(a)])
    await ws.trigger_add(c, "after", [str(b)])
    with pytest.raises(InvalidArgument, match=r"wake each other forever"):
        await ws.trigger_add(a, "after", [str(c)])
    with pytest.raises(InvalidArgument, match=rf"{b} already wakes when {a} runs"):
        await ws.trigger_add(a, "after", [str(b)])
    await ws.trigger_add(c, "after", [str(a)])  # a second path to c is not a loop
