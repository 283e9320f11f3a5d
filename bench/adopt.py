#!/usr/bin/env python3
"""Adopting what the agent CLIs keep, as whole processes: ``adopt --all`` on a home of many
transcripts, and how soon a transcript's growth outside Procession reaches the store.

    python bench/adopt.py [--tiny] [--transcripts N] [--rounds N] [--appends N] [--reps N] [--json-out FILE]

Everything is real: homes generated as bench/transcripts.py makes them (each format's own
``write``, whose output the real CLIs resume; a round is 5 messages, two of them tool calls),
the real CLI as a whole process, a real ``procession run`` engine. What reading the formats
costs by itself is bench/transcripts.py's.

- **adopt --all**: ``procession adopt CLI --all --json`` on a fresh workspace, for Claude Code
  and Codex homes of ``--transcripts`` sessions of ``--rounds`` rounds each; transcripts and
  messages per second, interpreter start included.
- **sync latency**: an adopted Claude session followed by an engine; the transcript's next
  round (what ``write`` made for it, held back) is appended in one write, as Claude Code
  appends a turn, and the latency is the moment its 5 messages are in the store minus the
  moment the append returned.

``--tiny`` (what the suite runs): 20 transcripts of 2 rounds, 3 appends, 1 rep.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from report import Results, environment, publish, wait
from transcripts import ROUND, make_home, round_start

PY = sys.executable


def adopt_all(root: Path, cli: str, env: dict[str, str], rep: int) -> tuple[float, int, int]:
    db = root / f"adopt-{cli}-{rep}.db"
    started = time.perf_counter()
    proc = subprocess.run([PY, "-m", "procession", "--db", str(db), "--json", "adopt", cli, "--all"], env=env,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"adopt {cli} --all failed: {proc.stderr[-2000:]}")
    data = json.loads(proc.stdout)
    made = [r for r in data["adopted"] if not r["already"]]
    return seconds, len(made), sum(r["messages"] for r in made)


def sync_latency(root: Path, appends: int) -> list[float]:
    """Seconds from appending a round to its messages in the store, per append (see the
    module's docstring): the transcript starts with 2 rounds, the next ones held back."""
    env, [ref] = make_home(root / "sync", "claude", 1, 2 + appends)
    path = Path(ref["transcript"])
    whole = path.read_bytes()
    cuts = [round_start(whole, n) for n in range(2, 2 + appends)] + [len(whole)]
    path.write_bytes(whole[:cuts[0]])
    db = root / "sync.db"
    subprocess.run([PY, "-m", "procession", "--db", str(db), "adopt", "claude", "--all"], env=env, check=True,
                   capture_output=True)
    engine = subprocess.Popen([PY, "-m", "procession", "--db", str(db), "run"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    con = sqlite3.connect(db)
    try:
        wait(lambda: con.execute("SELECT 1 FROM engines").fetchone(), 30)
        time.sleep(0.5)  # its watches are set up once it holds the lease and has read the sessions
        latencies = []
        for begin, end in zip(cuts, cuts[1:]):
            length = con.execute("SELECT length FROM sessions WHERE id = 1").fetchone()[0]
            with path.open("ab") as out:
                out.write(whole[begin:end])
            wrote = time.perf_counter()
            wait(lambda: con.execute("SELECT length FROM sessions WHERE id = 1").fetchone()[0] >= length + ROUND, 30)
            latencies.append(time.perf_counter() - wrote)
            time.sleep(0.2)
        return latencies
    finally:
        con.close()
        engine.terminate()
        engine.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--transcripts", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=8, help="rounds per transcript (5 messages each)")
    parser.add_argument("--appends", type=int, default=20)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json-out")
    args = parser.parse_args()
    if args.tiny:
        args.transcripts, args.rounds, args.appends, args.reps = 20, 2, 3, 1
    results = Results()
    with tempfile.TemporaryDirectory(prefix="procession-adopt-") as tmp:
        root = Path(tmp)
        size = f"{args.transcripts} transcripts x {args.rounds} rounds"
        for cli in ("claude", "codex"):
            print(f"writing a {cli} home of {size}", file=sys.stderr, flush=True)
            env, _ = make_home(root / cli, cli, args.transcripts, args.rounds)
            runs = [adopt_all(root, cli, env, rep) for rep in range(args.reps)]
            seconds = [r[0] for r in runs]
            assert all(r[1] == args.transcripts for r in runs), runs
            row = results.record(f"adopt_{cli}", f"adopt {cli} --all (whole process)", size, seconds,
                                 goal="< 10 s at 500", check=lambda s: s < 10 if not args.tiny else True)
            row["transcripts_per_s"] = args.transcripts / row["median"]
            row["messages_per_s"] = runs[0][2] / row["median"]
            results.record(f"adopt_{cli}_rate", f"adopt {cli} --all: transcripts per second", size,
                           [], unit="/s", value=row["transcripts_per_s"])
            results.record(f"adopt_{cli}_messages", f"adopt {cli} --all: messages per second", size,
                           [], unit="msg/s", value=row["messages_per_s"])
        latencies = sync_latency(root, args.appends)
        results.record("sync_latency", "transcript append -> messages in the store (engine)",
                       f"{args.appends} appends", latencies, goal="< 0.5 s", check=lambda s: s < 0.5)
        facts = environment(root)
    report = {"mode": "tiny" if args.tiny else "full", **results.summary(), "environment": facts, "args": vars(args)}
    publish(results.rows, report, args.json_out, with_max=True)

if __name__ == "__main__":
    main()
