"""A process that forks workers for the crash tests: imports once, forks fast.

Protocol on stdin/stdout, one line each: the test writes ``go SEED``; this process forks a
child that runs an engine and a random stream of calls (fork, merge, compress, expand,
export and load, send, activate...) on the workspace given as argv[1], and answers
``pid PID``. The test SIGKILLs that pid whenever it likes; this process reaps it (so that
its lease is seen as dead at once) and answers ``reaped``.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
from pathlib import Path

from procession import ProcessionError, Resolution, Workspace
from procession.engine import Engine


async def workload(db: Path, seed: int) -> None:
    rng = random.Random(seed)
    engine = Engine(db, slots=2, grace=0.2)
    stop = asyncio.Event()
    try:
        await engine.start()
        serving = asyncio.ensure_future(engine.serve(stop))
    except ProcessionError:
        serving = None
    ws = await Workspace.open(db)
    snapshots = db.parent / "snapshots"
    snapshots.mkdir(exist_ok=True)
    for step in range(10_000):
        sessions = [s.id for s in await ws.ps()]
        pick = rng.choice(sessions) if sessions else None
        other = rng.choice(sessions) if sessions else None
        roll = rng.random()
        try:
            if pick is None or roll < 0.08:
                await ws.spawn(f"s{seed}-{step}", rng.choice(["hr", "docs"]), system="you work",
                               runner=rng.choice(["builtin:echo", "builtin:digest", "builtin:sleep:0.3"]))
            elif roll < 0.35:
                await ws.send_many(pick, [{"role": "user", "content": f"m{seed}.{step}.{i} " + "w" * rng.randint(1, 200)}
                                          for i in range(rng.randint(1, 40))])
            elif roll < 0.45:
                info = await ws.info(pick)
                await ws.fork(pick, at=rng.randint(0, info.length))
            elif roll < 0.52 and other != pick:
                await ws.merge(pick, other, Resolution(side="theirs"))
            elif roll < 0.60:
                await ws.compress(pick, keep_last=rng.randint(0, 6))
            elif roll < 0.65:
                await ws.expand(pick)
            elif roll < 0.72:
                file = snapshots / f"{seed}-{step}.json"
                await ws.save(pick, file=str(file))
                loaded = (await ws.load(str(file))).sid
                await ws.approve(loaded)
            elif roll < 0.80:
                await ws.memory_set(pick, f"k{rng.randint(0, 5)}", rng.randint(0, 100))
            elif roll < 0.95:
                await ws.activate(pick)
            else:
                await ws.save(pick, f"cp{seed}-{step}")
        except ProcessionError:
            pass
        await asyncio.sleep(0)
    stop.set()
    if serving:
        await serving


def main() -> None:
    db = Path(sys.argv[1])
    for line in sys.stdin:
        command, _, arg = line.strip().partition(" ")
        if command != "go":
            break
        pid = os.fork()
        if pid == 0:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            try:
                asyncio.run(workload(db, int(arg)))
            finally:
                os._exit(0)
        print(f"pid {pid}", flush=True)
        os.waitpid(pid, 0)
        print("reaped", flush=True)


if __name__ == "__main__":
    main()
