"""What Procession adds to a run of an agent CLI: the real CLIs against the scripted model server.

    python bench/agents.py [--reps 5] [--only claude,codex,opencode] [--tiny] [--json-out FILE]

For each CLI installed (``tests/agents/install`` puts them on PATH), ``--reps`` times:

- *direct*: the CLI started by hand, headless, as the tests' sandbox starts it: the time from
  its start to its first model request;
- *through Procession*: a session of that CLI in a workspace, an engine in this process: the
  time from ``activate`` returning to the CLI's first model request (the engine noticing the
  queued run, reading what the agent has not seen, starting the CLI), and from the CLI's last
  line on stdout (its log's timestamp) to the run being recorded as ended.

The overhead is the difference of the first two medians, and the third median. The model's
reply is one short text, so each run is the CLI's start-up, one request and its exit. It
prints a table and one JSON object; ``--tiny`` is one repetition of each (what the suite runs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from report import Results, engine_running, environment, table  # noqa: E402
from support.agent_clis import SANDBOXES, AgentCliMissing, find_cli, session_env  # noqa: E402
from support.models import ModelServer, say  # noqa: E402


def direct(sandbox: Any, server: ModelServer, seen: int) -> tuple[float, float, float]:
    """Start -> first model request, last line on stdout -> exit, and start -> exit, of the
    CLI run by hand."""
    args, stdin = sandbox.headless("hello")
    started = time.monotonic()
    proc = sandbox.start(args, stdin)
    server.wait_requests(seen + 1, timeout=60)
    first = time.monotonic() - started
    last = time.monotonic()
    assert proc.stdout is not None
    for _ in proc.stdout:
        last = time.monotonic()
    proc.wait(timeout=60)
    return first, time.monotonic() - last, time.monotonic() - started


async def through(sandbox: Any, server: ModelServer, seen: int, folder: Path) -> tuple[float, float]:
    from procession import Workspace

    db = folder / f"ws-{seen}.db"
    async with await Workspace.open(db) as ws:
        settings, passed = session_env([sandbox], os.environ.__setitem__)
        sid = (await ws.spawn("bench", "bench", runner=f"{sandbox.name}:", cwd=str(sandbox.workdir), env=settings,
                              passed=passed)).sid
        await ws.send(sid, "hello")
        async with engine_running(db):
            await ws.activate(sid)
            queued = time.time()
            await asyncio.to_thread(server.wait_requests, seen + 1, "turn", 60)
            first = time.time() - queued
            while not (runs := await ws.runs(sid)) or runs[-1].ended is None:
                await asyncio.sleep(0.01)
            _, chunks = await ws.run_log(sid)
            last_event = max(c.ts for c in chunks if c.stream == "out")
            return first, runs[-1].ended - last_event


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", default="claude,codex,opencode")
    ap.add_argument("--tiny", action="store_true", help="one repetition of each")
    ap.add_argument("--json-out")
    args = ap.parse_args()
    reps = 1 if args.tiny else args.reps
    results = Results()
    missing = []
    with tempfile.TemporaryDirectory(prefix="procession-bench-agents-") as tmp:
        for name in args.only.split(","):
            try:
                find_cli(name)
            except AgentCliMissing as exc:
                missing.append(f"{name}: {exc}")
                continue
            starts, exits, firsts, ends = [], [], [], []
            for i in range(reps):
                with ModelServer() as server:
                    root = Path(tmp) / f"{name}-{i}"
                    sandbox = SANDBOXES[name](find_cli(name), server, root)
                    server.script.add(say("Hi."), say("Hi."), say("Hi."))
                    direct(sandbox, server, 0)  # a CLI's very first start in a HOME sets it up: not timed
                    start, exit_, _ = direct(sandbox, server, 1)
                    starts.append(start)
                    exits.append(exit_)
                    first, end = asyncio.run(through(sandbox, server, 2, root))
                    firsts.append(first)
                    ends.append(end)
            one = "1 turn"
            results.record(f"{name}_direct_first_request", f"{name}: start -> first request (by hand)", one, starts)
            results.record(f"{name}_activate_first_request", f"{name}: activate -> first request", one, firsts)
            results.record(f"{name}_overhead_start", f"{name}: added before the first request", one,
                           [f - s for f, s in zip(firsts, starts)],
                           value=statistics.median(firsts) - statistics.median(starts))
            results.record(f"{name}_direct_last_event_to_exit", f"{name}: last event -> exit (by hand)", one, exits)
            results.record(f"{name}_last_event_to_end", f"{name}: last event -> run recorded", one, ends)
            results.record(f"{name}_overhead_end", f"{name}: added after the last event", one,
                           [e - x for e, x in zip(ends, exits)],
                           value=statistics.median(ends) - statistics.median(exits))
    print(table(results.rows))
    out = {**results.summary(), "reps": reps, "missing": missing, "environment": environment(HERE.parent)}
    print(json.dumps(out))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
