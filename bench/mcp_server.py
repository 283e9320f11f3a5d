#!/usr/bin/env python3
"""The MCP server: the round trip of a tool call, client to reply, over stdio.

    python bench/mcp_server.py [--tiny] [--calls N] [--sessions N] [--json-out FILE] [--keep]

Builds a workspace in a temporary folder (removed at the end unless ``--keep``): an acting
session of agent ``lead`` with a target session of its own holding 200 messages, and
``--sessions`` more sessions of other agents (the ``ps`` the server filters by reach). It
starts ``python -m procession mcp --session 1`` with the MCP SDK's own client (stdio), and
times each call from ``call_tool`` to its parsed reply with ``time.perf_counter``: ``ps``,
``show`` (the last 20 messages), ``send`` and ``memory_set`` (one transaction and its journal
row each), ``wait`` with a zero timeout, and a refused call. Each figure is the median of
``--calls`` calls (default 300; ``--tiny`` 25) after 10 untimed warm-up calls; the JSON also
has p90 and max. The server's start (spawn, imports, initialize, first ``tools/list``) is timed
as whole processes, the median of 5 (``--tiny`` 1), after the round trips. Prints a table (measure, size, median,
goal, ok?) and then one JSON object with every figure, the raw runs and the environment.

Needs Procession importable (``pip install -e .``) and the ``mcp`` package.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from report import Results, environment, table

from mcp import Client, StdioServerParameters
from procession import Workspace

HISTORY = 200


async def build(db: Path, others: int) -> None:
    async with await Workspace.open(db) as ws:
        await ws.spawn("lead", "lead", runner="builtin:echo")
        target = (await ws.spawn("target", "lead")).sid
        await ws.send_many(target, [{"role": "user", "content": f"message {n} " + "word " * 30} for n in range(HISTORY)])
        for n in range(others):
            await ws.spawn(f"other {n}", f"agent{n % 10}")


def params(db: Path) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable,
                                 args=["-m", "procession", "mcp", "--db", str(db), "--session", "1"])


async def start_times(db: Path, reps: int) -> list[float]:
    runs = []
    for _ in range(reps):  # after the round trips' server, which warmed the caches
        began = time.perf_counter()
        async with Client(params(db)) as client:
            await client.list_tools()
            runs.append(time.perf_counter() - began)
    return runs


async def round_trips(db: Path, calls: int) -> dict[str, list[float]]:
    async with Client(params(db)) as client:
        n = 0

        async def send() -> None:
            nonlocal n
            n += 1
            await checked(client, "send", {"sid": 2, "text": f"bench {n}"})

        measures: dict[str, Callable[[], Awaitable[Any]]] = {
            "ps": lambda: checked(client, "ps", {}),
            "show": lambda: checked(client, "show", {"sid": 2, "last": 20}),
            "send": send,
            "memory_set": lambda: checked(client, "memory_set", {"sid": 2, "key": "k", "value": "1"}),
            "wait": lambda: checked(client, "wait", {"sid": 2, "timeout": 0}),
            "refused": lambda: checked(client, "show", {"sid": 3}, error=True),
        }
        out: dict[str, list[float]] = {}
        for name, call in measures.items():
            for _ in range(10):
                await call()
            runs = []
            for _ in range(calls):
                began = time.perf_counter()
                await call()
                runs.append(time.perf_counter() - began)
            out[name] = runs
        return out


async def checked(client: Client, tool: str, args: dict[str, Any], *, error: bool = False) -> Any:
    result = await client.call_tool(tool, args)
    if result.is_error != error:
        raise SystemExit(f"{tool} {args}: {result.content}")
    return json.loads(result.content[0].text) if not error else None  # type: ignore[union-attr]


def p90(runs: list[float]) -> float:
    return statistics.quantiles(runs, n=10)[-1] if len(runs) > 1 else runs[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="25 calls a figure, 1 start, 100 sessions (for CI)")
    parser.add_argument("--calls", type=int, default=300, help="timed calls per figure")
    parser.add_argument("--sessions", type=int, default=1000, help="sessions of other agents in the workspace")
    parser.add_argument("--json-out", metavar="FILE")
    parser.add_argument("--keep", action="store_true", help="keep the workspace (the folder is printed)")
    args = parser.parse_args()
    if args.tiny:
        args.calls, args.sessions = 25, 100
    starts = 1 if args.tiny else 5
    root = Path(tempfile.mkdtemp(prefix="procession-bench-mcp-"))
    env = environment(root)
    began = time.perf_counter()
    results = Results()
    try:
        db = root / "mcp.db"
        asyncio.run(build(db, args.sessions))
        size = f"{args.sessions + 2} sessions"
        runs = asyncio.run(round_trips(db, args.calls))
        goals = {"ps": ("< 20 ms", 0.020), "send": ("< 10 ms", 0.010), "show": ("< 10 ms", 0.010)}
        for name, times in runs.items():
            goal, limit = goals.get(name, ("", None))
            label = {"refused": "a refused call (out of reach)", "wait": "wait, timeout 0"}.get(name, name)
            results.record(f"call_{name}", f"tool call round trip: {label}", size if name == "ps" else
                           f"{HISTORY} messages" if name == "show" else "-", times, goal=goal,
                           check=(lambda m, limit=limit: m < limit) if limit else None,
                           p90=round(p90(times), 6))
        results.record("start", "server start to first tools/list (process)", "-",
                       asyncio.run(start_times(db, starts)), goal="< 2 s", check=lambda m: m < 2.0)
    finally:
        if args.keep:
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    report = {"mode": "tiny" if args.tiny else "full", "calls": args.calls, "sessions": args.sessions,
              "environment": env, "total_seconds": round(time.perf_counter() - began, 1), **results.summary()}
    print(table(results.rows))
    print()
    text = json.dumps(report, indent=2)
    print(text)
    if args.json_out:
        Path(args.json_out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
