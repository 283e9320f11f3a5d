"""What every benchmark here prints: recorded figures, a table of them, the environment.

Imported by the scripts beside it (``python bench/core.py`` puts this folder first on the
import path).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def options(doc: str, **sizes: Any) -> tuple[argparse.Namespace, Any]:
    """A benchmark's options: its full sizes, or ``--quick`` or ``--tiny`` ones (``mode``),
    ``--reps N``, ``--json-out FILE``; and the sizes of the mode (``sizes``: by mode)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--reps", type=int)
    parser.add_argument("--json-out", metavar="FILE")
    args = parser.parse_args()
    args.mode = "tiny" if args.tiny else "quick" if args.quick else "full"
    return args, sizes.get(args.mode)


class Results:
    """Figures as recorded rows: a median (or a given value), its runs, a goal and whether it is met."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def record(self, key: str, measure: str, size: str, runs: Sequence[float], *, unit: str = "s", goal: str = "",
               ok: bool | None = None, check: Callable[[float], bool] | None = None, value: float | None = None,
               **extra: Any) -> dict[str, Any]:
        median = value if value is not None else statistics.median(runs)
        if check is not None:
            ok = check(median)
        row = {"key": key, "measure": measure, "size": size, "median": median,
               "max": max(runs) if runs else median, "unit": unit, "goal": goal, "ok": ok,
               "runs": [round(r, 6) for r in runs], **extra}
        self.rows.append(row)
        print(f"  {measure} [{size}]: {fmt(median, unit)}" + (f"  (goal {goal}: {'ok' if ok else 'MISSED'})"
                                                               if goal else ""), file=sys.stderr, flush=True)
        return row

    def summary(self) -> dict[str, Any]:
        return {"goals_met": all(r["ok"] for r in self.rows if r["ok"] is not None),
                "results": {r["key"]: {k: v for k, v in r.items() if k != "key"} for r in self.rows}}


def wait(predicate: Callable[[], Any], timeout: float, interval: float = 0.002) -> Any:
    """Poll ``predicate`` until it gives a true value (returned), or ``TimeoutError``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError("condition not met")


def fmt(value: float, unit: str) -> str:
    if unit == "s":
        if value < 0.001:
            return f"{value * 1e6:.0f} µs"
        return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.3f} s"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "%":
        return f"{value:.2f} %"
    if unit == "MB":
        return f"{value:.0f} MB"
    return f"{value:,.0f} {unit}"


def table(rows: list[dict[str, Any]], *, with_max: bool = False) -> str:
    header = ("measure", "size", "median", *(("max",) if with_max else ()), "goal", "ok?")
    lines = [header]
    for r in rows:
        ok = "" if r["ok"] is None else ("ok" if r["ok"] else "MISSED")
        top = (fmt(r["max"], r["unit"]) if len(r["runs"]) > 1 else "",) if with_max else ()
        lines.append((r["measure"], r["size"], fmt(r["median"], r["unit"]), *top, r["goal"] or "-", ok or "-"))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    numbers = {2, 3} if with_max else {2}
    out = ["  ".join(c.rjust(widths[i]) if i in numbers else c.ljust(widths[i]) for i, c in enumerate(line)).rstrip()
           for line in lines]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def publish(rows: list[dict[str, Any]], report: dict[str, Any], json_out: str | None, *,
            with_max: bool = False) -> None:
    """The table, then the whole report as one JSON object on the last line (what the suite
    reads), also written to ``json_out`` when given."""
    text = json.dumps(report)
    print(table(rows, with_max=with_max))
    print(text)
    if json_out:
        Path(json_out).write_text(text + "\n", encoding="utf-8")


#: Runs a command and prints its resource use last on stderr (peak RSS in KB, CPU seconds of
#: user and system). A small process of its own starts the measured one: a child forked from
#: a benchmark (or from pytest) would count its parent's pages in its own peak until it execs.
_LAUNCH = (
    "import os, sys\n"
    "pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ)\n"
    "_, status, usage = os.wait4(pid, 0)\n"
    "print(f'usage={usage.ru_maxrss} {usage.ru_utime + usage.ru_stime}', file=sys.stderr)\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


@dataclass(frozen=True)
class Process:
    """One whole process measured: wall seconds, CPU seconds, peak RSS (MB), its stderr."""

    wall: float
    cpu: float
    rss_mb: int
    stderr: str


def process(args: Sequence[str], env: dict[str, str], cwd: Path) -> Process:
    """Run ``args`` (stdout discarded) and measure it; a failure raises ``RuntimeError`` with
    its last line of stderr."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _LAUNCH, *args], env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, check=False)
    wall = time.perf_counter() - t0
    err, _, last = proc.stderr.rstrip("\n").rpartition("\n")
    if proc.returncode != 0:
        raise RuntimeError((err.strip().splitlines() or ["exit " + str(proc.returncode)])[-1][:200])
    rss, cpu = last.removeprefix("usage=").split()
    return Process(wall, float(cpu), int(rss) // 1024, err)


def environment(root: Path, watched: Sequence[str] = (".",), **extra: Any) -> dict[str, Any]:
    """Where the figures come from: versions, the commit and whether the source had changes."""
    import aiosqlite

    import procession

    source = Path(procession.__file__).resolve().parent
    commit = dirty = None
    try:
        git = ["git", "-C", str(source)]
        commit = subprocess.run([*git, "rev-parse", "HEAD"], text=True, capture_output=True, check=True).stdout.strip()
        dirty = bool(subprocess.run([*git, "status", "--porcelain", "--", *watched], text=True, capture_output=True,
                                    check=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        pass  # not a git checkout (an installed or copied package)
    try:
        load: Any = os.getloadavg()
    except OSError:
        load = None
    return {
        "python": sys.version.split()[0], "python_implementation": platform.python_implementation(),
        "sqlite": sqlite3.sqlite_version, "aiosqlite": getattr(aiosqlite, "__version__", None),
        "procession": procession.__version__, "procession_source": str(source), "commit": commit,
        "source_modified": dirty, "cpu_count": os.cpu_count(), "platform": platform.platform(),
        "machine": platform.machine(), "loadavg_at_start": load, "tmpdir": str(root), **extra,
    }


@contextlib.asynccontextmanager
async def engine_running(db: Path, slots: int = 1, notify: Any = None) -> AsyncIterator[Any]:
    """An engine on ``db`` in this process, serving until the block ends; sending notifications
    as ``notify`` says, and pricing by the built-in table (never by the config file of whoever
    runs the bench), when ``notify`` is given."""
    import asyncio

    from procession.engine import Engine
    from procession.model.prices import Prices

    engine = Engine(db, slots=slots, grace=0.5, **({"notify": notify, "prices": Prices()} if notify else {}))
    await engine.start()
    stop = asyncio.Event()
    task = asyncio.ensure_future(engine.serve(stop))
    try:
        yield engine
    finally:
        stop.set()
        await task

