"""Engine benchmark: trigger latency, call-to-signal latency, run throughput.

    python bench/engine.py [--quick | --tiny] [--json-out FILE]

Everything runs for real: a ``procession run`` engine process, real files, real child
processes, the real CLI. Prints a table, then one JSON object.

- trigger latency: a file is written under a folder a session watches (debounce 50 ms);
  latency is the run's recorded start minus the moment before the write. Median and p95.
- call latency: ``procession suspend SID`` on a session whose step is running, until the
  step's process shows state ``T`` in /proc: from before the CLI starts, and from the
  commit of the call (its journal time).
- throughput: N sessions with a short step, all activated, run by an engine with 2 slots.
- storm: N writes under a folder a session watches (debounce 500 ms), another session's call
  made meanwhile every N/10 writes: how long those calls took, and how many activations the
  storm made (one a debounce window at most, and one more).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from report import wait

PY = sys.executable


def cli(db: Path, *args: str) -> str:
    out = subprocess.run([PY, "-m", "procession", "--db", str(db), *args], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def engine(db: Path, slots: int = 2) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([PY, "-m", "procession", "--db", str(db), "run", "--slots", str(slots)],
                            stderr=subprocess.DEVNULL)
    with sqlite3.connect(db) as conn:
        wait(lambda: conn.execute("SELECT count(*) FROM engines").fetchone()[0] == 1, 10)
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=20)


def proc_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("State:"):
                    return line.split()[1]
    except FileNotFoundError:
        return None
    return None


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def trigger_latency(tmp: Path, changes: int) -> dict:
    db = tmp / "trigger.db"
    watched = tmp / "watched"
    watched.mkdir()
    sid = cli(db, "spawn", "watcher", "--agent", "bench", "--runner", "builtin:echo")
    cli(db, "trigger", "add", sid, "watch", str(watched), "--debounce", "50")
    eng = engine(db)
    latencies = []
    try:
        time.sleep(0.5)
        with sqlite3.connect(db) as conn:
            for i in range(changes):
                before = conn.execute("SELECT count(*) FROM runs").fetchone()[0]
                t0 = time.time()
                (watched / f"f{i % 5}.txt").write_text(f"change {i}\n")
                started = wait(lambda: conn.execute("SELECT started FROM runs WHERE id > ? ORDER BY id LIMIT 1",
                                                    (before,)).fetchone(), 10)[0]
                latencies.append((started - t0) * 1000)
                wait(lambda: conn.execute("SELECT count(*) FROM runs WHERE ended IS NULL").fetchone()[0] == 0, 10)
                time.sleep(0.12)
    finally:
        stop(eng)
    return {"changes": changes, "median_ms": statistics.median(latencies), "p95_ms": pct(latencies, 95),
            "max_ms": max(latencies), "all_ms": latencies}


def call_latency(tmp: Path, repeats: int) -> dict:
    db = tmp / "call.db"
    sid = cli(db, "spawn", "sleeper", "--agent", "bench", "--runner", "builtin:sleep:600")
    eng = engine(db)
    total, from_commit = [], []
    try:
        with sqlite3.connect(db) as conn:
            cli(db, "activate", sid)
            pid = wait(lambda: conn.execute("SELECT pid FROM runs WHERE ended IS NULL AND pid IS NOT NULL")
                       .fetchone(), 10)[0]  # claimed first, its process recorded once started
            wait(lambda: proc_state(pid) in ("S", "R"), 5)
            for _ in range(repeats):
                t0 = time.time()
                subprocess.run([PY, "-m", "procession", "--db", str(db), "suspend", sid], check=True,
                               capture_output=True)
                wait(lambda: proc_state(pid) == "T", 5, 0.001)
                t1 = time.time()
                committed = conn.execute("SELECT max(ts) FROM journal WHERE call = 'suspend'").fetchone()[0]
                total.append((t1 - t0) * 1000)
                from_commit.append((t1 - committed) * 1000)
                cli(db, "resume", sid)
                wait(lambda: proc_state(pid) in ("S", "R"), 5, 0.001)
            cli(db, "cancel", sid)
    finally:
        stop(eng)
    return {"repeats": repeats, "cli_to_T_median_ms": statistics.median(total), "cli_to_T_p95_ms": pct(total, 95),
            "commit_to_T_median_ms": statistics.median(from_commit), "commit_to_T_p95_ms": pct(from_commit, 95)}


def throughput(tmp: Path, runs: int) -> dict:
    db = tmp / "throughput.db"
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import asyncio

    from procession import Workspace

    async def build() -> None:
        ws = await Workspace.open(db)
        for i in range(runs):
            sid = (await ws.spawn(f"s{i}", "bench", runner="builtin:echo")).sid
            await ws.send(sid, "ping")
            await ws.activate(sid)
        await ws.close()

    asyncio.run(build())
    t0 = time.time()
    eng = engine(db, slots=2)
    try:
        with sqlite3.connect(db) as conn:
            wait(lambda: conn.execute("SELECT count(*) FROM runs WHERE ended IS NOT NULL").fetchone()[0] >= runs,
                 runs * 2, 0.05)
            first, last = conn.execute("SELECT min(started), max(ended) FROM runs").fetchone()
            outcomes = dict(conn.execute("SELECT outcome, count(*) FROM runs GROUP BY outcome").fetchall())
    finally:
        stop(eng)
    return {"runs": runs, "slots": 2, "seconds": last - first, "runs_per_s": runs / (last - first),
            "outcomes": outcomes, "including_engine_start_s": last - t0}


def storm(tmp: Path, writes: int) -> dict:
    db = tmp / "storm.db"
    folder = tmp / "storm"
    folder.mkdir()
    sid = cli(db, "spawn", "stormy", "--agent", "bench", "--runner", "builtin:sleep:0.2", "--cwd", str(tmp))
    cli(db, "trigger", "add", sid, "watch", str(folder), "--debounce", "500")
    calm = int(cli(db, "spawn", "calm", "--agent", "bench"))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import asyncio

    from procession import Workspace

    async def write(latencies: list[float]) -> None:
        ws = await Workspace.open(db)
        try:
            for i in range(writes):
                (folder / f"f{i % 2000}.txt").write_text(str(i))
                if i % max(1, writes // 10) == 0:
                    t0 = time.perf_counter()
                    await ws.nice(calm, 1, relative=True)
                    latencies.append((time.perf_counter() - t0) * 1000)
        finally:
            await ws.close()

    eng = engine(db)
    latencies: list[float] = []
    try:
        time.sleep(0.5)
        start = time.time()
        asyncio.run(write(latencies))
        written = time.time()
        time.sleep(1.5)  # the last debounce window closes
        with sqlite3.connect(db) as conn:
            wakes = conn.execute("SELECT count(*) FROM journal WHERE call = 'wake' AND session_id = ?",
                                 (int(sid),)).fetchone()[0]
    finally:
        stop(eng)
    return {"writes": writes, "write_s": written - start, "wakes": wakes, "windows": (time.time() - start) / 0.5,
            "call_median_ms": statistics.median(latencies), "call_max_ms": max(latencies), "calls_ms": latencies}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tiny", action="store_true", help="a few of each (the suite runs it)")
    parser.add_argument("--json-out")
    args = parser.parse_args()
    changes, repeats, runs, writes = ((3, 3, 10, 500) if args.tiny else (15, 8, 100, 2000) if args.quick
                                      else (50, 20, 1000, 10_000))
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        results = {
            "trigger_latency": trigger_latency(tmp, changes),
            "call_latency": call_latency(tmp, repeats),
            "throughput": throughput(tmp, runs),
            "storm": storm(tmp, writes),
        }
    results["env"] = {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version, "cpus": os.cpu_count(),
                      "load": os.getloadavg(), "mode": "tiny" if args.tiny else "quick" if args.quick else "full"}
    t, c, r, w = results["trigger_latency"], results["call_latency"], results["throughput"], results["storm"]
    rows = [
        ("trigger latency, median (debounce 50 ms)", f"{t['changes']} changes", f"{t['median_ms']:.0f} ms", "< 150 ms",
         t["median_ms"] < 150),
        ("trigger latency, p95", f"{t['changes']} changes", f"{t['p95_ms']:.0f} ms", "-", None),
        ("suspend: CLI start -> state T, median", f"{c['repeats']} calls", f"{c['cli_to_T_median_ms']:.0f} ms",
         "< 200 ms", c["cli_to_T_median_ms"] < 200),
        ("suspend: commit -> state T, median", f"{c['repeats']} calls", f"{c['commit_to_T_median_ms']:.0f} ms",
         "< 100 ms", c["commit_to_T_median_ms"] < 100),
        ("suspend: commit -> state T, p95", f"{c['repeats']} calls", f"{c['commit_to_T_p95_ms']:.0f} ms", "-", None),
        ("queued short runs, 2 slots", f"{r['runs']} runs", f"{r['runs_per_s']:.1f} runs/s", "-", None),
        ("a call during a write storm, max", f"{w['writes']:,} writes", f"{w['call_max_ms']:.0f} ms", "< 2000 ms",
         w["call_max_ms"] < 2000),
        ("activations the storm made", f"{w['windows']:.0f} windows", f"{w['wakes']}", "<= windows + 1",
         1 <= w["wakes"] <= w["windows"] + 1),
    ]
    print(f"{'measure':<42} {'size':<12} {'median':>12}  {'goal':<9} ok?")
    for name, size, value, goal, ok in rows:
        print(f"{name:<42} {size:<12} {value:>12}  {goal:<9} {'' if ok is None else 'ok' if ok else 'MISSED'}")
    print(json.dumps(results))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
