"""Agents over ACP against their own headless mode: the real agents against the scripted model server.

    python bench/acp.py [--reps 5] [--only gemini,qwen,copilot,opencode,claude,codex] [--tiny] [--json-out FILE]

For each agent installed (``tests/agents/install`` puts them on PATH), ``--reps`` times, the
two ways alternated (ACP first on even repetitions, headless first on odd ones), each a
session in a workspace with an engine in this process:

- *over ACP* (``acp:NAME``): from ``activate`` returning to the agent's first model request
  (the engine starting the agent, ``initialize``, ``session/new``, ``session/prompt``), and to
  the run recorded as ended (its one short reply, the agent's end);
- *headless*: the same through Procession's own runner of that CLI (``claude:``, ``codex:``,
  ``opencode:``); an agent that has none (Gemini CLI, Qwen Code, Copilot CLI) started by hand
  in its own headless mode (``-p``), from its start to its first model request and its exit.

A run is one process and one turn either way, so the figures are each way's cold start. It
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

from agents import direct  # noqa: E402
from report import Results, engine_running, environment, table  # noqa: E402
from support.agent_clis import ALL_SANDBOXES, AgentCliMissing, find_cli, session_env  # noqa: E402
from support.models import ModelServer, say  # noqa: E402

#: The sandbox each agent runs in over ACP (an adapter's own), and headless.
ACP_SANDBOX = {"claude": "claude-agent-acp", "codex": "codex-acp"}
HEADLESS = ("claude", "codex", "opencode")


async def session_run(box: Any, server: ModelServer, seen: int, db: Path, runner: str, adapter: str = "") -> tuple[float, float]:
    """``activate`` -> first model request, and -> the run recorded as ended, of a session of ``runner``."""
    from procession import Workspace

    async with await Workspace.open(db) as ws:
        settings, passed = session_env([box], os.environ.__setitem__)
        settings = {k: v for k, v in settings.items() if "-" not in k}
        if adapter:
            settings[f"PROCESSION_{adapter.upper()}_ACP"] = str(box.cli.command)
        sid = (await ws.spawn("bench", "bench", runner=runner, cwd=str(box.workdir), env=settings,
                              passed=passed)).sid
        await ws.send(sid, "hello")
        async with engine_running(db):
            await ws.activate(sid)
            queued = time.monotonic()
            await asyncio.to_thread(server.wait_requests, seen + 1, "turn", 120)
            first = time.monotonic() - queued
            while not (runs := await ws.runs(sid)) or runs[-1].ended is None:
                await asyncio.sleep(0.01)
            assert runs[-1].outcome == "ok", runs[-1].error
            return first, time.monotonic() - queued


def turns(server: ModelServer) -> int:
    """The model requests of a turn the server has had so far."""
    return len([r for r in server.requests if r.kind == "turn"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", default="gemini,qwen,copilot,opencode,claude,codex")
    ap.add_argument("--tiny", action="store_true", help="one repetition of each")
    ap.add_argument("--json-out")
    args = ap.parse_args()
    reps = 1 if args.tiny else args.reps
    results = Results()
    missing = []
    with tempfile.TemporaryDirectory(prefix="procession-bench-acp-") as tmp:
        for name in args.only.split(","):
            over = ACP_SANDBOX.get(name, name)
            try:
                find_cli(over)
                find_cli(name)
            except AgentCliMissing as exc:
                missing.append(f"{name}: {exc}")
                continue
            acp_first, acp_done, own_first, own_done = [], [], [], []
            for i in range(reps):
                with ModelServer() as server:
                    root = Path(tmp) / f"{name}-{i}"
                    server.script.add(*[say("Hi.") for _ in range(4)])
                    acp_box = ALL_SANDBOXES[over](find_cli(over), server, root / "acp")
                    own_box = ALL_SANDBOXES[name](find_cli(name), server, root / "own")

                    def acp(seen: int) -> None:
                        first, done = asyncio.run(session_run(acp_box, server, seen, root / f"acp-{seen}.db",
                                                              f"acp:{name}", name if over != name else ""))
                        acp_first.append(first)
                        acp_done.append(done)

                    def own(seen: int) -> None:
                        if name in HEADLESS:
                            first, done = asyncio.run(session_run(own_box, server, seen, root / f"own-{seen}.db",
                                                                  f"{name}:"))
                        else:
                            first, _, done = direct(own_box, server, seen)
                        own_first.append(first)
                        own_done.append(done)

                    if name not in HEADLESS:
                        direct(own_box, server, 0)  # a first start by hand sets its HOME up: not timed
                    for way in ((acp, own) if i % 2 == 0 else (own, acp)):
                        way(turns(server))
            one = "1 turn"
            how = "activate" if name in HEADLESS else "start (by hand)"
            results.record(f"{name}_acp_first_request", f"{name} over ACP: activate -> first request", one, acp_first)
            results.record(f"{name}_headless_first_request", f"{name} headless: {how} -> first request", one, own_first)
            results.record(f"{name}_acp_done", f"{name} over ACP: activate -> run ended", one, acp_done)
            results.record(f"{name}_headless_done", f"{name} headless: {how} -> " + (
                "run ended" if name in HEADLESS else "exit"), one, own_done)
            results.record(f"{name}_acp_ratio", f"{name}: over ACP / headless, first request", one,
                           [a / h for a, h in zip(acp_first, own_first)], unit="x",
                           value=statistics.median(acp_first) / statistics.median(own_first))
    print(table(results.rows))
    out = {**results.summary(), "reps": reps, "missing": missing, "environment": environment(HERE.parent)}
    print(json.dumps(out))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
