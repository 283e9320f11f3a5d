#!/usr/bin/env python3
"""Procession against the OpenAI Agents SDK's ``SQLiteSession``, in the same run.

    python bench/peer.py [--venv DIR] [--appends N] [--history N] [--reps N] [--tiny]

The peer is not a dependency of Procession: it is installed only for this benchmark, into a
virtual environment of its own (``--venv``, default ``~/.cache/procession-bench/peer``, made
with ``python -m venv`` and ``pip install openai-agents`` on first use), and measured there
by this same script run with ``--child peer``. Both sides write real SQLite files in a
temporary folder, with their defaults (Procession: WAL, synchronous=NORMAL).

Figures, each the median of ``--reps`` rounds. Each round runs one repetition of each side,
each in a fresh process, and the side that goes first alternates from round to round: a
machine that gets busier or quieter during the run moves both sides alike.

- one append: ``await ws.send(sid, text)`` against ``await session.add_items([item])``, per
  message, ``--appends`` in a row;
- reading a history of ``--history`` messages whole: ``ws.history(sid)`` against
  ``session.get_items()``, after writing it in one batch (``send_many``, ``add_items``).

Table, then one JSON object (``--json-out`` writes it to a file too).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DEFAULT_VENV = Path.home() / ".cache" / "procession-bench" / "peer"
PEER_PACKAGE = "openai-agents"


def _texts(n: int) -> list[str]:
    base = "The payroll run for november uses the new rates file; check every row has a cost centre. "
    return [f"[{i}] {base}" for i in range(n)]


async def _peer(appends: int, history: int, reps: int) -> dict[str, Any]:
    here = Path(__file__).resolve().parent  # bench/agents.py would be imported for the SDK's `agents`
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    from agents import SQLiteSession  # type: ignore[import-not-found]
    from importlib.metadata import version

    root = Path(tempfile.mkdtemp(prefix="peer-"))
    append, read = [], []
    for rep in range(reps):
        session = SQLiteSession(f"a{rep}", str(root / f"a{rep}.db"))
        texts = _texts(appends)
        t0 = time.perf_counter()
        for text in texts:
            await session.add_items([{"role": "user", "content": text}])
        append.append((time.perf_counter() - t0) / appends)
        session.close()
        long = SQLiteSession(f"h{rep}", str(root / f"h{rep}.db"))
        await long.add_items([{"role": "user", "content": t} for t in _texts(history)])
        t0 = time.perf_counter()
        items = await long.get_items()
        read.append(time.perf_counter() - t0)
        assert len(items) == history
        long.close()
    return {"version": version(PEER_PACKAGE), "append_s": append, "read_s": read}


async def _ours(appends: int, history: int, reps: int) -> dict[str, Any]:
    from procession import Workspace

    root = Path(tempfile.mkdtemp(prefix="ours-"))
    append, read = [], []
    for rep in range(reps):
        async with await Workspace.open(root / f"a{rep}.db") as ws:
            sid = (await ws.spawn("appends", "bench")).sid
            texts = _texts(appends)
            t0 = time.perf_counter()
            for text in texts:
                await ws.send(sid, text)
            append.append((time.perf_counter() - t0) / appends)
        async with await Workspace.open(root / f"h{rep}.db") as ws:
            sid = (await ws.spawn("history", "bench")).sid
            await ws.send_many(sid, [{"role": "user", "content": t} for t in _texts(history)])
            t0 = time.perf_counter()
            items = await ws.history(sid)
            read.append(time.perf_counter() - t0)
            assert len(items) == history
    return {"append_s": append, "read_s": read}


def _peer_python(venv: Path) -> Path:
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"making {venv} with {PEER_PACKAGE} (once)...", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", PEER_PACKAGE], check=True)
    return python


def _side(python: Path | str, side: str, args: argparse.Namespace) -> dict[str, Any]:
    """One repetition of one side, in a process of its own."""
    child = subprocess.run([str(python), os.path.abspath(__file__), "--child", side, "--appends", str(args.appends),
                            "--history", str(args.history), "--reps", "1"],
                           capture_output=True, text=True, check=False)
    if child.returncode != 0:
        sys.exit(f"the {side} run failed: {child.stderr.strip()[-2000:]}")
    return dict(json.loads(child.stdout.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV, help="the peer's virtual environment")
    parser.add_argument("--appends", type=int, default=2_000)
    parser.add_argument("--history", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--tiny", action="store_true", help="200 appends, 2,000 messages, 1 repetition")
    parser.add_argument("--json-out", metavar="FILE")
    parser.add_argument("--child", choices=("ours", "peer"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tiny:
        args.appends, args.history, args.reps = 200, 2_000, 1
    if args.child:
        run = _ours if args.child == "ours" else _peer
        print(json.dumps(asyncio.run(run(args.appends, args.history, args.reps))))
        return 0
    pythons = {"ours": sys.executable, "peer": _peer_python(args.venv)}
    ours: dict[str, Any] = {"append_s": [], "read_s": []}
    peer: dict[str, Any] = {"append_s": [], "read_s": []}
    for rep in range(args.reps):  # alternating, each side first in every other round: neither gets the quieter turn
        for side in ("ours", "peer") if rep % 2 == 0 else ("peer", "ours"):
            print(f"round {rep + 1}: {'procession' if side == 'ours' else PEER_PACKAGE}...", file=sys.stderr,
                  flush=True)
            got = _side(pythons[side], side, args)
            into = ours if side == "ours" else peer
            into["append_s"] += got["append_s"]
            into["read_s"] += got["read_s"]
            if "version" in got:
                into["version"] = got["version"]
    rows = [
        ("one append (ms)", statistics.median(ours["append_s"]) * 1e3, statistics.median(peer["append_s"]) * 1e3),
        (f"read {args.history:,} messages (s)", statistics.median(ours["read_s"]), statistics.median(peer["read_s"])),
    ]
    print(f"{'measure':32}  {'procession':>12}  {'SQLiteSession ' + peer['version']:>22}  {'ratio':>6}")
    for name, a, b in rows:
        print(f"{name:32}  {a:12.3f}  {b:22.3f}  {a / b:6.2f}")
    report = {"mode": "tiny" if args.tiny else "full", "appends": args.appends, "history": args.history,
              "reps": args.reps, "load_average": os.getloadavg(), "procession": ours, "peer": peer}
    text = json.dumps(report, indent=2)
    print()
    print(text)
    if args.json_out:
        Path(args.json_out).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
