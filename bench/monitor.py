#!/usr/bin/env python3
"""The monitor benchmark: the Textual app (``procession.tui``) on big workspaces.

    python bench/monitor.py [--quick | --tiny] [--json-out FILE] [--reps N] [--idle S] [--sizes 1000,10000]
                            [--profile DIR] [--keep]

Builds workspaces of 1,000, 10,000 and 100,000 sessions in a temporary folder (rows are
bulk-inserted with plain sqlite3, mirroring what ``Workspace.spawn`` and the lifecycle calls
write), then for each size measures, every time in a fresh process:

* in a pseudo-terminal (the real Linux driver, 160x45): the time from ``app.run()`` to the
  first frame that shows session rows, the CPU the process uses while idle (``--idle``
  seconds, default 20), its resident memory (now and peak);
* headless (``app.run_test(size=(160, 45))``): the event-loop time of a refresh tick after
  another connection changed 1 % of the sessions, split into its phases, and the same for a
  tick with nothing changed.

Prints a table (measure, size, median, max, goal, ok?) and then one JSON object with every
figure, the raw runs, the setup times and the environment. ``--quick`` measures 1,000 and
10,000 sessions only, with fewer runs and a 6 s idle window; the goals (stated for 100,000
sessions) are then checked against the largest size, as an indication only.
``--profile DIR`` adds one untimed, profiled run per size (cProfile of the start and of the
ticks, pyinstrument if installed, tracemalloc of the start) and writes the reports there.

Needs Procession importable (``pip install -e .``) and psutil. Linux (uses /proc and a pty).
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import importlib.util
import json
import os
import pty
import random
import select
import shutil
import signal
import sqlite3
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from report import Results, environment, table, wait

try:
    from procession import Workspace
except ImportError:  # pragma: no cover - a usage error, not a benchmark result
    sys.exit("bench/monitor.py: procession is not importable; run `pip install -e .` first")

FULL = {"sizes": (1_000, 10_000, 100_000), "reps": 5, "ticks": 15, "variant_ticks": 7, "idle_s": 20.0}
QUICK = {"sizes": (1_000, 10_000), "reps": 3, "ticks": 7, "variant_ticks": 3, "idle_s": 6.0}
TINY = {"sizes": (100,), "reps": 1, "ticks": 2, "variant_ticks": 1, "idle_s": 1.0}

SCREEN = (160, 45)  # columns, lines
CHANGED_FRACTION = 0.01  # of the sessions, changed by another connection before each measured tick
GOAL_SIZE = 100_000
GOAL_PAINT_S = 1.0
GOAL_TICK_S = 0.020
GOAL_RSS_MB = 300.0
GOAL_IDLE_CPU = 3.0  # % of one core
SETTLE_S = 2.0  # after the whole workspace is read, before the idle window opens
MARKER = "bench-000001"  # the name of session 1: on the first screen in the default order (SID)

HERE = Path(__file__).resolve()

# ---------------------------------------------------------------- the workspace

_TOPICS = ("payroll", "triage", "refactor", "report", "review", "migrate", "docs", "billing")
_GOAL_WORDS = (
    "reconcile the november payroll run against the finance ledger and flag every employee row without a"
    " cost centre then regenerate the summary sheet attach it to the ticket and ask the reviewer for sign-off"
    " before friday keeping the overtime table unchanged unless the new rates file says otherwise"
).split()


def _goal(rng: random.Random) -> str:
    n = rng.randint(18, 45)
    start = rng.randrange(len(_GOAL_WORDS))
    return " ".join(_GOAL_WORDS[(start + k) % len(_GOAL_WORDS)] for k in range(n)).capitalize() + "."


async def _create(path: Path) -> None:
    ws = await Workspace.open(path)  # the schema, the meta rows, WAL
    await ws.close()


def build_workspace(path: Path, n: int, seed: int = 5) -> dict[str, Any]:
    """A workspace of ``n`` sessions, bulk-inserted with sqlite3 as the engine's calls would leave it.

    Mirrors ``Workspace._insert_session`` (a uuid, an agent row, ``created``/``last_active``,
    a ``rev`` per call, ``system_tokens`` counted into ``context_tokens``) and the calls a
    session lives through: states mixed as in bench/core.py (40 % sleeping, 20 % ready with a
    queue time and causes, 20 % suspended with the state to resume to, 20 % terminated with a
    reason; two running with a live ``runs`` row), one session in 50 a fork of the one before
    (some unapproved), a third with a goal, ~37 % with triggers (every, cron, watch, after;
    some fired), varied context sizes, and one ``spawn`` journal row per session.
    """
    asyncio.run(_create(path))
    rng = random.Random(seed)
    now = time.time()
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA synchronous = OFF")
    con.execute("BEGIN")
    agents = [(i + 1, f"agent-{i:02d}", now - 90 * 86400) for i in range(20)]
    con.executemany("INSERT INTO agents (id, name, created) VALUES (?, ?, ?)", agents)
    sessions, triggers, runs, journal = [], [], [], []
    cwd = "/home/user/projects/payroll"
    running = {4, n // 2 + 4} if n > 8 else set()
    states: dict[str, int] = {}
    for i in range(1, n + 1):
        fork = i % 50 == 0 and i > 1
        created = now - rng.uniform(60, 30 * 86400)
        last_active = created + rng.uniform(0, now - created)
        system = "You are a helpful agent." if i % 2 else ""
        system_tokens = 6 if system else 0
        window = 128_000 if i % 5 else 32_000
        context_tokens = system_tokens + int(rng.betavariate(1.2, 4) * window * 1.05)
        count = rng.randint(0, 400)
        length = count + rng.randint(0, 200)
        name = f"{sessions[-1][3]} fork" if fork else f"bench-{i:06d} {_TOPICS[i % len(_TOPICS)]}"
        state, reason, resume_to, queued_at, causes, merged_into = "sleeping", None, None, None, None, None
        match i % 10:
            case 0 | 5:
                state, queued_at = "ready", last_active
                causes = json.dumps([{"call": "activate", "actor": "cli", "at": last_active}])
            case 1:
                state, resume_to = "suspended", "sleeping"
            case 3:
                state, resume_to = "suspended", "ready"
            case 2 | 7:
                state = "terminated"
                reason = ("cancelled", "done", "failed", "merged")[i // 10 % 4]
                merged_into = i - 1 if reason == "merged" and i > 1 else None
                reason = reason if merged_into or reason != "merged" else "done"
        if i in running:
            state, reason, resume_to = "running", None, None
            runs.append((i, "activate", now - 42.0, os.getpid(), now - 42.0, "bench", 37.5, 180 << 20))
        states[state] = states.get(state, 0) + 1
        armed = 0 if fork and i % 100 == 0 else 1
        sessions.append((
            i, str(uuid.UUID(int=rng.getrandbits(128), version=4)), (i % 20) + 1, name,
            _goal(rng) if i % 3 == 0 else "", system, system_tokens, i % 7 - 3, state, reason, resume_to,
            "builtin:digest" if i % 4 else "openai:gpt-4o-mini", window, None, cwd, armed,
            i - 1 if fork else None, length // 2 if fork else 0, "{}" if fork else None, merged_into,
            length, context_tokens + rng.randint(0, 5_000), context_tokens, count, created, last_active,
            queued_at, causes, i,
        ))
        fired = last_active - rng.uniform(0, 3600) if i % 3 == 0 else None
        if i % 7 == 0:
            triggers.append((i, "every", json.dumps({"seconds": 300.0, "text": "5m"}), armed, created, fired,
                             1 if fired else 0))
        if i % 11 == 0:
            triggers.append((i, "cron", json.dumps({"expr": "0 9 * * 1-5"}), armed, created, None, 0))
        if i % 13 == 0:
            triggers.append((i, "watch", json.dumps({"paths": [f"{cwd}/src/**/*.py"], "debounce_ms": 500}), armed,
                             created, fired, 2 if fired else 0))
        if i % 17 == 0 and i > 1:
            triggers.append((i, "after", json.dumps({"session": i - 1}), armed, created, None, 0))
        journal.append((created, "cli", "spawn", i, None, json.dumps({"name": name, "agent": f"agent-{i % 20:02d}"}),
                        json.dumps({"id": i})))
    con.executemany(
        "INSERT INTO sessions (id, uuid, agent_id, name, goal, system, system_tokens, priority, state, reason,"
        " resume_to, runner, window, timeout, cwd, armed, parent_id, fork_seq, base_memory, merged_into, length,"
        " history_tokens, context_tokens, context_count, created, last_active, queued_at, causes, rev)"
        " VALUES (" + ", ".join("?" * 29) + ")", sessions)
    con.executemany("INSERT INTO triggers (session_id, kind, spec, armed, created, last_fired, fired)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)", triggers)
    con.executemany("INSERT INTO runs (session_id, cause, started, pid, proc_start, engine, cpu, rss)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)", runs)
    con.executemany("INSERT INTO journal (ts, actor, call, session_id, other_id, args, outcome)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)", journal)
    con.execute("UPDATE meta SET value = ? WHERE key = 'rev'", (str(n),))
    con.execute("COMMIT")
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.execute("ANALYZE")
    con.close()
    return {"sessions": n, "states": states, "triggers": len(triggers), "forks": sum(1 for s in sessions if s[16]),
            "file_bytes": path.stat().st_size}


class Changer:
    """Another connection that changes sessions as calls would: one transaction, a new ``rev``.

    Each change picks ``k`` live sessions at random and moves their context (tokens, count,
    length, last activity), as a run step appending messages does; one in ten flips between
    sleeping and ready (activate / a finished run)."""

    def __init__(self, path: Path, seed: int = 9) -> None:
        self.con = sqlite3.connect(path, isolation_level=None, timeout=10)
        self.rng = random.Random(seed)
        self.live = [r[0] for r in self.con.execute(
            "SELECT id FROM sessions WHERE state IN ('sleeping', 'ready', 'suspended')")]

    def change(self, k: int) -> int:
        ids = self.rng.sample(self.live, min(k, len(self.live)))
        now = time.time()
        con = self.con
        con.execute("BEGIN IMMEDIATE")
        rev = int(con.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'rev'"
                              " RETURNING value").fetchone()[0])
        con.executemany(
            "UPDATE sessions SET context_tokens = context_tokens + ?, history_tokens = history_tokens + ?,"
            " context_count = context_count + 2, length = length + 2, last_active = ?, rev = ? WHERE id = ?",
            [(t, t, now, rev, sid) for sid, t in ((sid, self.rng.randint(50, 900)) for sid in ids)])
        flips = ids[: len(ids) // 10]
        con.executemany(
            "UPDATE sessions SET state = CASE state WHEN 'sleeping' THEN 'ready' WHEN 'ready' THEN 'sleeping'"
            " ELSE state END, queued_at = CASE state WHEN 'sleeping' THEN ? ELSE NULL END WHERE id = ?",
            [(now, sid) for sid in flips])
        con.execute("COMMIT")
        return rev

    def close(self) -> None:
        self.con.close()


# ---------------------------------------------------------------- event-loop accounting


class LoopClock:
    """Time spent running event-loop callbacks, measured by wrapping ``asyncio.Handle._run``.

    Every callback the loop runs (a task step, a future's done-callback, a timer, a
    ``call_soon_threadsafe`` from aiosqlite's thread) goes through ``Handle._run``, so the sum
    of their durations is the time the loop was busy, i.e. could not react to a key or draw;
    the time it sat in ``select()`` waiting is not counted. ``longest`` is the longest single
    callback (the worst stall within a window). Busy time is also kept per task, and per
    "owner": Textual's message pumps by widget class (``pump Footer``), other tasks by their
    coroutine, so a window can say who used the loop. Cyclic-GC pauses are summed apart
    (``gc.callbacks``); they happen inside callbacks, so they are part of the busy time too."""

    def __init__(self) -> None:
        self.busy = 0.0
        self.longest = 0.0
        self.gc = 0.0
        self.by_owner: dict[str, float] = {}
        self.by_task: dict[int, float] = {}
        self._start = 0.0
        self._task: Any = None
        self._gc_start = 0.0
        self._names: dict[int, str] = {}

    def _owner(self, task: Any) -> str:
        key = id(task)
        name = self._names.get(key)
        if name is None:
            label = task.get_name()
            coro = getattr(task.get_coro(), "__qualname__", "?")
            if label.startswith("message pump "):
                name = "pump " + label[len("message pump "):].split("(")[0]
            elif coro == "Timer._run_timer":
                name = f"timer {label}"
            elif label.startswith("Task-"):
                name = coro
            else:
                name = f"{coro} ({label.split('(')[0]})"
            self._names[key] = name
        return name

    def install(self) -> None:
        import gc

        orig = asyncio.events.Handle._run
        clock = self
        perf = time.perf_counter

        def _run(handle: asyncio.Handle) -> None:
            owner = getattr(handle._callback, "__self__", None)
            task = owner if isinstance(owner, asyncio.Task) else None
            clock._task = task
            t0 = clock._start = perf()
            try:
                orig(handle)
            finally:
                dt = perf() - t0
                clock._start = 0.0
                clock._task = None
                clock.busy += dt
                if dt > clock.longest:
                    clock.longest = dt
                if task is not None:
                    clock.by_task[id(task)] = clock.by_task.get(id(task), 0.0) + dt
                    name = clock._owner(task)
                else:
                    cb = handle._callback
                    name = "callback " + getattr(cb, "__qualname__", type(cb).__name__)
                clock.by_owner[name] = clock.by_owner.get(name, 0.0) + dt

        def on_gc(phase: str, info: dict[str, Any]) -> None:
            if phase == "start":
                clock._gc_start = perf()
            elif clock._gc_start:
                clock.gc += perf() - clock._gc_start
                clock._gc_start = 0.0

        asyncio.events.Handle._run = _run  # type: ignore[method-assign]
        gc.callbacks.append(on_gc)

    def now(self) -> float:
        """Busy time so far, counting the callback running now up to this instant."""
        return self.busy + (time.perf_counter() - self._start if self._start else 0.0)

    def task_now(self, task: Any) -> float:
        """Busy time of one task so far (its own steps only), up to this instant."""
        running = time.perf_counter() - self._start if self._start and self._task is task else 0.0
        return self.by_task.get(id(task), 0.0) + running


def rss_mb(pid: int | str = "self") -> tuple[float, float]:
    """(current, peak) resident set size in MB, from /proc/PID/status (VmRSS, VmHWM)."""
    values = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, kb, _ = line.split()
                values[key[:-1]] = int(kb) / 1024
    return values.get("VmRSS", 0.0), values.get("VmHWM", 0.0)


# ---------------------------------------------------------------- child: the app in a pty


def child_app(db: str, stamp: str) -> int:
    """Run the monitor as a user would (real driver), recording when ``run()`` was called."""
    t_import = time.time()
    import asyncio

    from procession.tui import app as app_mod
    from procession.tui.app import run_monitor
    from procession.tui.config import Config

    loaded = app_mod.ProcessionApp._loaded

    async def _loaded(app: Any) -> None:  # the whole workspace read: idle begins after this
        await loaded(app)
        Path(stamp).with_suffix(".loaded").write_text(json.dumps(time.time()), encoding="utf-8")

    app_mod.ProcessionApp._loaded = _loaded  # type: ignore[method-assign]
    t_run = time.time()
    Path(stamp).write_text(json.dumps({"t_import": t_import, "t_run": t_run}), encoding="utf-8")
    return asyncio.run(run_monitor(db, engine=False, config=Config(), user_themes=Path(stamp).with_suffix(".themes")))


class PtyRun:
    """The app in a pseudo-terminal; a thread drains its output and notes when MARKER appears."""

    def __init__(self, db: Path, root: Path, tag: str) -> None:
        self.stamp = root / f"stamp-{tag}.json"
        self.stamp.unlink(missing_ok=True)
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", SCREEN[1], SCREEN[0], 0, 0))
        env = {k: v for k, v in os.environ.items() if not k.startswith("TEXTUAL")}
        env.update(TERM="xterm-256color", COLORTERM="truecolor", COLUMNS=str(SCREEN[0]), LINES=str(SCREEN[1]))
        self.t_spawn = time.time()
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE), "--child", "app", str(db), str(self.stamp)],
            stdin=slave, stdout=slave, stderr=slave, env=env, cwd=root, start_new_session=True, close_fds=True)
        os.close(slave)
        self.master = master
        self.t_paint: float | None = None
        self.bytes = 0
        self.tail = b""
        self.painted = threading.Event()
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        marker = MARKER.encode()
        while True:
            try:
                ready, _, _ = select.select([self.master], [], [], 0.5)
                if not ready:
                    if self.proc.poll() is not None:
                        return
                    continue
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            now = time.time()
            with self.lock:
                self.bytes += len(data)
            if self.t_paint is None:
                window = self.tail + data
                if marker in window:
                    self.t_paint = now
                    self.painted.set()
                self.tail = window[-len(marker):]

    def wait_paint(self, timeout: float = 120.0) -> None:
        if not self.painted.wait(timeout):
            self.stop()
            raise RuntimeError(f"the monitor did not show a row within {timeout:.0f} s")

    def output_bytes(self) -> int:
        with self.lock:
            return self.bytes

    def starts(self) -> dict[str, float]:
        return json.loads(self.stamp.read_text(encoding="utf-8"))

    def wait_loaded(self, timeout: float = 300.0) -> float:
        """When the monitor had read the whole workspace (the rest loads after the first paint)."""
        done = self.stamp.with_suffix(".loaded")
        return float(json.loads(wait(lambda: done.exists() and done.read_text(encoding="utf-8"), timeout)))

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.write(self.master, b"q")
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.reader.join(timeout=2)
        os.close(self.master)


def measure_pty(db: Path, root: Path, reps: int, idle_s: float) -> dict[str, Any]:
    """First paint (``reps`` processes) and, in the last one, idle CPU and memory."""
    import psutil

    paint, paint_spawn, loaded, rss_now, rss_peak = [], [], [], [], []
    idle: dict[str, Any] = {}
    for i in range(reps + 1):  # run 0 is an untimed warm-up (file cache, .pyc)
        run = PtyRun(db, root, f"{db.stem}-{i}")
        try:
            run.wait_paint()
            starts = run.starts()
            if i:
                paint.append(run.t_paint - starts["t_run"])
                paint_spawn.append(run.t_paint - run.t_spawn)
            done = run.wait_loaded()
            if i:
                loaded.append(done - starts["t_run"])
            time.sleep(SETTLE_S)
            if i == reps:
                proc = psutil.Process(run.proc.pid)
                c0, b0, t0 = proc.cpu_times(), run.output_bytes(), time.perf_counter()
                time.sleep(idle_s)
                c1, b1, t1 = proc.cpu_times(), run.output_bytes(), time.perf_counter()
                wall = t1 - t0
                cpu = (c1.user - c0.user) + (c1.system - c0.system)
                idle = {"seconds": round(wall, 2), "cpu_s": round(cpu, 4), "cpu_pct": 100 * cpu / wall,
                        "user_s": round(c1.user - c0.user, 4), "system_s": round(c1.system - c0.system, 4),
                        "threads": proc.num_threads(), "output_bytes_per_s": round((b1 - b0) / wall)}
            if i:
                now, peak = rss_mb(run.proc.pid)
                rss_now.append(now)
                rss_peak.append(peak)
        finally:
            run.stop()
    return {"paint_s": paint, "paint_from_spawn_s": paint_spawn, "loaded_s": loaded, "rss_mb": rss_now,
            "rss_peak_mb": rss_peak, "idle": idle}


# ---------------------------------------------------------------- child: headless ticks


def child_ticks(db: str, out: str, ticks: int, variant_ticks: int, profile_dir: str, kind: str) -> int:
    result = asyncio.run(_ticks(Path(db), ticks, variant_ticks, Path(profile_dir) if profile_dir else None, kind))
    Path(out).write_text(json.dumps(result), encoding="utf-8")
    return 0


async def _ticks(db: Path, ticks: int, variant_ticks: int, profile: Path | None, kind: str) -> dict[str, Any]:
    """In this fresh process: start the app headless, time the first paint, then ticks."""
    import procession.tui.app as app_mod
    from procession.store.sqlite import SqliteStore as Store
    from procession.tui.config import Config
    from procession.tui.table import SessionTable
    from procession.tui.view import View

    loop_clock = LoopClock()
    loop_clock.install()
    phases: dict[str, list[tuple[float, float]]] = {}
    recording = [False]

    def timed_async(owner: Any, name: str, key: str) -> None:
        orig = getattr(owner, name)

        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            task = asyncio.current_task()
            w0, b0 = time.perf_counter(), loop_clock.task_now(task)
            try:
                return await orig(*args, **kwargs)
            finally:
                if recording[0]:  # (wall time, loop time of this task's own steps: its Python work)
                    phases.setdefault(key, []).append((time.perf_counter() - w0, loop_clock.task_now(task) - b0))

        setattr(owner, name, wrapper)

    def timed_sync(owner: Any, name: str, key: str) -> None:
        orig = getattr(owner, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            w0 = time.perf_counter()
            try:
                return orig(*args, **kwargs)
            finally:
                if recording[0]:
                    dt = time.perf_counter() - w0
                    phases.setdefault(key, []).append((dt, dt))

        setattr(owner, name, wrapper)

    # Phases of a tick, wrapped in this process only (the app's code is not changed).
    timed_async(Store, "data_version", "data_version")
    timed_async(Workspace, "changes", "changes")
    timed_async(Workspace, "activity", "activity")
    timed_sync(View, "update", "view.update")  # which rows move, moved one by one or re-sorted
    from procession.tui.main import MainScreen

    timed_sync(MainScreen, "rebuild", "rebuild")  # a full re-sort + table.show

    ws = await Workspace.open(db, actor="tui")
    app = app_mod.ProcessionApp(ws, engine=False, config=Config(), user_themes=db.with_suffix(".themes"))
    marks: dict[str, float] = {}
    drew_rows = [False]
    orig_render_line = SessionTable.render_line

    def render_line(table: SessionTable, y: int) -> Any:
        if table.keys and int(table.scroll_offset.y) + y < len(table.keys):
            drew_rows[0] = True
        return orig_render_line(table, y)

    SessionTable.render_line = render_line  # type: ignore[method-assign]
    orig_display = app._display

    def display(screen: Any, renderable: Any) -> None:
        orig_display(screen, renderable)
        marks["last_display"] = time.perf_counter()
        if "paint" not in marks and drew_rows[0] and renderable is not None:
            marks["paint"] = time.perf_counter()
            marks["paint_busy"] = loop_clock.now()

    app._display = display  # type: ignore[method-assign]

    prof = _Profiles(profile, f"{db.stem}", kind) if profile else None
    recording[0] = True
    if prof:
        prof.start("startup")
    t0, b0 = time.perf_counter(), loop_clock.now()
    result: dict[str, Any] = {}
    async with app.run_test(size=SCREEN) as pilot:
        while "paint" not in marks:
            await asyncio.sleep(0.005)
        if prof:
            prof.stop("startup")
        result["paint_s"] = marks["paint"] - t0
        result["paint_busy_s"] = marks["paint_busy"] - b0
        result["startup_phases"] = {k: [[round(w, 6), round(b, 6)] for w, b in v] for k, v in phases.items()}
        result["rss_after_paint_mb"], result["rss_peak_after_paint_mb"] = rss_mb()
        while not app.loaded:  # the rest of a big workspace loads in pages after the first paint
            await asyncio.sleep(0.01)
        result["loaded_s"] = time.perf_counter() - t0
        await pilot.pause(0.5)
        app.workers.cancel_group(app, "poll")  # from here on, ticks are driven one at a time by this loop
        await pilot.pause(0.3)
        n = len(app.feed.sessions)
        k = max(1, round(n * CHANGED_FRACTION))
        changer = Changer(db)

        async def one_tick(change: bool, full: bool = True) -> dict[str, Any]:
            if change:
                changer.change(k)
            await asyncio.sleep(0.05)
            phases.clear()
            # A measured tick also takes the once-a-second branch (header, ages) unless full=False.
            app._last_tick = 0.0 if full else time.time() + 3600
            loop_clock.longest = 0.0
            owners0, gc0 = dict(loop_clock.by_owner), loop_clock.gc
            cpu0 = time.process_time()
            w0, b0 = time.perf_counter(), loop_clock.now()
            rev0 = app.feed.rev
            await app.tick()
            w1, b1 = time.perf_counter(), loop_clock.now()
            marks.pop("last_display", None)
            await asyncio.sleep(0.25)  # Textual draws the refreshed widgets in its own callbacks (<= 1 frame)
            b2 = loop_clock.now()
            cpu = time.process_time() - cpu0
            if change and app.feed.rev == rev0:
                raise RuntimeError("the tick did not see the change")
            owners = {name: busy - owners0.get(name, 0.0) for name, busy in loop_clock.by_owner.items()}
            return {
                "wall_tick": w1 - w0, "loop_tick": b1 - b0, "loop_render": b2 - b1, "loop_total": b2 - b0,
                "longest_callback": loop_clock.longest, "gc": loop_clock.gc - gc0, "process_cpu": cpu,
                "drew": "last_display" in marks,
                "phases": {key: [sum(w for w, _ in v), sum(b for _, b in v)] for key, v in phases.items()},
                "owners": {name: round(v, 6) for name, v in owners.items() if v >= 0.0001},
            }

        async def baseline() -> float:
            """Loop time over 0.3 s with nothing happening (reported, to show the window is quiet)."""
            b0 = loop_clock.now()
            await asyncio.sleep(0.3)
            return loop_clock.now() - b0

        result["changed_per_tick"] = k
        result["baseline_loop_per_0.3s"] = await baseline()
        if prof:
            prof.start("tick")
        result["ticks"] = [await one_tick(True) for _ in range(ticks + 1)][1:]  # first one untimed
        if prof:
            prof.stop("tick")
        result["idle_ticks"] = [await one_tick(False) for _ in range(variant_ticks + 1)][1:]
        result["data_ticks"] = [await one_tick(True, full=False) for _ in range(variant_ticks + 1)][1:]
        app.feed.view.spec.sort, app.feed.view.spec.reverse = "context", True
        app.main.rebuild()
        result["ticks_sort_context"] = [await one_tick(True) for _ in range(variant_ticks + 1)][1:]
        app.feed.view.spec.sort, app.feed.view.spec.reverse, app.feed.view.spec.tree = "sid", False, True
        app.main.rebuild()
        result["ticks_tree"] = [await one_tick(True) for _ in range(variant_ticks + 1)][1:]
        app.feed.view.spec.tree = False
        app.main.rebuild()
        result["rss_after_ticks_mb"], result["rss_peak_mb"] = rss_mb()
        result["sessions"] = n
        changer.close()
    if prof:
        prof.write()
    if profile and kind == "cprofile":
        result["memory_top"] = await _memory_profile(db, profile)
    await ws.close()
    return result


class _Profiles:
    """cProfile or pyinstrument (they cannot run together) of named stretches of this process."""

    def __init__(self, folder: Path, tag: str, kind: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder, self.tag, self.kind = folder, tag, kind
        if kind == "cprofile":
            import cProfile

            self.profs: dict[str, Any] = {"startup": cProfile.Profile(), "tick": cProfile.Profile()}
        else:
            from pyinstrument import Profiler

            self.profs = {k: Profiler(interval=0.0002, async_mode="disabled") for k in ("startup", "tick")}

    def start(self, name: str) -> None:
        prof = self.profs[name]
        prof.enable() if self.kind == "cprofile" else prof.start()

    def stop(self, name: str) -> None:
        prof = self.profs[name]
        prof.disable() if self.kind == "cprofile" else prof.stop()

    def write(self) -> None:
        import io
        import pstats

        for name, prof in self.profs.items():
            base = self.folder / f"{self.tag}-{name}"
            if self.kind == "cprofile":
                prof.dump_stats(f"{base}.pstats")
                text = io.StringIO()
                stats = pstats.Stats(prof, stream=text)
                stats.sort_stats("tottime").print_stats(30)
                stats.sort_stats("cumulative").print_stats(60)
                Path(f"{base}.cprofile.txt").write_text(text.getvalue(), encoding="utf-8")
            else:
                Path(f"{base}.pyinstrument.txt").write_text(
                    prof.output_text(unicode=True, color=False, show_all=False), encoding="utf-8")
                Path(f"{base}.pyinstrument.html").write_text(prof.output_html(), encoding="utf-8")


async def _memory_profile(db: Path, folder: Path) -> list[str]:
    """Where the memory of a started monitor is, by allocating line (tracemalloc), in a new app."""
    import tracemalloc

    from procession.tui.app import ProcessionApp
    from procession.tui.config import Config

    tracemalloc.start(1)
    ws = await Workspace.open(db, actor="tui")
    app = ProcessionApp(ws, engine=False, config=Config(), user_themes=db.with_suffix(".themes"))
    async with app.run_test(size=SCREEN) as pilot:
        while not app.loaded:
            await asyncio.sleep(0.01)
        await pilot.pause(0.3)
        snap = tracemalloc.take_snapshot()
        current, peak = tracemalloc.get_traced_memory()
    await ws.close()
    tracemalloc.stop()
    lines = [f"traced now {current / 2**20:.1f} MB, traced peak {peak / 2**20:.1f} MB"]
    for stat in snap.statistics("lineno")[:25]:
        frame = stat.traceback[0]
        lines.append(f"{stat.size / 2**20:8.1f} MB {stat.count:9,d} blocks  {frame.filename}:{frame.lineno}")
    (folder / f"{db.stem}-memory.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return lines


def measure_ticks(db: Path, root: Path, sizes: dict[str, Any], profile: Path | None = None,
                  kind: str = "") -> dict[str, Any]:
    out = root / f"ticks-{db.stem}.json"
    cmd = [sys.executable, str(HERE), "--child", "ticks", str(db), str(out), str(sizes["ticks"]),
           str(sizes["variant_ticks"]), str(profile or ""), kind]
    proc = subprocess.run(cmd, cwd=root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"headless run on {db.name} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(out.read_text(encoding="utf-8"))


# ---------------------------------------------------------------- report


PHASES = ("data_version", "changes", "view.update", "rebuild", "activity")


def split(ticks: list[dict[str, Any]]) -> dict[str, float]:
    """Median loop time of a tick by part: the tick's own phases (its task's Python work in
    each awaited call), then every owner of loop time in the window (Textual's message pumps
    by widget class, other tasks, bare callbacks), then GC pauses (inside those)."""
    out: dict[str, float] = {}
    for key in PHASES:
        out[f"tick: {key}"] = statistics.median(t["phases"].get(key, [0.0, 0.0])[1] for t in ticks)
        out[f"tick: {key} (wall)"] = statistics.median(t["phases"].get(key, [0.0, 0.0])[0] for t in ticks)
    names = sorted({name for t in ticks for name in t["owners"]})
    owners = {name: statistics.median(t["owners"].get(name, 0.0) for t in ticks) for name in names}
    for name, value in sorted(owners.items(), key=lambda kv: -kv[1]):
        out[f"loop: {name}"] = value
    out["gc pauses (within the above)"] = statistics.median(t["gc"] for t in ticks)
    out["total loop time"] = statistics.median(t["loop_total"] for t in ticks)
    return {k: round(v, 6) for k, v in out.items()}


def split_table(res: Results) -> str:
    """Where the loop time of the 1%-changed tick goes, per size (medians, ms)."""
    rows = [r for r in res.rows if r["key"].startswith("tick_loop_")]
    if not rows:
        return ""
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r["split"] if k not in keys and (r["split"][k] >= 0.0002 or k.startswith("tick:"))]
    header = ["part of a 1%-changed tick (median ms)"] + [r["size"].replace(" sessions", "") for r in rows]
    lines_ = [header] + [[k] + [f"{r['split'].get(k, 0.0) * 1000:.2f}" for r in rows] for k in keys]
    widths = [max(len(line[i]) for line in lines_) for i in range(len(header))]
    out = ["  ".join(c.ljust(widths[0]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(line)).rstrip()
           for line in lines_]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def report_size(res: Results, n: int, pty_m: dict[str, Any], ticks: dict[str, Any], goal_size: int) -> None:
    size = f"{n:,} sessions"
    big = n == goal_size
    res.record(f"paint_{n}", "first paint, pty (app.run() to a row on screen)", size, pty_m["paint_s"],
               goal=f"< {GOAL_PAINT_S:g} s" if big else "", check=(lambda v: v < GOAL_PAINT_S) if big else None,
               from_spawn_s=pty_m["paint_from_spawn_s"])
    res.record(f"loaded_{n}", "whole workspace read, pty (app.run() to the last page)", size, pty_m["loaded_s"])
    res.record(f"paint_headless_{n}", "first paint, headless (run_test to a frame with rows)", size,
               [ticks["paint_s"]], loop_busy_s=ticks["paint_busy_s"], phases=ticks["startup_phases"])
    loop = [t["loop_total"] for t in ticks["ticks"]]
    res.record(f"tick_loop_{n}", f"tick, {ticks['changed_per_tick']:,} changed: event-loop time", size, loop,
               goal=f"< {GOAL_TICK_S * 1000:g} ms" if big else "",
               check=(lambda v: v < GOAL_TICK_S) if big else None,
               loop_tick=[round(t["loop_tick"], 6) for t in ticks["ticks"]],
               loop_render=[round(t["loop_render"], 6) for t in ticks["ticks"]],
               split=split(ticks["ticks"]))
    res.record(f"tick_longest_{n}", "  longest single callback in that tick", size,
               [t["longest_callback"] for t in ticks["ticks"]])
    res.record(f"tick_wall_{n}", "  wall time of await app.tick()", size, [t["wall_tick"] for t in ticks["ticks"]],
               process_cpu=[round(t["process_cpu"], 6) for t in ticks["ticks"]])
    res.record(f"tick_data_{n}", "tick, 1% changed, without the 1 s header/ages branch: loop", size,
               [t["loop_total"] for t in ticks["data_ticks"]], split=split(ticks["data_ticks"]))
    res.record(f"tick_idle_{n}", "tick, nothing changed (header + ages): event-loop time", size,
               [t["loop_total"] for t in ticks["idle_ticks"]], split=split(ticks["idle_ticks"]))
    res.record(f"tick_sort_{n}", "tick, 1% changed, sorted by CONTEXT desc: loop time", size,
               [t["loop_total"] for t in ticks["ticks_sort_context"]])
    res.record(f"tick_tree_{n}", "tick, 1% changed, tree view: loop time", size,
               [t["loop_total"] for t in ticks["ticks_tree"]])
    res.record(f"rss_{n}", "memory, pty process after start (VmRSS)", size, pty_m["rss_mb"], unit="MB",
               headless_after_ticks_mb=ticks["rss_after_ticks_mb"])
    res.record(f"rss_peak_{n}", "memory, pty process peak (VmHWM)", size, pty_m["rss_peak_mb"], unit="MB",
               goal=f"< {GOAL_RSS_MB:g} MB" if big else "", check=(lambda v: v < GOAL_RSS_MB) if big else None)
    idle = pty_m["idle"]
    res.record(f"idle_cpu_{n}", f"idle CPU over {idle['seconds']:g} s, pty (% of one core)", size,
               [idle["cpu_pct"]], unit="%", goal=f"< {GOAL_IDLE_CPU:g} %" if big else "",
               check=(lambda v: v < GOAL_IDLE_CPU) if big else None, **idle)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        if argv[1] == "app":
            return child_app(*argv[2:4])
        return child_ticks(argv[2], argv[3], int(argv[4]), int(argv[5]), argv[6], argv[7])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,000 and 10,000 sessions, fewer runs (~1 min)")
    parser.add_argument("--tiny", action="store_true", help="100 sessions, one run of each (the suite runs it)")
    parser.add_argument("--json-out", metavar="FILE", help="also write the JSON object here")
    parser.add_argument("--reps", type=int, help="first-paint processes per size (default 5, --quick 3)")
    parser.add_argument("--idle", type=float, help="seconds of the idle-CPU window (default 20, --quick 6)")
    parser.add_argument("--sizes", help="comma-separated session counts, instead of the defaults")
    parser.add_argument("--profile", metavar="DIR", help="also write cProfile/pyinstrument/tracemalloc reports here")
    parser.add_argument("--keep", action="store_true", help="keep the temporary workspaces")
    parser.add_argument("--label", help="free text recorded in the JSON")
    args = parser.parse_args(argv)
    sizes = dict(TINY if args.tiny else QUICK if args.quick else FULL)
    if args.sizes:
        sizes["sizes"] = tuple(int(s) for s in args.sizes.split(","))
    sizes["reps"] = args.reps or sizes["reps"]
    sizes["idle_s"] = args.idle or sizes["idle_s"]
    goal_size = GOAL_SIZE if GOAL_SIZE in sizes["sizes"] else max(sizes["sizes"])
    profile = Path(args.profile).resolve() if args.profile else None

    root = Path(tempfile.mkdtemp(prefix="procession-monitor-bench-"))
    from importlib.metadata import version

    env = environment(root, (".", "../tui"), textual=version("textual"), rich=version("rich"), screen=list(SCREEN))
    res = Results()
    setup: dict[str, Any] = {}
    raw: dict[str, Any] = {}
    started = time.perf_counter()
    try:
        for n in sizes["sizes"]:
            db = root / f"ws-{n}.db"
            print(f"{n:,} sessions: building...", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            info = build_workspace(db, n)
            setup[f"workspace_{n}"] = {"seconds": round(time.perf_counter() - t0, 3), **info}
            print(f"{n:,} sessions: pty runs (first paint x{sizes['reps']}, idle {sizes['idle_s']:g} s)...",
                  file=sys.stderr, flush=True)
            pty_m = measure_pty(db, root, sizes["reps"], sizes["idle_s"])
            print(f"{n:,} sessions: headless ticks...", file=sys.stderr, flush=True)
            ticks = measure_ticks(db, root, sizes)
            raw[str(n)] = {"pty": pty_m, "headless": ticks}
            report_size(res, n, pty_m, ticks, goal_size)
            if profile:
                print(f"{n:,} sessions: profiled run -> {profile}", file=sys.stderr, flush=True)
                measure_ticks(db, root, sizes, profile, "cprofile")
                if importlib.util.find_spec("pyinstrument"):
                    measure_ticks(db, root, sizes, profile, "pyinstrument")
    finally:
        if args.keep:
            print(f"workspaces kept in {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)

    report = {
        "mode": "tiny" if args.tiny else "quick" if args.quick else "full",
        "label": args.label,
        "goals": {"size": goal_size, "paint_s": GOAL_PAINT_S, "tick_loop_s": GOAL_TICK_S, "rss_mb": GOAL_RSS_MB,
                  "idle_cpu_pct": GOAL_IDLE_CPU},
        "goals_are_for_full_sizes": True,
        "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in sizes.items()},
        "environment": env,
        "setup": setup,
        "total_seconds": round(time.perf_counter() - started, 1),
        **res.summary(),
        "raw": raw,
    }
    print(table(res.rows, with_max=True))
    print()
    print(split_table(res))
    if goal_size != GOAL_SIZE:
        print(f"(goals are stated for {GOAL_SIZE:,} sessions; checked here at {goal_size:,}: only indicative)")
    print()
    text = json.dumps(report, indent=2)
    print(text)
    if args.json_out:
        Path(args.json_out).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
