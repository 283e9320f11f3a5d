"""Soak: 1,000 sessions with triggers, about 200 runs a minute, for 10 minutes.

    python bench/soak.py [--minutes 10] [--sessions 1000] [--tiny] [--json-out FILE]

A ``procession run`` engine works a workspace of ``--sessions`` sessions, each woken by an
``every`` trigger spread so that about 200 runs start a minute, plus a watch trigger on a
folder this script touches every few seconds. Every 30 s it samples the engine's RSS, its
open file descriptors (/proc/PID/fd), zombie children, and the runs so far. At the end it
prints a table (start and end RSS, fds, zombies, runs, outcomes) and one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil


async def build(db: Path, sessions: int, folder: Path) -> None:
    from procession import Workspace

    ws = await Workspace.open(db)
    period_s = sessions * 60 / 200  # every session once per period: ~200 runs a minute in all
    for i in range(sessions):
        sid = (await ws.spawn(f"soak {i}", f"agent{i % 20}", runner="builtin:digest")).sid
        await ws.send(sid, f"session {i} keeps a small history")
        await ws.trigger_add(sid, "every", [f"{period_s:.0f}s"])
        if i % 100 == 0:
            await ws.trigger_add(sid, "watch", [str(folder)], debounce_ms=500)
    await ws.close()
    # spread the first firings over one period, as if the sessions had started at random times
    with sqlite3.connect(db) as conn:
        now = time.time()
        conn.execute("UPDATE triggers SET created = ? - (id % ?) * ? WHERE kind = 'every'",
                     (now, sessions, period_s / sessions))


def sample(proc: psutil.Process, db: Path) -> dict:
    zombies = sum(1 for c in proc.children(recursive=True) if c.status() == psutil.STATUS_ZOMBIE)
    with sqlite3.connect(db) as conn:
        runs, live = conn.execute("SELECT count(*), total(ended IS NULL) FROM runs").fetchone()
    return {"t": time.time(), "rss": proc.memory_info().rss, "fds": len(os.listdir(f"/proc/{proc.pid}/fd")),
            "zombies": zombies, "runs": runs, "live": int(live)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--tiny", action="store_true", help="20 sessions for 30 s (the suite runs it)")
    parser.add_argument("--json-out")
    args = parser.parse_args()
    if args.tiny:
        args.minutes, args.sessions = 0.5, 20
    with tempfile.TemporaryDirectory() as tmp:
        db, folder = Path(tmp) / "soak.db", Path(tmp) / "watched"
        folder.mkdir()
        asyncio.run(build(db, args.sessions, folder))
        engine = subprocess.Popen([sys.executable, "-m", "procession", "--db", str(db), "run", "--slots", "2"],
                                  stderr=subprocess.DEVNULL)
        proc = psutil.Process(engine.pid)
        time.sleep(5)
        samples = [sample(proc, db)]
        end = time.time() + args.minutes * 60
        touch = 0
        while time.time() < end:
            time.sleep(1)
            touch += 1
            if touch % 5 == 0:
                (folder / "input.txt").write_text(str(touch))
            if touch % 30 == 0:
                samples.append(sample(proc, db))
                print(f"{(samples[-1]['t'] - samples[0]['t']) / 60:5.1f} min  rss {samples[-1]['rss'] / 2**20:6.1f} MiB"
                      f"  fds {samples[-1]['fds']}  zombies {samples[-1]['zombies']}  runs {samples[-1]['runs']}",
                      file=sys.stderr)
        samples.append(sample(proc, db))
        engine.send_signal(signal.SIGTERM)
        engine.wait(timeout=30)
        with sqlite3.connect(db) as conn:
            outcomes = dict(conn.execute("SELECT outcome, count(*) FROM runs GROUP BY outcome").fetchall())
            integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
    first, last = samples[0], samples[-1]
    minutes = (last["t"] - first["t"]) / 60
    result = {
        "sessions": args.sessions, "minutes": minutes, "runs": last["runs"] - first["runs"],
        "runs_per_minute": (last["runs"] - first["runs"]) / minutes if minutes else 0,
        "rss_start_mib": first["rss"] / 2**20, "rss_end_mib": last["rss"] / 2**20,
        "rss_max_mib": max(s["rss"] for s in samples) / 2**20,
        "fds_start": first["fds"], "fds_end": last["fds"], "fds_max": max(s["fds"] for s in samples),
        "zombies_max": max(s["zombies"] for s in samples), "outcomes": outcomes, "integrity": integrity,
        "samples": samples,
    }
    print(f"{'measure':<28} {'value':>14}")
    for label, value in (("minutes", f"{minutes:.1f}"), ("runs", result["runs"]),
                         ("runs per minute", f"{result['runs_per_minute']:.0f}"),
                         ("engine RSS start / end", f"{result['rss_start_mib']:.1f} / {result['rss_end_mib']:.1f} MiB"),
                         ("engine RSS max", f"{result['rss_max_mib']:.1f} MiB"),
                         ("open fds start / end / max", f"{first['fds']} / {last['fds']} / {result['fds_max']}"),
                         ("zombie children, max", result["zombies_max"]), ("outcomes", outcomes),
                         ("integrity_check", integrity)):
        print(f"{label:<28} {value!s:>14}")
    print(json.dumps(result))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
