"""How long a person waits on an agent that asks, and the agent on the person (issue 21).

    python bench/asking.py [--tiny] [--reps N] [--only claude,codex,opencode,openai] [--json-out FILE]

A real engine in this process; the model is the tests' scripted server. Each round a session
whose permissions are ``ask`` is sent a turn whose model calls a tool that writes: a shell
command of Claude Code's (``date +%s.%N > stamp``, asked through its
``--permission-prompt-tool``), of Codex's (an approval request of ``codex app-server``) and of
opencode's (a permission request of ``opencode serve``), and the ``openai:`` loop's folder
``write`` (asked in the engine). Two figures per runner:

- *request -> W*: from the model's reply that calls the tool reaching the agent (the scripted
  server's receipt of that turn's request) to the session being ``waiting`` for a reader of the
  store polling every 5 ms (what the monitor reads; it redraws at its refresh interval, 1 s by
  default, on top);
- *allow -> tool*: from the ``allow`` call to the tool's work (the stamp it wrote, or the
  written file's time).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from report import Results, engine_running, environment, publish  # noqa: E402
from support.agent_clis import SANDBOXES, AgentCliMissing, find_cli, session_env  # noqa: E402
from support.models import ModelServer, say, shell, tool_call  # noqa: E402

#: The agent CLIs that ask (the rest of ``--only`` is ``openai``).
CLIS = ("claude", "codex", "opencode")


async def waiting(ws: Any, sid: int) -> tuple[float, Any]:
    from procession import State

    while True:
        info = await ws.info(sid)
        if info.state is State.WAITING:
            return time.monotonic(), (await ws.pending([sid]))[0]
        await asyncio.sleep(0.005)


async def one(runner: str, folder: Path, server: ModelServer, env: tuple[dict[str, str], list[str]]) -> tuple[float, float]:
    from procession import Workspace

    db = folder / "ws.db"
    work = folder / "work"
    work.mkdir(exist_ok=True)
    async with await Workspace.open(db) as ws:
        if runner in CLIS:
            server.script.add(shell("date +%s.%N > stamp"), say("done"))
            sid = (await ws.spawn("asks", "bench", runner=f"{runner}:", cwd=str(work), env=env[0], passed=env[1],
                                  permissions="ask")).sid
        else:
            server.script.add(tool_call("work_write", {"path": "stamp", "content": "x"}), say("done"))
            sid = (await ws.spawn("asks", "bench", runner=f"openai:m@{server.url_v1}", cwd=str(folder),
                                  permissions="ask")).sid
            await ws.bind(sid, "folder", str(work), mode="rw")
        await ws.send(sid, "write the stamp")
        async with engine_running(db):
            seen = len(server.requests)
            await ws.activate(sid)
            seen_w, request = await waiting(ws, sid)
            asked_turn = [r for r in server.requests[seen:] if r.kind == "turn" and r.sent][0]
            allowed = time.time()
            await ws.allow(request.id)
            stamp = work / "stamp"
            while not stamp.exists() or not stamp.stat().st_size:
                await asyncio.sleep(0.002)
            ran = float(stamp.read_text()) if runner in CLIS else stamp.stat().st_mtime_ns / 1e9
            while not (runs := await ws.runs(sid)) or runs[-1].ended is None:
                await asyncio.sleep(0.01)
    return seen_w - asked_turn.at, ran - allowed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="one round of each, for the suite")
    parser.add_argument("--reps", type=int, help="rounds of each (default 10; --tiny 1)")
    parser.add_argument("--only", default="claude,codex,opencode,openai")
    parser.add_argument("--json-out")
    args = parser.parse_args()
    reps = args.reps or (1 if args.tiny else 10)
    results, missing = Results(), []
    with tempfile.TemporaryDirectory(prefix="procession-asking-") as tmp:
        figures: dict[str, tuple[list[float], list[float]]] = {}
        for n in range(reps):  # the runners take turns, so neither gets the quieter moments
            for runner in args.only.split(","):
                env: tuple[dict[str, str], list[str]] = ({}, [])
                with ModelServer() as server:
                    root = Path(tmp) / f"{runner}-{n}"
                    root.mkdir()
                    if runner in CLIS:
                        try:
                            sandbox = SANDBOXES[runner](find_cli(runner), server, root / "sandbox")
                        except AgentCliMissing as exc:
                            missing.append(f"{runner}: {exc}")
                            continue
                        env = session_env([sandbox], os.environ.__setitem__)
                    to_w, to_tool = asyncio.run(one(runner, root, server, env))
                figures.setdefault(runner, ([], []))[0].append(to_w)
                figures[runner][1].append(to_tool)
        size = f"{reps} rounds"
        for runner, (to_w, to_tool) in figures.items():
            results.record(f"{runner}_request_to_waiting", f"{runner}: the model's tool call -> W in the store",
                           size, to_w)
            results.record(f"{runner}_allow_to_tool", f"{runner}: allow -> the tool runs", size, to_tool)
        report = {**results.summary(), "mode": "tiny" if args.tiny else "full", "reps": reps, "missing": missing,
                  "environment": environment(Path(tmp))}
        publish(results.rows, report, args.json_out)
    if not figures:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
