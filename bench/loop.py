"""The ``openai:`` runner's agent loop: what a tool call costs beyond the model, and what
``compress --mask-tools`` and ``--model`` save on a tool-heavy session.

    python bench/loop.py [--calls 50] [--reps 3] [--tiny] [--json-out FILE]

*Loop overhead per tool call*: a session bound to a file, a folder, a command and an MCP
server (``tests/support/mcp_calc.py``), run by an engine in this process against the scripted
model server, which answers every request at once with one tool call (``--calls`` of them,
then a text). The figure is the time from one model request reaching the server to the next
one: streaming the reply in, running the tool, handing the reply and the call to the
engine (which commits them within its flush period, 0.2 s, off this path), building and
sending the next request. The scripted server's own time (well under a millisecond)
is in it; a real model's is not. Median per tool kind.

*Token saving*: a 200-message session of 66 rounds (a question, a tool call that read a
table of 30-60 rows, an answer) and 2 opening messages, as the runners store theirs;
compress keeping the last 8 items with ``--mask-tools``, with the extractive summary, and
with ``--model`` (the scripted model's summary of 40 words standing for a real one): the
context in tokens before and after, by Procession's estimator.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from report import Results, engine_running, environment, table  # noqa: E402
from support.models import ModelServer, Script, say, tool_call  # noqa: E402

CALC = HERE.parent / "tests" / "support" / "mcp_calc.py"
TOOLS = {"file read": ("rates_csv_read", {}), "folder read": ("data_read", {"path": "rates.csv", "end": 3}),
         "sqlite query": ("pay_db_query", {"sql": "SELECT count(*) FROM pay"}),
         "command": ("echo", {"args": ["hello"]}), "MCP tool": ("mcp_calc_add", {"a": 1, "b": 2})}


async def overhead(folder: Path, kind: str, calls: int) -> list[float]:
    """Gaps between consecutive model requests of one run making ``calls`` calls of ``kind``."""
    import sqlite3

    from procession import Workspace

    data = folder / "data"
    data.mkdir(exist_ok=True)
    (data / "rates.csv").write_text("grade,rate\n" + "".join(f"{g},{0.2 + i / 100:.2f}\n" for i, g in enumerate("ABCDE")))
    with sqlite3.connect(folder / "pay.db") as db:
        db.execute("CREATE TABLE IF NOT EXISTS pay (name TEXT, amount INT)")
    name, args = TOOLS[kind]
    with ModelServer(Script(*[tool_call(name, args)] * calls, say("done"))) as server:
        db_path = folder / f"{kind.replace(' ', '-')}.db"
        async with await Workspace.open(db_path) as ws:
            sid = (await ws.spawn("bench", "bench", runner=f"openai:m@{server.url_v1}", cwd=str(folder),
                                  env={"PROCESSION_MAX_TURNS": str(calls + 1)})).sid
            await ws.bind(sid, "file", str(data / "rates.csv"), mode="ro")
            await ws.bind(sid, "folder", str(data), mode="ro")
            await ws.bind(sid, "db", str(folder / "pay.db"), mode="ro")
            await ws.bind(sid, "tool", "echo=echo")
            await ws.bind(sid, "mcp", f"stdio:{sys.executable} {CALC}")
            await ws.send(sid, "go")
            async with engine_running(db_path):
                await ws.activate(sid)
                while not (runs := await ws.runs(sid)) or runs[-1].ended is None:
                    await asyncio.sleep(0.02)
                assert runs[-1].outcome == "ok" and not runs[-1].error, runs[-1].error
                errors = [m for m in await ws.history(sid) if m.role == "tool" and m.meta["tool"]["is_error"]]
                assert not errors, errors[0].content
        at = [r.at for r in server.turn_requests()]
    assert len(at) == calls + 1
    return [b - a for a, b in zip(at, at[1:])]


async def saving(folder: Path) -> dict[str, dict[str, int]]:
    """Context tokens before and after each way of compressing the same 200-message session."""
    from procession import Workspace
    from procession.model.toolcalls import tool_message
    from procession.engine.summaries import compress_by_model
    from procession.store import rows

    out = {}
    canned = " ".join(["Read tables t0..t65 of employees; each total checked, top pay noted, no open task."] * 3)
    with ModelServer(Script(say(canned))) as server:
        for way in ("mask-tools", "extractive", "model"):
            async with await Workspace.open(folder / f"saving-{way}.db") as ws:
                sid = (await ws.spawn("heavy", "a", runner=f"openai:m@{server.url_v1}",
                                      system="You answer questions about the payroll tables.")).sid
                messages: list[tuple[Any, ...]] = [("user", "We go through the payroll tables one by one.", "user",
                                                    False, None),
                                                   ("assistant", "Ready.", "runner", False, None)]
                for i in range(66):
                    table_rows = "\n".join(f"E{j:04d},{'ABCDE'[j % 5]},{160 + j % 9} h,{2400 + 37 * j} EUR"
                                           for j in range(30 + i % 31))
                    role, content, meta = tool_message(f"c{i}", "data_read", {"path": f"t{i}.csv"},
                                                       "id,grade,hours,pay\n" + table_rows, False)
                    messages += [("user", f"Check table t{i}.csv: who is paid most?", "user", False, None),
                                 (role, content, "runner", False, meta),
                                 ("assistant", f"In t{i}.csv E{29 + i % 31:04d} is paid most.", "runner", False, None)]
                async with ws.store.tx() as tx:
                    await rows.append(tx, await rows.session(tx, sid), messages, ws.store.count_tokens)
                before = (await ws.info(sid)).context_tokens
                if way == "model":
                    after = (await compress_by_model(ws, sid, 8)).context_tokens
                else:
                    after = (await ws.compress(sid, 8, mask_tools=way == "mask-tools")).context_tokens
                out[way] = {"messages": len(messages), "before": before, "after": after}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tiny", action="store_true", help="5 calls of each kind, once")
    ap.add_argument("--json-out")
    args = ap.parse_args()
    calls, reps = (5, 1) if args.tiny else (args.calls, args.reps)
    results = Results()
    with tempfile.TemporaryDirectory(prefix="procession-bench-loop-") as tmp:
        for kind in TOOLS:
            gaps: list[float] = []
            for rep in range(reps):
                folder = Path(tmp) / f"{kind.replace(' ', '-')}-{rep}"
                folder.mkdir()
                gaps += asyncio.run(overhead(folder, kind, calls))
            results.record(f"loop_{kind.replace(' ', '_')}", f"loop overhead per tool call, {kind}",
                           f"{calls} calls x {reps}", gaps)
        saved = asyncio.run(saving(Path(tmp)))
    for way, s in saved.items():
        results.record(f"saving_{way}", f"compress {way}: context tokens kept", f"{s['messages']} messages",
                       [], unit="%", value=100.0 * s["after"] / s["before"], before=s["before"], after=s["after"])
    print(table(results.rows))
    print(json.dumps({"mode": "tiny" if args.tiny else "full", "environment": environment(HERE.parent), **results.summary()}))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results.summary(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
