"""What the kernel's confinement of a run costs at its start (issues 20 and 34).

    python bench/confine.py [--tiny] [--reps N] [--json-out FILE]

A real engine in this process runs ``command:`` steps that print the time they start; the
figure is that time minus the moment before ``activate``: the engine noticing the call, the
environment and the bounds made, the step started (through the Landlock launcher when
confined), up to the step's first instruction. Sessions confined in a world of their own
(``bound``, as every confined run is where the kernel allows it), confined by Landlock alone
(``landlock``: as where no world can be made, the engine told so for those runs) and not
confined (``off``) take turns, one run each at a time (alternating, so that no kind gets the
quieter moments), and the table gives the medians, the differences and the ratio.
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
    from procession.engine import confinement

    db = folder / "ws.db"
    took: dict[str, list[float]] = {"bound": [], "landlock": [], "off": []}
    namespaces = confinement.namespaces
    async with await Workspace.open(db) as ws:
        sids = {mode: (await ws.spawn(mode, "bench", runner="command:date +%s.%N", cwd=str(folder),
                                      confine="off" if mode == "off" else "bound")).sid for mode in took}
        async with engine_running(db, slots=1):
            for n in range(reps + 1):  # the first round warms up, and is not kept
                for mode, sid in sids.items():
                    confinement.namespaces = (lambda: "Landlock alone, for the benchmark") if mode == "landlock" \
                        else namespaces  # type: ignore[assignment]
                    before = time.time()
                    await ws.activate(sid)
                    while len([r for r in await ws.runs(sid) if r.ended]) < n + 1:
                        await asyncio.sleep(0.005)
                    started = float((await ws.history(sid))[-1].content)
                    if n:
                        took[mode].append(started - before)
        confinement.namespaces = namespaces  # type: ignore[assignment]
        said = (await ws.info(sids["bound"])).confinement or ""
        if not said.startswith("landlock") or "world of its own" not in said:
            print(f"warning: the confined runs were not confined in a world of their own here: {said}", file=sys.stderr)
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
        bound = results.record("start_confined", "activate -> step running, confined in its world", size,
                               took["bound"])
        alone = results.record("start_landlock", "activate -> step running, Landlock alone", size, took["landlock"])
        off = results.record("start_unconfined", "activate -> step running, --confine off", size, took["off"])
        results.record("start_overhead", "confinement's cost at a run's start", size,
                       [b - o for b, o in zip(took["bound"], took["off"])],
                       value=bound["median"] - off["median"], goal="< 50 ms", check=lambda v: v < 0.050)
        results.record("world_overhead", "a world's cost over Landlock alone", size,
                       [b - a for b, a in zip(took["bound"], took["landlock"])],
                       value=bound["median"] - alone["median"])
        results.record("start_ratio", "confined / unconfined start", size, [], unit="x",
                       value=bound["median"] / off["median"] if off["median"] else 0.0)
        report = {**results.summary(), "mode": "tiny" if args.tiny else "full", "reps": reps,
                  "environment": environment(Path(tmp))}
        publish(results.rows, report, args.json_out)
        if statistics.median(took["bound"]) <= 0:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
