"""The two stores side by side: the same calls on an SQLite file and on PostgreSQL, and runs
claimed per second by 1, 3 and 10 engines (hosts), none run twice.

    python bench/stores.py [--quick | --tiny] [--reps N] [--json-out FILE]

The PostgreSQL server is the tests' own (``tests/support/postgres.py``: ``initdb`` into a
temporary folder, on 127.0.0.1, ``fsync`` off), so the figures say what the store's code and
the round trips to a local server cost, not a disk's durability; the SQLite file is in the
same temporary folder, ``synchronous = NORMAL`` as always.

- *send*: one ``send`` call, median over ``--reps`` x 20.
- *append*: ``send --jsonl`` of N messages through the CLI, messages per second.
- *history*: ``history`` of a session of N messages read whole through the API.
- *fork*: one ``fork`` of a session of N messages.
- *a bare round trip*: ``SELECT 1`` on a psycopg connection of its own, median over ``--reps``
  x 20: the least each of a call's messages costs (a ``send`` is two, a ``fork`` three).
- *ps*: ``ps --json`` of S sessions (made in SQLite, carried over by ``migrate-store``), whole
  process wall time.
- *claims*: E engine processes (``--host hN``, 4 slots each) on one workspace, R sessions of
  ``command:true`` spread over their hosts, activated at once: runs ended per second, from
  the first activation to the last run's end; every session must have run exactly once, on
  its own host's engine.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from report import Results, environment, options, process, publish  # noqa: E402
from scale import _texts, build_long, build_sessions  # noqa: E402
from support.postgres import Server  # noqa: E402

from procession import Workspace  # noqa: E402
from procession.model import hosts  # noqa: E402


@dataclass(frozen=True)
class Sizes:
    messages: int
    sessions: int
    runs: int
    engines: tuple[int, ...]
    reps: int


FULL = Sizes(messages=100_000, sessions=100_000, runs=1_000, engines=(1, 3, 10), reps=5)
QUICK = Sizes(messages=10_000, sessions=10_000, runs=300, engines=(1, 3, 10), reps=3)
TINY = Sizes(messages=300, sessions=200, runs=30, engines=(1, 3), reps=1)


def _cli(target: str, root: Path, *args: str) -> float:
    return process([sys.executable, "-m", "procession", "--db", target, *args], dict(os.environ), root).wall


async def _calls(target: str, messages: int, reps: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"send": [], "history": [], "fork": []}
    async with await Workspace.open(target) as ws:
        sid = (await ws.spawn("calls", "bench")).sid
        for _ in range(reps * 20):
            t0 = time.perf_counter()
            await ws.send(sid, "one message")
            out["send"].append(time.perf_counter() - t0)
    long = await build_long_anywhere(target, messages)
    async with await Workspace.open(target) as ws:
        for _ in range(reps):
            t0 = time.perf_counter()
            found = await ws.history(long)
            out["history"].append(time.perf_counter() - t0)
            assert len(found) == messages
            t0 = time.perf_counter()
            await ws.fork(long)
            out["fork"].append(time.perf_counter() - t0)
    return out


async def _round_trips(url: str, reps: int) -> list[float]:
    """A bare round trip to the server (``SELECT 1`` on a psycopg connection of its own): the
    least a message costs, which a call pays once for each of its round trips."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        took = []
        for _ in range(reps * 20):
            t0 = time.perf_counter()
            await conn.execute("SELECT 1")
            took.append(time.perf_counter() - t0)
        return took


async def build_long_anywhere(target: str, n: int) -> int:
    if not target.startswith("postgresql://"):
        return await build_long(Path(target), n)
    async with await Workspace.open(target) as ws:
        sid = (await ws.spawn("long", "bench")).sid
        await ws.send_many(sid, _texts(n, 1))
        return sid


def _append(target: str, root: Path, messages: int, reps: int) -> list[float]:
    feed = root / "in.jsonl"
    feed.write_text("".join(json.dumps(m) + "\n" for m in _texts(messages, 3)), encoding="utf-8")
    rates = []
    for _ in range(reps):
        sid = json.loads(subprocess.run([sys.executable, "-m", "procession", "--db", target, "spawn", "feed",
                                         "--agent", "bench", "--json"], capture_output=True, text=True,
                                        check=True).stdout)["sid"]
        wall = _cli(target, root, "send", str(sid), "--jsonl", str(feed))
        rates.append(messages / wall)
    return rates


def _claims(target: str, engines: int, runs: int) -> float:
    """Runs ended per second by ``engines`` hosts' engines; checks each ran once, on its host."""
    names = [f"h{i}" for i in range(engines)]

    async def spawn() -> list[tuple[int, str]]:
        made = []
        async with await Workspace.open(target) as ws:
            for i in range(runs):
                os.environ[hosts.ENV] = names[i % engines]
                made.append(((await ws.spawn(f"claim {i}", "bench", runner="command:true")).sid, names[i % engines]))
        del os.environ[hosts.ENV]
        return made

    made = asyncio.run(spawn())
    procs = [subprocess.Popen([sys.executable, "-m", "procession", "--db", target, "--host", name, "run",
                               "--slots", "4", "--grace", "0.3"], stderr=subprocess.DEVNULL) for name in names]
    try:
        async def go() -> tuple[float, list[tuple[int, str, str]]]:
            async with await Workspace.open(target) as ws:
                while len((await ws.activity())["engines"]) < engines:
                    await asyncio.sleep(0.05)
                t0 = time.perf_counter()
                for sid, _ in made:
                    await ws.activate(sid)
                ids = {sid for sid, _ in made}
                while True:
                    ended = [r for r in await _ended(ws) if r[0] in ids]
                    if len(ended) >= runs:
                        return time.perf_counter() - t0, ended
                    await asyncio.sleep(0.05)

        took, ended = asyncio.run(go())
        tokens = asyncio.run(_tokens(target))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=60)
    twice = [sid for sid, n in Counter(sid for sid, _, _ in ended).items() if n > 1]
    home = dict(made)
    elsewhere = [sid for sid, engine, _ in ended if tokens.get(engine) != home[sid]]
    if len(ended) != runs or twice or elsewhere:
        raise SystemExit(f"claims: {len(ended)} of {runs} ran, {len(twice)} twice, {len(elsewhere)} off their host")
    return runs / took


async def _ended(ws: Workspace) -> list[tuple[int, str, str]]:
    async with ws.store.snapshot() as tx:
        return [(r[0], r[1], r[2]) for r in await tx.tuples(
            "SELECT session_id, engine, outcome FROM runs WHERE ended IS NOT NULL")]


async def _tokens(target: str) -> dict[str, str]:
    async with await Workspace.open(target) as ws, ws.store.snapshot() as tx:
        return {r[0]: r[1] for r in await tx.tuples("SELECT token, host FROM engines")}


def main() -> int:
    args, sizes = options(__doc__ or "", full=FULL, quick=QUICK, tiny=TINY)
    reps = args.reps or sizes.reps
    root = Path(tempfile.mkdtemp(prefix="procession-stores-"))
    res = Results()
    env = environment(root)
    server = Server()
    t0 = time.perf_counter()
    try:
        stores = {"sqlite": lambda name: str(root / f"{name}.db"), "postgresql": lambda name: server.workspace()}
        for store, make in stores.items():
            print(f"{store}...", file=sys.stderr, flush=True)
            calls = asyncio.run(_calls(make("calls"), sizes.messages, reps))
            res.record(f"{store}_send", f"{store}: send, one call", "1 message", calls["send"])
            res.record(f"{store}_history", f"{store}: history, read whole", f"{sizes.messages:,} msgs",
                       calls["history"])
            res.record(f"{store}_fork", f"{store}: fork", f"{sizes.messages:,} msgs", calls["fork"])
            if store == "postgresql":
                res.record("postgresql_round_trip", "postgresql: a bare round trip (send: 2, fork: 3)", "SELECT 1",
                           asyncio.run(_round_trips(make("trips"), reps)))
            res.record(f"{store}_append", f"{store}: send --jsonl, whole process", f"{sizes.messages:,} msgs",
                       _append(make("append"), root, sizes.messages, reps), unit="msg/s")
            big = root / "ps.db"
            if not big.exists():
                asyncio.run(build_sessions(big, sizes.sessions))
            target = str(big)
            if store == "postgresql":
                target = make("ps")
                _cli(target, root, "migrate-store", str(big), target)
            res.record(f"{store}_ps", f"{store}: ps --json, whole process", f"{sizes.sessions:,} sessions",
                       [_cli(target, root, "ps", "--json") for _ in range(reps)])
            for engines in sizes.engines:
                rates = [_claims(make(f"claims{engines}_{i}"), engines, sizes.runs) for i in range(reps)]
                res.record(f"{store}_claims_{engines}", f"{store}: runs claimed and ended per second, {engines}"
                           f" engine{'s' if engines > 1 else ''}", f"{sizes.runs:,} runs", rates, unit="runs/s")
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    for key in ("send", "history", "fork", "ps"):
        a, b = res.summary()["results"][f"postgresql_{key}"], res.summary()["results"][f"sqlite_{key}"]
        res.record(f"ratio_{key}", f"postgresql / sqlite: {key}", "-", [], unit="x",
                   value=statistics.median(a["runs"]) / statistics.median(b["runs"]))
    publish(res.rows, {"mode": args.mode, "sizes": asdict(sizes),
                       "reps": reps, "environment": env, "total_seconds": round(time.perf_counter() - t0, 1),
                       **res.summary()}, args.json_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
