#!/usr/bin/env python3
"""Costs that should not grow with what is not shown (issue 13), as whole CLI processes.

    python bench/scale.py [--messages N] [--sessions N] [--depth N] [--reps N] [--tiny]

Builds, in a temporary folder, one session of ``--messages`` messages (written with
``send_many``), a workspace of ``--sessions`` sessions (rows copied from one spawned session
in SQL, so that 100,000 take seconds) and a fork chain ``--depth`` levels deep. Each figure
is the median wall-clock time of ``--reps`` runs of ``python -m procession ...`` (stdout to
/dev/null) and the largest peak RSS among them (``wait4``'s ``ru_maxrss``, taken by a small launcher process). A call the code
under test refuses (an option it does not have yet, a lineage it cannot read) is recorded as
``error`` with its message, not as a time: the same script measures a commit before a change
and after it (copy the old package first on ``PYTHONPATH``, as bench/README.md shows).
Table, then one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from procession import Workspace

from report import environment, process


def _texts(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    words = ("the payroll run uses the new rates file and the overtime table from finance check every row"
             " has a cost centre before totals tests pass except the bonus cap").split()
    return [{"role": ("user", "assistant", "tool")[i % 3],
             "content": f"[{i}] " + " ".join(rng.choice(words) for _ in range(rng.randint(18, 50)))}
            for i in range(n)]


def peak(args: list[str], env: dict[str, str], cwd: Path) -> tuple[float, int, str]:
    """Seconds, peak RSS in MB and stderr of one whole process ``args`` (stdout discarded)."""
    run = process(args, env, cwd)
    return run.wall, run.rss_mb, run.stderr


def cli(db: Path, args: list[str], cwd: Path) -> tuple[float, int, str]:
    """``peak`` of ``python -m procession ARGS`` on the workspace ``db``."""
    return peak([sys.executable, "-m", "procession", *args], {**os.environ, "PROCESSION_DB": str(db)}, cwd)


class Figures:
    def __init__(self, reps: int, cwd: Path) -> None:
        self.reps, self.cwd = reps, cwd
        self.rows: dict[str, dict[str, Any]] = {}

    def time(self, key: str, what: str, size: str, db: Path, args: list[str],
             before: Any = None) -> None:
        print(f"  {what} ({size})...", file=sys.stderr, flush=True)
        runs, peak = [], 0
        try:
            for _ in range(self.reps):
                run_args = before() if before else args
                seconds, rss, _ = cli(db, run_args or args, self.cwd)
                runs.append(seconds)
                peak = max(peak, rss)
        except RuntimeError as exc:
            self.rows[key] = {"what": what, "size": size, "error": str(exc)}
            return
        self.rows[key] = {"what": what, "size": size, "median": statistics.median(runs), "runs": runs,
                          "peak_mb": peak}

    def value(self, key: str, what: str, size: str, value: float, unit: str) -> None:
        self.rows[key] = {"what": what, "size": size, "median": value, "unit": unit}

    def table(self) -> str:
        out = [f"{'measure':44}  {'size':22}  {'median':>12}  {'peak RSS':>9}", "-" * 94]
        for r in self.rows.values():
            if "error" in r:
                cell, peak = "error", r["error"][:60]
            elif r.get("unit"):
                cell, peak = f"{r['median']:,.3g} {r['unit']}", ""
            else:
                cell, peak = f"{r['median'] * 1000:,.0f} ms", f"{r['peak_mb']} MB"
            out.append(f"{r['what']:44}  {r['size']:22}  {cell:>12}  {peak:>9}")
        return "\n".join(out)


async def build_long(db: Path, n: int) -> int:
    async with await Workspace.open(db) as ws:
        sid = (await ws.spawn("long", "bench", system="You are a benchmark.")).sid
        batch = 50_000
        for start in range(0, n, batch):
            await ws.send_many(sid, _texts(min(batch, n - start), start))
        return sid


async def build_compressed(db: Path, sid: int) -> int:
    async with await Workspace.open(db) as ws:
        child = (await ws.fork(sid)).sid
        await ws.compress(child, keep_last=8)
        return child


async def build_sessions(db: Path, n: int) -> None:
    async with await Workspace.open(db) as ws:
        sid = (await ws.spawn("task", "agent-0", goal="check the payroll totals", system="You help.")).sid
        await ws.send_many(sid, _texts(3, 0))
        await ws.trigger_add(sid, "every", ["5m"])
    con = sqlite3.connect(db)
    try:
        cols = [r[1] for r in con.execute("PRAGMA table_info(sessions)") if r[1] not in ("id", "uuid", "name")]
        with con:
            con.executemany(
                f"INSERT INTO sessions (uuid, name, {', '.join(cols)}) SELECT ?, ?, {', '.join(cols)}"
                " FROM sessions WHERE id = ?",
                ((str(uuid.uuid4()), f"task {i}", sid) for i in range(n - 1)))
            con.execute("UPDATE sessions SET state = CASE id % 5 WHEN 0 THEN 'ready' WHEN 1 THEN 'suspended'"
                        " ELSE 'sleeping' END, priority = id % 7 - 3, context_tokens = id * 37 % 100000")
    finally:
        con.close()


async def build_deep(db: Path, depth: int) -> int:
    async with await Workspace.open(db) as ws:
        cur = (await ws.spawn("deep", "bench")).sid
        await ws.send(cur, "m0")
        for i in range(depth):
            cur = (await ws.fork(cur)).sid
            await ws.send(cur, f"m{i + 1}")
        return cur


async def api_send(db: Path, n: int) -> float:
    async with await Workspace.open(db) as ws:
        sid = (await ws.spawn("sends", "bench")).sid
        texts = [m["content"] for m in _texts(n, 9)]
        t0 = time.perf_counter()
        for text in texts:
            await ws.send(sid, text)
        return (time.perf_counter() - t0) / n


async def fork_memory(db: Path, keys: int, forks: int) -> tuple[float, int]:
    async with await Workspace.open(db) as ws:
        sid = (await ws.spawn("memory", "bench")).sid
        for i in range(keys):
            await ws.memory_set(sid, f"key{i}", {"value": i, "note": "x" * 60})
        async with ws.store.snapshot() as tx:
            before = int(await tx.value("SELECT count(*) FROM memory"))
        t0 = time.perf_counter()
        for _ in range(forks):
            await ws.fork(sid)
        seconds = (time.perf_counter() - t0) / forks
        async with ws.store.snapshot() as tx:
            added = int(await tx.value("SELECT count(*) FROM memory")) - before
        return seconds, added


#: What ``--only`` picks from: the long session's reads, its snapshot file (save, load), a
#: transcript sent whole, the process table, the deep chain, and the in-process figures.
GROUPS = ("reads", "files", "jsonl", "ps", "deep", "api")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--depth", type=int, default=600)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--tiny", action="store_true", help="2,000 messages, 500 sessions, depth 20, one run")
    parser.add_argument("--label", help="free text recorded in the JSON (which commit)")
    parser.add_argument("--only", help="comma-separated groups to measure (default all): " + ", ".join(GROUPS))
    args = parser.parse_args()
    only = set(args.only.split(",")) if args.only else set(GROUPS)
    if only - set(GROUPS):
        parser.error(f"--only takes {', '.join(GROUPS)}")
    if args.tiny:
        args.messages, args.sessions, args.depth, args.reps = 2_000, 500, 20, 1
    root = Path(tempfile.mkdtemp(prefix="procession-scale-"))
    f = Figures(args.reps, root)
    env = environment(root)
    n, m = f"{args.messages:,} msgs", f"{args.sessions:,} sessions"
    try:
        print("building...", file=sys.stderr, flush=True)
        long_db = root / "long.db"
        sid = asyncio.run(build_long(long_db, args.messages)) if only & {"reads", "files", "jsonl"} else 0
        if "reads" in only:
            reads(f, n, long_db, sid, asyncio.run(build_compressed(long_db, sid)))
        if "files" in only:
            snap = root / "snap.json"
            f.time("save", "save SID -o FILE", n, long_db, ["save", str(sid), "-o", str(snap), "--force"])
            f.time("load", "load FILE", n, long_db, ["load", str(snap)])
        if "jsonl" in only:
            jsonl = root / "in.jsonl"
            jsonl.write_text("".join(json.dumps(x) + "\n" for x in _texts(args.messages, 3)), encoding="utf-8")

            def fresh_target() -> list[str]:
                target = asyncio.run(_spawn(long_db))
                return ["send", str(target), "--jsonl", str(jsonl)]
            f.time("send_jsonl", "send SID --jsonl FILE", n, long_db, [], before=fresh_target)
            row = f.rows["send_jsonl"]
            if "median" in row:
                f.value("send_jsonl_rate", "send --jsonl rate (whole process)", n, args.messages / row["median"],
                        "msg/s")
        if "ps" in only:
            ps_db = root / "ps.db"
            asyncio.run(build_sessions(ps_db, args.sessions))
            f.time("ps_json", "ps --json", m, ps_db, ["ps", "--json"])
            f.time("ps_json_limit", "ps --json --limit 50 --sort context", m, ps_db,
                   ["ps", "--json", "--limit", "50", "--sort", "context"])
        if "deep" in only:
            deep_db = root / "deep.db"
            leaf = asyncio.run(build_deep(deep_db, args.depth))
            f.time("deep_history", "history of a deep fork chain", f"{args.depth} segments", deep_db,
                   ["history", str(leaf)])
            f.time("deep_show", "show --json of a deep fork chain", f"{args.depth} segments", deep_db,
                   ["show", str(leaf), "--json"])
        if "api" in only:
            per = asyncio.run(api_send(root / "send.db", 300 if args.tiny else 2_000))
            f.value("api_send", "one send through the Python API", "per message", per * 1000, "ms")
            keys, forks = (100, 10) if args.tiny else (1_000, 100)
            fork_s, added = asyncio.run(fork_memory(root / "mem.db", keys, forks))
            f.value("fork_memory_rows", f"memory rows {forks} forks add", f"{keys:,} keys", added, "rows")
            f.value("fork_memory_s", "one fork (Python API)", f"{keys:,} keys", fork_s * 1000, "ms")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f.table())
    print()
    print(json.dumps({"mode": "tiny" if args.tiny else "full", "label": args.label, "reps": args.reps,
                      "sizes": {"messages": args.messages, "sessions": args.sessions, "depth": args.depth},
                      "environment": env, "results": f.rows}, indent=2))
    return 0


def reads(f: Figures, n: str, long_db: Path, sid: int, packed: int) -> None:
    """The partial and streamed reads of the long session and of its compressed fork."""
    f.time("history", "history SID (all of it)", n, long_db, ["history", str(sid)])
    f.time("history_json", "history SID --json", n, long_db, ["history", str(sid), "--json"])
    f.time("history_tail", "history SID --tail 3", n, long_db, ["history", str(sid), "--tail", "3"])
    f.time("show_json_packed", "show SID --json, compressed", n, long_db, ["show", str(packed), "--json"])
    f.time("show_tail", "show SID --tail 20", n, long_db, ["show", str(sid), "--tail", "20"])


async def _spawn(db: Path) -> int:
    async with await Workspace.open(db) as ws:
        return (await ws.spawn("target", "bench")).sid


if __name__ == "__main__":
    sys.exit(main())
