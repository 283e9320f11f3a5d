"""Load-test workers, run as separate processes by tests/test_load.py.

``calls DB SEED N OUT``: N random calls on the workspace, each its own transaction as a CLI
call is; writes what was accepted (and every refusal's type) to OUT as JSON.
``monitor DB SECONDS OUT``: the real monitor, headless, polling the store for SECONDS.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from collections import Counter
from pathlib import Path

from procession import ProcessionError, StoreBusy, Workspace


async def calls(db: Path, seed: int, n: int, out: Path) -> None:
    rng = random.Random(seed)
    ws = await Workspace.open(db)
    sends: Counter[int] = Counter()
    nice: Counter[int] = Counter()
    keys: list[tuple[int, str]] = []
    accepted: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    sessions = [s.id for s in await ws.ps()]
    for i in range(n):
        sid = rng.choice(sessions)
        roll = rng.random()
        try:
            if roll < 0.35:
                await ws.send(sid, f"w{seed} call {i}")
                sends[sid] += 1
                accepted["send"] += 1
            elif roll < 0.50:
                delta = rng.choice([1, -1])
                await ws.nice(sid, delta, relative=True)
                nice[sid] += delta
                accepted["nice"] += 1
            elif roll < 0.65:
                key = f"w{seed}-k{i}"
                await ws.memory_set(sid, key, i)
                keys.append((sid, key))
                accepted["memory"] += 1
            elif roll < 0.75:
                await ws.activate(sid)
                accepted["activate"] += 1
            elif roll < 0.82:
                await ws.suspend(sid)
                accepted["suspend"] += 1
            elif roll < 0.89:
                await ws.resume(sid)
                accepted["resume"] += 1
            elif roll < 0.93:
                await ws.compress(sid, keep_last=4)
                accepted["compress"] += 1
            elif roll < 0.97:
                await ws.expand(sid)
                accepted["expand"] += 1
            else:
                await ws.info(sid)
                await ws.ps()
        except StoreBusy:
            refused["busy"] += 1
        except ProcessionError as exc:
            refused[type(exc).__name__] += 1
    await ws.close()
    out.write_text(json.dumps({"sends": sends, "nice": nice, "keys": keys, "accepted": accepted,
                               "refused": refused}))


async def monitor(db: Path, seconds: float, out: Path) -> None:
    from procession.tui.app import ProcessionApp
    from procession.tui.config import Config

    app = ProcessionApp(db, engine=False, config=Config(path=None), readonly=True)
    ticks = 0
    async with app.run_test(size=(160, 45)) as pilot:
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while loop.time() < end:
            await pilot.pause(0.1)
            ticks += 1
        rows = len(app.table.keys)
    out.write_text(json.dumps({"ticks": ticks, "rows": rows}))


if __name__ == "__main__":
    mode, db = sys.argv[1], Path(sys.argv[2])
    if mode == "calls":
        asyncio.run(calls(db, int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5])))
    else:
        asyncio.run(monitor(db, float(sys.argv[3]), Path(sys.argv[4])))
