#!/usr/bin/env python3
"""Reading agent CLIs' own session stores: opencode's database with many sessions.

    python bench/transcripts.py [--tiny] [--sessions N] [--turns N] [--reads N] [--json-out FILE] [--keep]

Needs the real ``opencode`` (on PATH, or ``$PROCESSION_OPENCODE``): it makes the database, with
its own schema, by importing one session that ``transcripts.opencode``'s ``write`` built
(``--turns`` prompts, each answered by a step with a shell call and its output, then a step of
text). That session's rows are then copied under new ids until the database holds
``--sessions`` sessions (the CLI's import would take a second each). Timed with
``time.perf_counter``: ``read`` of a whole session (``--reads`` sessions picked evenly, the
median and p90), ``read`` from its last position (nothing new: what a sync of an idle session
costs), ``discover`` (every session listed) and ``find`` by an id prefix, each the median
after one untimed warm-up. Prints a table and one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from report import Results, environment, table

from procession.model.toolcalls import tool_message
from procession.model.transcripts import Position, Said, format_of

FORMAT = format_of("opencode")


def history(turns: int) -> list[Said]:
    out = []
    for n in range(turns):
        out += [Said("user", f"prompt {n}: " + "word " * 40),
                Said(*tool_message(f"call_{n}", "bash", {"command": f"ls dir{n}"}, "file\n" * 20, False)),
                Said("assistant", f"answer {n}: " + "word " * 60)]
    return out


def build(root: Path, sessions: int, turns: int) -> dict[str, str]:
    """A home whose opencode database holds ``sessions`` sessions of ``turns`` turns."""
    (root / "work").mkdir(parents=True)
    own = {k: v for k, v in os.environ.items() if not k.startswith(("OPENCODE_", "XDG_"))}
    env = {**own, "HOME": str(root / "home"), "XDG_DATA_HOME": str(root / "home" / ".local" / "share"),
           "XDG_CONFIG_HOME": str(root / "home" / ".config"), "XDG_CACHE_HOME": str(root / "home" / ".cache"),
           "XDG_STATE_HOME": str(root / "home" / ".local" / "state"), "OPENCODE_DISABLE_MODELS_FETCH": "1",
           "OPENCODE_DISABLE_AUTOUPDATE": "1"}
    ref = FORMAT.write(history(turns), env, str(root / "work"), "scripted/scripted-model")
    assert ref is not None
    con = sqlite3.connect(ref["transcript"], isolation_level=None)
    try:
        sid = ref["id"]
        tables = {t: [r[1] for r in con.execute(f"PRAGMA table_info({t})")] for t in ("session", "message", "part")}
        rows = {"session": con.execute("SELECT * FROM session WHERE id = ?", (sid,)).fetchall(),
                "message": con.execute("SELECT * FROM message WHERE session_id = ?", (sid,)).fetchall(),
                "part": con.execute("SELECT * FROM part WHERE session_id = ?", (sid,)).fetchall()}
        con.execute("BEGIN")
        for copy in range(1, sessions):
            tag = f"{copy:06d}"
            for table_name, columns in tables.items():
                renamed = [tuple(_renamed(columns[i], v, tag) for i, v in enumerate(row)) for row in rows[table_name]]
                marks = ", ".join("?" * len(columns))
                con.executemany(f"INSERT INTO {table_name} VALUES ({marks})", renamed)
        con.execute("COMMIT")
    finally:
        con.close()
    return env


def _renamed(column: str, value: Any, tag: str) -> Any:
    """An id of the copied session's rows made unique for copy ``tag`` (same length, same
    prefix and clock digits: only the random tail changes)."""
    if column in ("id", "session_id", "message_id") and isinstance(value, str) and value[:4] in ("ses_", "msg_", "prt_"):
        return value[:-6] + tag
    if column == "time_updated" and isinstance(value, int):
        return value + int(tag)
    return value


def timed(call: Callable[[], Any], reps: int) -> list[float]:
    call()
    runs = []
    for _ in range(reps):
        began = time.perf_counter()
        call()
        runs.append(time.perf_counter() - began)
    return runs


def p90(runs: list[float]) -> float:
    return statistics.quantiles(runs, n=10)[-1] if len(runs) > 1 else runs[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="50 sessions of 5 turns, 10 reads (for CI)")
    parser.add_argument("--sessions", type=int, default=5000)
    parser.add_argument("--turns", type=int, default=20, help="turns per session")
    parser.add_argument("--reads", type=int, default=200, help="sessions read whole")
    parser.add_argument("--json-out", metavar="FILE")
    parser.add_argument("--keep", action="store_true", help="keep the database (the folder is printed)")
    args = parser.parse_args()
    if args.tiny:
        args.sessions, args.turns, args.reads = 50, 5, 10
    root = Path(tempfile.mkdtemp(prefix="procession-bench-transcripts-"))
    began = time.perf_counter()
    results = Results()
    try:
        env = build(root, args.sessions, args.turns)
        size = f"{args.sessions} sessions of {args.turns} turns"
        found = list(FORMAT.discover(env))
        assert len(found) == args.sessions, len(found)
        picked = found[:: max(1, len(found) // args.reads)][: args.reads]
        whole: list[float] = []
        idle: list[float] = []
        for one in picked:
            read = FORMAT.read(one)
            assert len(read.messages) == 3 * args.turns, len(read.messages)
            whole += timed(lambda one=one: FORMAT.read(one), 1)  # type: ignore[misc]
            position = Position.of(read.position.as_json())
            idle += timed(lambda one=one, position=position: FORMAT.read(one, position), 1)  # type: ignore[misc]
        results.record("opencode_read", "opencode read() of a whole session", size, whole, goal="< 20 ms",
                       check=lambda m: m < 0.020, p90=round(p90(whole), 6))
        results.record("opencode_read_idle", "opencode read() from its last position (nothing new)", size, idle,
                       goal="< 5 ms", check=lambda m: m < 0.005, p90=round(p90(idle), 6))
        results.record("opencode_discover", "opencode discover() of every session", size,
                       timed(lambda: list(FORMAT.discover(env)), 5))
        results.record("opencode_find", "opencode find() by its id", size,
                       timed(lambda: FORMAT.find(env, picked[-1].id), 20))
    finally:
        if args.keep:
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    report = {"mode": "tiny" if args.tiny else "full", "sessions": args.sessions, "turns": args.turns,
              "environment": environment(root), "total_seconds": round(time.perf_counter() - began, 1),
              **results.summary()}
    print(table(results.rows))
    print()
    text = json.dumps(report, indent=2)
    print(text)
    if args.json_out:
        Path(args.json_out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
