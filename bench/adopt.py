#!/usr/bin/env python3
"""Adopting what the agent CLIs keep: ``adopt --all`` on a home of many transcripts, and how
soon a transcript's growth outside Procession reaches the store.

    python bench/adopt.py [--tiny] [--transcripts N] [--messages N] [--reps N] [--json-out FILE]

Everything is real: a generated HOME whose transcripts are written in each CLI's own format
(by ``procession.model.transcripts``, the writer ``migrate`` uses, whose output the real CLIs
resume: tests/agents), the real CLI as a whole process, a real ``procession run`` engine.

- **adopt --all**: ``procession adopt CLI --all --json`` on a fresh workspace, for Claude Code
  and Codex homes of ``--transcripts`` sessions of ``--messages`` messages each (a third of
  them tool calls); transcripts and messages per second, interpreter start included.
- **sync latency**: an adopted Claude session followed by an engine; a user and an assistant
  record are appended to its transcript as Claude Code appends them, and the latency is the
  moment both messages are in the store minus the moment the append returned.

``--tiny`` (what the suite runs): 20 transcripts of 10 messages, 3 appends, 1 rep.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from report import Results, environment, table, wait

PY = sys.executable


def history(n: int, i: int) -> list[Any]:
    from procession.model.toolcalls import tool_message
    from procession.model.transcripts import Said

    out: list[Said] = []
    start = time.time() - 86_400
    for k in range(n):
        ts = start + k
        if k % 3 == 0:
            out.append(Said("user", f"task {i}.{k}: look at file {k}.txt and say what it holds", None, ts))
        elif k % 3 == 1:
            role, content, meta = tool_message(f"call{i}_{k}", "Bash", {"command": f"cat {k}.txt"},
                                               f"line {k} of transcript {i}\n" * 4, False)
            out.append(Said(role, content, meta, ts))
        else:
            out.append(Said("assistant", f"File {k}.txt holds four lines; transcript {i} goes on.", None, ts))
    return out


def make_home(root: Path, cli: str, transcripts: int, messages: int) -> dict[str, str]:
    from procession.model.transcripts import format_of

    home = root / f"home-{cli}"
    work = root / "work"
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HOME": str(home)}
    env.pop("CLAUDE_CONFIG_DIR", None)
    env.pop("CODEX_HOME", None)
    fmt = format_of(cli)
    for i in range(transcripts):
        folder = work / f"project{i % 25}"
        folder.mkdir(exist_ok=True)
        assert fmt.write(history(messages, i), env, str(folder), "bench-model") is not None
    return env


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
    env = make_home(root / "sync", "claude", 1, 6)
    db = root / "sync.db"
    subprocess.run([PY, "-m", "procession", "--db", str(db), "adopt", "claude", "--all"], env=env, check=True,
                   capture_output=True)
    [path] = Path(env["HOME"], ".claude", "projects").glob("*/*.jsonl")
    engine = subprocess.Popen([PY, "-m", "procession", "--db", str(db), "run"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    con = sqlite3.connect(db)
    try:
        wait(lambda: con.execute("SELECT 1 FROM lease").fetchone(), 30)
        time.sleep(0.5)  # its watches are set up once it holds the lease and has read the sessions
        latencies = []
        for k in range(appends):
            length = con.execute("SELECT length FROM sessions WHERE id = 1").fetchone()[0]
            last = next(r for r in map(json.loads, reversed(path.read_text().splitlines())) if "uuid" in r and "cwd" in r)
            records = _claude_turn(last, f"appended by hand {k}", f"answer {k}")
            with path.open("a") as out:
                out.write("".join(json.dumps(r) + "\n" for r in records))
            wrote = time.perf_counter()
            wait(lambda: con.execute("SELECT length FROM sessions WHERE id = 1").fetchone()[0] >= length + 2, 30)
            latencies.append(time.perf_counter() - wrote)
            time.sleep(0.2)
        return latencies
    finally:
        con.close()
        engine.terminate()
        engine.wait(timeout=30)


def _claude_turn(last: dict[str, Any], prompt: str, answer: str) -> list[dict[str, Any]]:
    """A user record and the assistant's reply, chained as Claude Code chains them."""
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    common = {"sessionId": last["sessionId"], "cwd": last["cwd"], "isSidechain": False, "userType": "external",
              "version": last.get("version", "2.1.197"), "timestamp": now}
    user = {**common, "type": "user", "uuid": str(uuid.uuid4()), "parentUuid": last["uuid"],
            "message": {"role": "user", "content": prompt}}
    reply = {**common, "type": "assistant", "uuid": str(uuid.uuid4()), "parentUuid": user["uuid"],
             "message": {"id": f"msg_{uuid.uuid4().hex[:20]}", "type": "message", "role": "assistant",
                         "model": "bench-model", "content": [{"type": "text", "text": answer}],
                         "usage": {"input_tokens": 10, "output_tokens": 3}}}
    return [user, reply]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--transcripts", type=int, default=500)
    parser.add_argument("--messages", type=int, default=40)
    parser.add_argument("--appends", type=int, default=20)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json-out")
    args = parser.parse_args()
    if args.tiny:
        args.transcripts, args.messages, args.appends, args.reps = 20, 10, 3, 1
    results = Results()
    with tempfile.TemporaryDirectory(prefix="procession-adopt-") as tmp:
        root = Path(tmp)
        size = f"{args.transcripts} transcripts x {args.messages} messages"
        for cli in ("claude", "codex"):
            print(f"writing a {cli} home of {size}", file=sys.stderr, flush=True)
            env = make_home(root, cli, args.transcripts, args.messages)
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
        env = environment(root)
    print(table(results.rows, with_max=True))
    report = {"mode": "tiny" if args.tiny else "full", **results.summary(), "environment": env, "args": vars(args)}
    text = json.dumps(report)
    if args.json_out:
        Path(args.json_out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
