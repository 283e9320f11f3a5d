"""Load: four processes at once, and a storm of file changes."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from conftest import until

WORKER = str(Path(__file__).parents[1] / "support" / "loadworker.py")
CALLS = 600
#: A hang guard, not a verdict on speed: 1,200 calls take seconds on a quiet machine and
#: minutes on a 2-core machine at load 15 (240 s was once too few).
HANG_S = 900


@pytest.mark.timeout(HANG_S + 120)
async def test_four_processes_at_once_lose_nothing(db, live, tmp_path):
    """A monitor, an engine and two loops of 600 random CLI calls each (through the CLI's
    entry point, each opening and closing the workspace) on one workspace: every accepted call
    is journaled, counters and messages add up, and no call meets 'database is locked'."""
    sessions = [(await live.spawn(f"s{i}", "load", runner="builtin:digest")).sid for i in range(12)]
    engine = subprocess.Popen([sys.executable, "-m", "procession", "--db", str(db), "run", "--grace", "0.2"],
                              stderr=subprocess.DEVNULL)
    outs = [tmp_path / f"w{i}.json" for i in (1, 2)]
    workers = [subprocess.Popen([sys.executable, WORKER, "calls", str(db), str(i + 1), str(CALLS), str(out)])
               for i, out in enumerate(outs)]
    monitor_out = tmp_path / "monitor.json"
    monitor = subprocess.Popen([sys.executable, WORKER, "monitor", str(db), "15", str(monitor_out)])
    try:
        for w in workers:
            assert w.wait(timeout=HANG_S) == 0
        assert monitor.wait(timeout=HANG_S) == 0
    finally:
        engine.send_signal(signal.SIGTERM)
        engine.wait(timeout=30)
    results = [json.loads(o.read_text()) for o in outs]
    assert all(r["refused"].get("busy", 0) == 0 for r in results), "database is locked reached a caller"
    accepted = sum((Counter(r["accepted"]) for r in results), Counter())
    async with live.store.snapshot() as tx:
        journaled = Counter({r[0]: r[1] for r in await tx.all(
            "SELECT call, count(*) FROM journal WHERE actor = 'cli' GROUP BY call")})
    assert journaled["spawn"] == len(sessions)
    for call, n in accepted.items():
        assert journaled[call] == n, f"{call}: {n} accepted, {journaled[call]} journaled"
    for sid in sessions:
        history = await live.history(sid)
        user_messages = sum(1 for m in history if m.author == "user")
        assert user_messages == sum(r["sends"].get(str(sid), 0) for r in results), f"session {sid} lost a message"
        info = await live.info(sid)
        assert info.priority == sum(r["nice"].get(str(sid), 0) for r in results), f"session {sid} lost a nice"
        memory = (await live.show(sid)).memory
        for r in results:
            for owner, key in r["keys"]:
                if owner == sid:
                    assert key in memory, f"session {sid} lost memory key {key}"
    ran = await live.runs()
    assert ran and all(r.ended for r in ran)
    assert json.loads(monitor_out.read_text())["rows"] == len(sessions)


async def test_watch_storm_queues_one_activation_per_debounce_window(db, live, tmp_path):
    storm = tmp_path / "storm"
    storm.mkdir()
    sid = (await live.spawn("stormy", "a", runner="builtin:sleep:0.2", cwd=str(tmp_path))).sid
    await live.trigger_add(sid, "watch", ["storm"], debounce_ms=500)
    calm = (await live.spawn("calm", "a")).sid
    engine = subprocess.Popen([sys.executable, "-m", "procession", "--db", str(db), "run"], stderr=subprocess.DEVNULL)
    try:
        await until(lambda: _lease(db))
        await asyncio.sleep(0.5)
        start = time.time()
        for i in range(10_000):
            (storm / f"f{i % 2000}.txt").write_text(str(i))
            if i % 1000 == 0:  # the workspace answers during the storm (how soon: bench/engine.py's storm)
                await live.nice(calm, 1, relative=True)
        await asyncio.sleep(1.5)
        async with live.store.snapshot() as tx:
            wakes = await tx.value("SELECT count(*) FROM journal WHERE call = 'wake' AND session_id = ?", (sid,))
        windows = (time.time() - start) / 0.5
        assert 1 <= wakes <= windows + 1, f"{wakes} activations for {windows:.1f} debounce windows"
        runs = await live.runs(sid)
        assert sum(len(r.cause[0].get("paths", [])) + r.cause[0].get("more", 0) for r in runs if r.cause) > 0
        assert (await live.info(calm)).priority == 10
    finally:
        engine.send_signal(signal.SIGTERM)
        engine.wait(timeout=30)


def _lease(db: Path) -> bool:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT count(*) FROM engines").fetchone()[0] == 1
