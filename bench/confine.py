"""What the kernel's confinement of a run costs at its start (issue 20).

    python bench/confine.py [--tiny] [--reps N] [--json-out FILE]

A real engine in this process runs ``command:`` steps that print the time they start; the
figure is that time minus the moment before ``activate``: the engine noticing the call, the
environment and the bounds made, the step started (through the Landlock launcher when
confined), up to the step's first instruction. Sessions confined (``bound``) and not
(``off``) take turns, one run each at a time (A/B alternating, so that neither side gets the
quieter moments), and the table gives both medians, their difference and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from report import Results, engine_running, environment, publish  # noqa: E402


async def measure(reps: int, folder: Path) -> dict[str, list[float]]:
    from procession import Workspace

    db = folder / "ws.db"
    took: dict[str, list[float]] = {"bound": [], "off": []}
    async with await Workspace.open(db) as ws:
        sids = {mode: (await ws.spawn(mode, "bench", runner="command:date +%s.%N", cwd=str(folder),
                                      confine=mode)).sid for mode in took}
        async with engine_running(db, slots=1):
            for n in range(reps + 1):  # the first round warms up, and is not kept
                for mode, sid in sids.items():
                    before = time.time()
                    await ws.activate(sid)
                    while len([r for r in await ws.runs(sid) if r.ended]) < n + 1:
                        await asyncio.sleep(0.005)
                    started = float((await ws.history(sid))[-1].content)
                    if n:
                        took[mode].append(started - before)
        if not ((await ws.info(sids["bound"])).confinement or "").startswith("landlock"):
            print("warning: the confined runs were not confined by Landlock here", file=sys.stderr)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="a few runs, for the suite")
    parser.add_argument("--reps", type=int, help="runs of each kind (default 40; --tiny 3)")
    parser.add_argument("--json-out")
    args = parser.parse_args()
    reps = args.reps or (3 if args.tiny else 40)
    with tempfile.TemporaryDirectory(prefix="procession-confine-") as tmp:
        took = asyncio.run(measure(reps, Path(tmp)))
        results = Results()
        size = f"{reps} runs each"
        bound = results.record("start_confined", "activate -> step running, confined", size, took["bound"])
        off = results.record("start_unconfined", "activate -> step running, --confine off", size, took["off"])
        results.record("start_overhead", "confinement's cost at a run's start", size,
                       [b - o for b, o in zip(took["bound"], took["off"])],
                       value=bound["median"] - off["median"])
        results.record("start_ratio", "confined / unconfined start", size, [], unit="x",
                       value=bound["median"] / off["median"] if off["median"] else 0.0)
        report = {**results.summary(), "mode": "tiny" if args.tiny else "full", "reps": reps,
                  "environment": environment(Path(tmp))}
        publish(results.rows, report, args.json_out)
        if statistics.median(took["bound"]) <= 0:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
