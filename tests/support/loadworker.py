"""Load-test workers, run as separate processes by tests/test_load.py.

``calls DB SEED N OUT``: N random calls through the CLI's entry point; writes what was
accepted (and how many were refused, and whether any met a locked workspace) to OUT as JSON.
``monitor DB SECONDS OUT``: the real monitor, headless, polling the store for SECONDS.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import random
import sys
from collections import Counter
from pathlib import Path

from procession import Workspace


def calls(db: Path, seed: int, n: int, out: Path) -> None:
    """N random calls through the CLI's own entry point (argument parsing, opening the
    workspace, the call, the output, closing), as N ``procession`` commands would make them
    minus the interpreter start."""
    from procession.cli import main

    rng = random.Random(seed)
    sessions = [s.id for s in asyncio.run(_sessions(db))]
    sends: Counter[int] = Counter()
    nice: Counter[int] = Counter()
    keys: list[tuple[int, str]] = []
    accepted: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    for i in range(n):
        sid = rng.choice(sessions)
        roll = rng.random()
        delta = rng.choice([1, -1])
        key = f"w{seed}-k{i}"
        call, argv = (
            ("send", ["send", str(sid), f"w{seed} call {i}"]) if roll < 0.35 else
            ("nice", ["nice", str(sid), str(delta), "--relative"]) if roll < 0.50 else
            ("memory", ["memory", str(sid), "set", key, str(i)]) if roll < 0.65 else
            ("activate", ["activate", str(sid)]) if roll < 0.75 else
            ("suspend", ["suspend", str(sid)]) if roll < 0.82 else
            ("resume", ["resume", str(sid)]) if roll < 0.89 else
            ("compress", ["compress", str(sid), "--keep-last", "4"]) if roll < 0.93 else
            ("expand", ["expand", str(sid)]) if roll < 0.97 else
            ("read", ["show", str(sid)])
        )
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main(["--db", str(db), *argv])
        if code != 0:
            refused["busy" if "locked" in err.getvalue() else "refused"] += 1
            continue
        accepted[call] += 1
        if call == "send":
            sends[sid] += 1
        elif call == "nice":
            nice[sid] += delta
        elif call == "memory":
            keys.append((sid, key))
    accepted.pop("read", None)
    out.write_text(json.dumps({"sends": sends, "nice": nice, "keys": keys, "accepted": accepted,
                               "refused": refused}))


async def _sessions(db: Path) -> list:
    ws = await Workspace.open(db)
    try:
        return await ws.ps()
    finally:
        await ws.close()


async def monitor(db: Path, seconds: float, out: Path) -> None:
    from procession.tui.app import ProcessionApp
    from procession.tui.config import Config

    ws = await Workspace.open(db, actor="tui")
    app = ProcessionApp(ws, engine=False, config=Config(path=None), readonly=True)
    ticks = 0
    try:
        async with app.run_test(size=(160, 45)) as pilot:
            loop = asyncio.get_running_loop()
            end = loop.time() + seconds
            while loop.time() < end:
                await pilot.pause(0.1)
                ticks += 1
            rows = len(app.table.keys)
    finally:
        await ws.close()
    out.write_text(json.dumps({"ticks": ticks, "rows": rows}))


if __name__ == "__main__":
    mode, db = sys.argv[1], Path(sys.argv[2])
    if mode == "calls":
        calls(db, int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5]))
    else:
        asyncio.run(monitor(db, float(sys.argv[3]), Path(sys.argv[4])))
