#!/usr/bin/env python3
"""Flat costs (issue 22): each figure beside its yardstick, measured in turns in one run.

    python bench/flat.py [--quick | --tiny] [--reps N] [--json-out FILE] [--only GROUPS]

What a user does not look at should not cost: a lineage's depth, a parent's forks, the
sessions off screen, the print loop around the rows. Each figure is measured next to the
same work without that (a flat session of as many messages, a parent without forks, a
bare ``sqlite3`` loop printing the same rows, the interpreter alone); in every round both
sides run once, and which goes first alternates, so that a machine growing busier or quieter
moves both alike. Ratios are of the medians.

Groups (``--only``):

- ``depth``: ``fork``, ``show`` and ``history`` (Python API) of the leaf of a fork chain
  ``D`` levels deep, one message written per level, against a flat session of as many
  messages (goal: within 1.5x at any depth);
- ``memory``: ``memory_set`` on a session that 1,000 forks read copy-on-write, against one
  without forks (goal: within 2x);
- ``ps``: ``ps --json`` over 100,000 sessions as a whole process: its CPU time (user +
  system, from ``wait4``) and peak RSS (goal: < 1.0 s, < 100 MB), beside a bare ``sqlite3``
  fetch of the same rows and columns, and the same call on an empty workspace (what any call
  costs to start);
- ``history``: ``history SID`` (text) of a 1,000,000-message session as a whole process,
  against a bare ``sqlite3`` loop that prints the same rows (goal: CPU within 1.5x);
- ``jsonl``: ``send SID --jsonl FILE`` of as many messages: messages per CPU-second of the
  whole process (goal: >= 100,000);
- ``startup``: ``ps --json`` on a workspace of one session, wall time of the whole process,
  beside ``python -c pass`` and ``python -c 'import asyncio'`` (goal: < 0.15 s).

The monitor's figures (a tick at 100,000 sessions, idle CPU) are ``bench/monitor.py``'s, and
a commit waking its session is ``bench/git.py``'s.

``--quick`` is ~10x smaller; ``--tiny`` (what the suite runs) is a few hundred rows, one
round: its ok?/MISSED is only indicative, the goals are for the full sizes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from report import Process, Results, environment, process, publish
from scale import _texts, build_deep, build_long, build_sessions

from procession import Workspace
from procession.store import rows



@dataclass(frozen=True)
class Sizes:
    depths: tuple[int, ...]
    forks: int
    sessions: int
    messages: int
    reps: int


FULL = Sizes(depths=(500, 2_000), forks=1_000, sessions=100_000, messages=1_000_000, reps=5)
QUICK = Sizes(depths=(100, 500), forks=200, sessions=10_000, messages=100_000, reps=3)
TINY = Sizes(depths=(20,), forks=20, sessions=300, messages=2_000, reps=1)
GROUPS = ("depth", "memory", "ps", "history", "jsonl", "startup")
#: What fetching ``ps``'s rows costs with nothing made of them: the yardstick of ``ps --json``.
BARE_FETCH = "import sqlite3, sys\nfor row in sqlite3.connect(sys.argv[1]).execute(sys.argv[2]):\n    pass\n"
#: What a bare loop over the same rows costs: the yardstick of ``history``'s text.
BARE_HISTORY = (
    "import sqlite3, sys\n"
    "con = sqlite3.connect(sys.argv[1])\n"
    "write = sys.stdout.write\n"
    "for seq, role, content in con.execute('SELECT seq, role, content FROM messages WHERE session_id = ?"
    " ORDER BY seq', (int(sys.argv[2]),)):\n"
    "    write(f'{seq} {role}: {content}\\n')\n"
)


def turns(reps: int, a: Callable[[], float], b: Callable[[], float]) -> tuple[list[float], list[float]]:
    """``reps`` rounds of ``a`` and ``b``, the one going first alternating."""
    got_a: list[float] = []
    got_b: list[float] = []
    for rep in range(reps):
        for first in ((a, got_a), (b, got_b)) if rep % 2 == 0 else ((b, got_b), (a, got_a)):
            first[1].append(first[0]())
    return got_a, got_b


def beside(res: Results, key: str, measure: str, yardstick: str, size: str, a: list[float], b: list[float],
           goal: float) -> None:
    """A figure, its yardstick below it, and their ratio against the goal."""
    res.record(f"{key}", measure, size, a)
    res.record(f"{key}_yardstick", f"  {yardstick}", size, b)
    res.record(f"{key}_ratio", "  ratio", size, [], value=statistics.median(a) / statistics.median(b), unit="x",
               goal=f"<= {goal:g}x", check=lambda v: v <= goal)


def depth(res: Results, root: Path, depths: tuple[int, ...], reps: int) -> None:
    for d in depths:
        deep_db, flat_db = root / f"deep{d}.db", root / f"flat{d}.db"
        leaf = asyncio.run(build_deep(deep_db, d))
        asyncio.run(_flat(flat_db, d + 1))

        async def measure() -> dict[str, tuple[list[float], list[float]]]:
            async with await Workspace.open(deep_db) as deep, await Workspace.open(flat_db) as flat:
                out = {}
                for name in ("fork", "show", "history"):
                    def call(ws: Workspace, sid: int, name: str = name) -> Callable[[], Awaitable[Any]]:
                        return lambda: getattr(ws, name)(sid)
                    out[name] = await _turns_async(max(reps, 5) * 3, call(deep, leaf), call(flat, 1))
                return out
        for name, (a, b) in asyncio.run(measure()).items():
            beside(res, f"{name}_deep_{d}", f"{name} of the leaf of a fork chain (API)",
                   f"{name} of a flat session of as many messages", f"depth {d:,}", a, b, 1.5)


async def _flat(db: Path, n: int) -> None:
    async with await Workspace.open(db) as ws:
        sid = (await ws.spawn("flat", "bench")).sid
        await ws.send_many(sid, [{"role": "user", "content": f"m{i}"} for i in range(n)])


async def _turns_async(reps: int, a: Callable[[], Awaitable[Any]],
                       b: Callable[[], Awaitable[Any]]) -> tuple[list[float], list[float]]:
    got: tuple[list[float], list[float]] = ([], [])
    for rep in range(reps):
        for i in (0, 1) if rep % 2 == 0 else (1, 0):
            t0 = time.perf_counter()
            await (a, b)[i]()
            got[i].append(time.perf_counter() - t0)
    return got


def memory(res: Results, root: Path, forks: int, reps: int) -> None:
    async def measure() -> tuple[list[float], list[float]]:
        async with await Workspace.open(root / "memory.db") as ws:
            parent = (await ws.spawn("parent", "bench")).sid
            alone = (await ws.spawn("alone", "bench")).sid
            for sid in (parent, alone):
                await ws.memory_set_many(sid, {f"k{i}": i for i in range(100)})
            for _ in range(forks):
                await ws.fork(parent)
            n = iter(range(10**9))
            return await _turns_async(max(reps, 5) * 20, lambda: ws.memory_set(parent, f"k{next(n) % 100}", 1),
                                      lambda: ws.memory_set(alone, f"k{next(n) % 100}", 1))
    a, b = asyncio.run(measure())
    beside(res, "memory_set", "memory set on a session its forks read", "memory set on a session without forks",
           f"{forks:,} forks", a, b, 2.0)


def ps(res: Results, root: Path, sessions: int, reps: int) -> None:
    big, empty = root / "ps.db", root / "empty.db"
    asyncio.run(build_sessions(big, sessions))
    asyncio.run(_open(empty))
    runs: list[Process] = []
    bare: list[Process] = []
    turns(reps, lambda: _keep(runs, _cli(big, ["ps", "--json"])),
          lambda: _keep(bare, process([sys.executable, "-c", BARE_FETCH, str(big),
                                       f"{rows.PS_SELECT} WHERE s.state != 'terminated' ORDER BY s.id"],
                                      dict(os.environ), root)))
    starts = [_cli(empty, ["ps", "--json"]) for _ in range(reps)]
    size = f"{sessions:,} sessions"
    res.record("ps_json_cpu", "ps --json, whole process CPU", size, [r.cpu for r in runs], goal="< 1.0 s",
               check=lambda v: v < 1.0, wall_s=[r.wall for r in runs])
    res.record("ps_json_rss", "  its peak RSS", size, [float(r.rss_mb) for r in runs], unit="MB", goal="< 100 MB",
               check=lambda v: v < 100)
    res.record("ps_json_empty_cpu", "  ps --json on an empty workspace, CPU", "0 sessions", [r.cpu for r in starts])
    res.record("ps_bare_cpu", "  a bare sqlite3 fetch of the same rows and columns, CPU", size, [r.cpu for r in bare])


def _keep(into: list[Process], run: Process) -> float:
    into.append(run)
    return run.cpu


def history(res: Results, root: Path, messages: int, reps: int) -> None:
    db = root / "long.db"
    sid = asyncio.run(build_long(db, messages))
    ours, bare = turns(reps, lambda: _cli(db, ["history", str(sid)]).cpu,
                       lambda: process([sys.executable, "-c", BARE_HISTORY, str(db), str(sid)], dict(os.environ),
                                       root).cpu)
    beside(res, "history_text", "history SID (text), whole process CPU", "a bare sqlite3 loop printing the same rows",
           f"{messages:,} msgs", ours, bare, 1.5)


def jsonl(res: Results, root: Path, messages: int, reps: int) -> None:
    db, feed = root / "jsonl.db", root / "in.jsonl"
    feed.write_text("".join(json.dumps(m) + "\n" for m in _texts(messages, 3)), encoding="utf-8")
    rates = []
    for _ in range(reps):
        sid = asyncio.run(_spawn(db))
        rates.append(messages / _cli(db, ["send", str(sid), "--jsonl", str(feed)]).cpu)
    res.record("send_jsonl_rate", "send SID --jsonl FILE, messages per CPU-second", f"{messages:,} msgs", rates,
               unit="msg/s", goal=">= 100,000", check=lambda v: v >= 100_000)


async def _open(db: Path) -> None:
    async with await Workspace.open(db):
        pass


async def _spawn(db: Path) -> int:
    async with await Workspace.open(db) as ws:
        return (await ws.spawn("target", "bench")).sid


def startup(res: Results, root: Path, reps: int) -> None:
    db = root / "one.db"
    asyncio.run(_spawn(db))
    n = reps
    ours, bare = turns(n, lambda: _cli(db, ["ps", "--json"]).wall,
                       lambda: process([sys.executable, "-c", "pass"], dict(os.environ), root).wall)
    loop = [process([sys.executable, "-c", "import asyncio"], dict(os.environ), root).wall for _ in range(n)]
    res.record("startup_ps_json", "ps --json on one session, whole process (wall)", "1 session", ours,
               goal="< 0.15 s", check=lambda v: v < 0.15)
    res.record("startup_python", "  python -c pass", "-", bare)
    res.record("startup_asyncio", "  python -c 'import asyncio'", "-", loop)


def _cli(db: Path, args: list[str]) -> Process:
    return process([sys.executable, "-m", "procession", *args], {**os.environ, "PROCESSION_DB": str(db)}, db.parent)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--reps", type=int)
    parser.add_argument("--only", help="comma-separated: " + ", ".join(GROUPS))
    parser.add_argument("--json-out", metavar="FILE")
    args = parser.parse_args()
    sizes = TINY if args.tiny else QUICK if args.quick else FULL
    reps = args.reps or sizes.reps
    only = set(args.only.split(",")) if args.only else set(GROUPS)
    if only - set(GROUPS):
        parser.error(f"--only takes {', '.join(GROUPS)}")
    root = Path(tempfile.mkdtemp(prefix="procession-flat-"))
    res = Results()
    env = environment(root)
    t0 = time.perf_counter()
    groups: dict[str, Callable[[], None]] = {
        "depth": lambda: depth(res, root, sizes.depths, reps),
        "memory": lambda: memory(res, root, sizes.forks, reps),
        "ps": lambda: ps(res, root, sizes.sessions, reps),
        "history": lambda: history(res, root, sizes.messages, reps),
        "jsonl": lambda: jsonl(res, root, sizes.messages, reps),
        "startup": lambda: startup(res, root, reps),
    }
    try:
        for group in GROUPS:
            if group in only:
                print(f"{group}...", file=sys.stderr, flush=True)
                groups[group]()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    publish(res.rows, {"mode": "tiny" if args.tiny else "quick" if args.quick else "full",
                       "goals_are_for_full_sizes": True, "sizes": asdict(sizes), "reps": reps, "environment": env,
                       "total_seconds": round(time.perf_counter() - t0, 1), **res.summary()}, args.json_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
