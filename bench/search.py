"""``grep`` on both stores: how long a search takes as the messages grow, what the index
costs on disk, and what it adds to appends.

    python bench/search.py [--quick | --tiny] [--reps N] [--json-out FILE]

Each size is one workspace of N messages over 100 sessions (``scale._texts``: 18-50 words of
a 26-word vocabulary, so the vocabulary's words are in most messages, each message also
holding one of 5,000 rarer words and one of N unique ones), searched through the API (one
``grep`` call, its default 20 hits): a *unique* word (one hit), a *rare* one (N / 5,000 hits), a
*phrase*, and a *common* word (in most messages). The PostgreSQL server is the tests' own
(``tests/support/postgres.py``: local, ``fsync`` off); its statistics are gathered after each
load (``ANALYZE``, as autovacuum does a minute after one): its plan for a word depends on how
many messages it reads hold it.

- *index bytes per message*: SQLite, the pages of the FTS5 tables (``dbstat``); PostgreSQL,
  the GIN index and the ``said`` column (``pg_relation_size``, ``pg_column_size``).
- *append cost*: ``send --jsonl`` of M messages through the CLI into a new workspace, with
  the index and with it dropped (SQLite: a view that takes the batches and keeps nothing;
  PostgreSQL: the index and its column), alternated, medians: the ratio is what the index
  adds to an append.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from report import Results, environment, options, process, publish  # noqa: E402
from scale import _texts  # noqa: E402
from support.postgres import Server  # noqa: E402

from procession import Workspace  # noqa: E402


@dataclass(frozen=True)
class Sizes:
    messages: tuple[int, ...]
    appended: int
    reps: int


FULL = Sizes(messages=(10_000, 100_000, 1_000_000), appended=100_000, reps=9)
QUICK = Sizes(messages=(10_000, 100_000), appended=20_000, reps=5)
TINY = Sizes(messages=(1_000,), appended=500, reps=1)
SESSIONS = 100
RARE = 5_000
#: The searches, each a query and what it stands for.
QUERIES = {"unique": "u{n}q", "rare": "r{n}x", "phrase": '"payroll run"', "common": "payroll"}


def _messages(n: int, start: int) -> list[dict[str, Any]]:
    out = _texts(n, start)
    for i, m in enumerate(out, start=start):
        m["content"] += f" u{i}q r{i % RARE}x"
    return out


async def _build(target: str, n: int) -> None:
    async with await Workspace.open(target) as ws:
        sids = [(await ws.spawn(f"s{i}", f"agent-{i % 7}")).sid for i in range(SESSIONS)]
        per = n // SESSIONS
        for k, sid in enumerate(sids):
            await ws.send_many(sid, _messages(per, k * per))
        if ws.store.dialect == "postgresql":  # its statistics, as autovacuum leaves them a minute after a load
            async with ws.store.tx() as tx:
                await tx.execute("ANALYZE")


async def _greps(target: str, n: int, reps: int) -> dict[str, list[float]]:
    rng = random.Random(n)
    out: dict[str, list[float]] = {kind: [] for kind in QUERIES}
    async with await Workspace.open(target) as ws:
        await ws.grep("warm")
        for _ in range(reps):
            for kind, query in QUERIES.items():
                text = query.format(n=rng.randrange(n if kind == "unique" else min(n, RARE)))
                t0 = time.perf_counter()
                found = await ws.grep(text)
                out[kind].append(time.perf_counter() - t0)
                assert found, (kind, text)
    return out


async def _index_bytes(target: str) -> int:
    async with await Workspace.open(target) as ws, ws.store.snapshot() as tx:
        if ws.store.dialect == "sqlite":
            return int(await tx.value("SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'messages_search%'"))
        return int(await tx.value("SELECT pg_relation_size('messages_search') + (SELECT sum(pg_column_size(said))"
                                  " FROM messages)"))


async def _drop_index(target: str) -> None:
    async with await Workspace.open(target) as ws, ws.store.tx() as tx:
        if ws.store.dialect == "sqlite":  # what an append gives the index goes nowhere
            await tx.execute("DROP TABLE messages_search")
            await tx.execute("CREATE VIEW messages_search (content) AS SELECT NULL WHERE 0")
            await tx.execute("CREATE TRIGGER nowhere INSTEAD OF INSERT ON messages_search BEGIN SELECT 1; END")
        else:
            await tx.execute("DROP INDEX messages_search")
            await tx.execute("ALTER TABLE messages DROP COLUMN said")


def _append(make: Any, root: Path, n: int, indexed: bool) -> float:
    target = make()
    asyncio.run(_spawned(target))
    if not indexed:
        asyncio.run(_drop_index(target))
    feed = root / "in.jsonl"
    feed.write_text("".join(json.dumps(m) + "\n" for m in _messages(n, 0)), encoding="utf-8")
    took = process([sys.executable, "-m", "procession", "--db", target, "send", "1", "--jsonl", str(feed)],
                   dict(os.environ), root).wall
    return n / took


async def _spawned(target: str) -> None:
    async with await Workspace.open(target) as ws:
        await ws.spawn("feed", "bench")


def main() -> int:
    args, sizes = options(__doc__ or "", full=FULL, quick=QUICK, tiny=TINY)
    reps = args.reps or sizes.reps
    root = Path(tempfile.mkdtemp(prefix="procession-search-"))
    res = Results()
    env = environment(root)
    server = Server()
    t0 = time.perf_counter()
    names = iter(range(1_000_000))
    try:
        stores = {"sqlite": lambda: str(root / f"w{next(names)}.db"), "postgresql": server.workspace}
        for store, make in stores.items():
            for n in sizes.messages:
                print(f"{store}, {n:,} messages...", file=sys.stderr, flush=True)
                target = make()
                asyncio.run(_build(target, n))
                for kind, runs in asyncio.run(_greps(target, n, reps)).items():
                    res.record(f"{store}_grep_{kind}_{n}", f"{store}: grep, a {kind} {'word' if kind != 'phrase' else ''}"
                               .rstrip(), f"{n:,} msgs", runs)
                res.record(f"{store}_index_{n}", f"{store}: index bytes per message", f"{n:,} msgs", [],
                           unit="B", value=asyncio.run(_index_bytes(target)) / n)
            with_index, without = [], []
            for _ in range(reps):
                with_index.append(_append(make, root, sizes.appended, True))
                without.append(_append(make, root, sizes.appended, False))
            res.record(f"{store}_append_indexed", f"{store}: send --jsonl, with the index", f"{sizes.appended:,} msgs",
                       with_index, unit="msg/s")
            res.record(f"{store}_append_bare", f"{store}: send --jsonl, the index dropped",
                       f"{sizes.appended:,} msgs", without, unit="msg/s")
            res.record(f"{store}_append_cost", f"{store}: what the index adds to an append (time, ratio)", "-", [],
                       unit="x", value=statistics.median(without) / statistics.median(with_index))
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    publish(res.rows, {"mode": args.mode, "sizes": asdict(sizes),
                       "reps": reps, "environment": env, "total_seconds": round(time.perf_counter() - t0, 1),
                       **res.summary()}, args.json_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
