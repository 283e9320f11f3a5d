"""What idle steps cost the engine that runs them (issue 38).

    python bench/idle.py [--tiny] [--steps N] [--window S] [--reps N] [--before SRC] [--json-out FILE]

A real engine process (``python -m procession --db DB run --slots N``) runs N sessions whose
runner is ``command:sleep 600``: all activated, all running, none printing anything. The
figure is the engine process's own CPU time over a window of W seconds once every step runs
(``psutil``'s user + system time of the engine process, its threads included, its children
excluded: the steps' own CPU is theirs), as a percentage of one core, for no step and for N;
and the engine's thread count then. Each measure is a fresh workspace and a fresh engine, the
median of ``--reps``.

``--before SRC``: the same, alternating, with the engine of another source tree (``SRC`` put
first on the engine's ``PYTHONPATH``: ``/work/main/src`` for the main branch's), and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from report import Results, environment, publish, wait  # noqa: E402

STEP = "command:sleep 600"
#: What the engine is given, once every step runs, before the window opens (its start's work).
SETTLE_S = 2.0


async def workspace(db: Path, steps: int, folder: Path) -> None:
    from procession import Workspace

    async with await Workspace.open(db) as ws:
        for i in range(steps):
            sid = (await ws.spawn(f"idle{i}", "bench", runner=STEP, cwd=str(folder))).sid
            await ws.activate(sid)


def measure(folder: Path, steps: int, window: float, source: str | None) -> dict[str, Any]:
    """One engine on a new workspace of ``steps`` idle sessions: its CPU over ``window``."""
    import psutil

    db = folder / f"idle-{steps}-{time.monotonic_ns()}.db"
    asyncio.run(workspace(db, steps, folder))
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join([source, *filter(None, [env.get("PYTHONPATH")])])
    engine = subprocess.Popen([sys.executable, "-m", "procession", "--db", str(db), "run", "--slots",
                               str(max(steps, 1))], env=env, stderr=subprocess.DEVNULL)
    try:
        with sqlite3.connect(db) as conn:
            wait(lambda: conn.execute("SELECT count(*) FROM runs WHERE ended IS NULL AND pid IS NOT NULL")
                 .fetchone()[0] == steps and conn.execute("SELECT count(*) FROM engines").fetchone()[0] == 1,
                 60 + steps, 0.05)
        time.sleep(SETTLE_S)
        proc = psutil.Process(engine.pid)
        before, t0 = proc.cpu_times(), time.perf_counter()
        time.sleep(window)
        after, t1 = proc.cpu_times(), time.perf_counter()
        threads = proc.num_threads()
        with sqlite3.connect(db) as conn:
            running = conn.execute("SELECT count(*) FROM runs WHERE ended IS NULL").fetchone()[0]
    finally:
        engine.send_signal(signal.SIGTERM)
        engine.wait(timeout=60)
    if running != steps:
        raise SystemExit(f"bench/idle.py: {steps - running} of {steps} steps ended during the window")
    cpu = (after.user + after.system) - (before.user + before.system)
    return {"cpu_pct": 100 * cpu / (t1 - t0), "threads": threads}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="10 steps, a 1 s window, once (the suite runs it)")
    parser.add_argument("--steps", type=int, help="idle steps (default 100; --tiny 10)")
    parser.add_argument("--window", type=float, help="seconds of CPU measured (default 10; --tiny 1)")
    parser.add_argument("--reps", type=int, help="measures of each (default 3; --tiny 1)")
    parser.add_argument("--before", metavar="SRC", help="also measure the engine of this source tree, alternating")
    parser.add_argument("--json-out")
    args = parser.parse_args()
    steps = args.steps or (10 if args.tiny else 100)
    window = args.window or (1.0 if args.tiny else 10.0)
    reps = args.reps or (1 if args.tiny else 3)
    trees: dict[str, str | None] = {"after": None, **({"before": args.before} if args.before else {})}
    figures: dict[str, dict[int, list[dict[str, Any]]]] = {tree: {0: [], steps: []} for tree in trees}
    with tempfile.TemporaryDirectory(prefix="procession-idle-") as tmp:
        for _ in range(reps):
            for n in (0, steps):
                for tree, source in trees.items():  # alternating: no tree gets the quieter moments
                    figures[tree][n].append(measure(Path(tmp), n, window, source))
        results = Results()
        size = f"{window:g} s x {reps}"
        cpu: dict[tuple[str, int], float] = {}
        for tree in trees:
            name = "" if len(trees) == 1 else f" ({tree})"
            for n in (0, steps):
                row = results.record(f"cpu_{n}" + ("" if tree == "after" else "_before"),
                                     f"engine CPU, {n} idle steps{name}", size, [f["cpu_pct"] for f in figures[tree][n]],
                                     unit="%", goal="<= 3 %" if n == steps and steps >= 100 and tree == "after" else "",
                                     check=(lambda v: v <= 3.0) if n == steps and steps >= 100 and tree == "after"
                                     else None)
                cpu[tree, n] = row["median"]
                results.record(f"threads_{n}" + ("" if tree == "after" else "_before"), f"engine threads, {n} idle steps"
                               f"{name}", f"{reps} engines", [f["threads"] for f in figures[tree][n]], unit="threads")
        if "before" in trees:
            for n in (0, steps):
                results.record(f"ratio_{n}", f"engine CPU, {n} idle steps: after / before", size, [], unit="x",
                               value=cpu["after", n] / cpu["before", n] if cpu["before", n] else 0.0)
        report = {**results.summary(), "mode": "tiny" if args.tiny else "full", "steps": steps, "window_s": window,
                  "reps": reps, "before": args.before, "environment": environment(Path(tmp))}
        publish(results.rows, report, args.json_out)


if __name__ == "__main__":
    main()
