"""The picture of a forked and merged session's trace, drawn from its spans' own JSON.

    python screenshots/trace.py

A real engine exports the spans (``engine.tracing``) of a session's runs on the ``openai:``
loop and the tests' scripted model: a run that read a file unasked and wrote two (the first
allowed by a person, which made a rule; the second by the rule), a fork's run, the merge,
and the session's next run. The spans are written as the SDK's JSON (``trace.json``), and
drawn from that JSON as a timeline, one trace (session) after another, each span's bar at its
time, its links and what let each tool call run beside it (``trace.svg``, ``trace.png``).
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from rich.console import Console  # noqa: E402
from rich.text import Text  # noqa: E402

from generate import png  # noqa: E402
from procession import State, Workspace  # noqa: E402
from procession.engine import Engine  # noqa: E402
from procession.engine import tracing  # noqa: E402
from procession.engine.notify import Settings  # noqa: E402
from procession.model.prices import Prices  # noqa: E402
from support.models import ModelServer, Script, say, tool_call  # noqa: E402

WIDTH = 120
BAR = 46


async def _until(check: Any) -> Any:
    for _ in range(1500):
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.02)
    raise SystemExit("trace: the runs did not end")


async def record(folder: Path) -> list[dict[str, Any]]:
    """The spans of the story, as the SDK's JSON."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    data = folder / "data"
    data.mkdir()
    (data / "a.txt").write_text("a")
    exporter = InMemorySpanExporter()
    with ModelServer(Script()) as model:
        async with await Workspace.open(folder / "ws.db") as ws:
            sid = (await ws.spawn("ledger", "books", runner=f"openai:m@{model.url_v1}", cwd=str(folder),
                                  permissions="ask")).sid
            await ws.bind(sid, "folder", str(data), mode="rw")
            eng = Engine(folder / "ws.db", grace=0.3, notify=Settings(), prices=Prices(),
                         tracing=tracing.Settings(), exporter=exporter)
            await eng.start()
            stop = asyncio.Event()
            task = asyncio.ensure_future(eng.serve(stop))

            async def ended(s: int, n: int) -> bool:
                return len([r for r in await ws.runs(s) if r.ended]) >= n

            async def waiting() -> Any:
                found = await ws.pending([sid])
                return found and (await ws.info(sid)).state is State.WAITING and found[-1]

            model.script.add(tool_call("data_read", {"path": "a.txt"}),
                             tool_call("data_write", {"path": "b.txt", "content": "b"}),
                             tool_call("data_write", {"path": "c.txt", "content": "c"}), say("done"))
            await ws.send(sid, "copy a to b and c")
            await ws.activate(sid)
            asked = await _until(waiting)
            await asyncio.sleep(0.4)  # a person takes a moment
            await ws.allow(asked.id, always=True)
            await _until(lambda: ended(sid, 1))
            fork = (await ws.fork(sid, "ledger, second look")).sid
            model.script.add(tool_call("data_read", {"path": "b.txt"}), say("b is right"))
            await ws.send(fork, "check b")
            await ws.activate(fork)
            await _until(lambda: ended(fork, 1))
            await ws.merge(fork, sid)
            model.script.add(say("merged and done"))
            await ws.send(sid, "sum up")
            await ws.activate(sid)
            await _until(lambda: ended(sid, 2))
            await _until(lambda: _exported(exporter, eng, 3))
            stop.set()
            await task
    return [json.loads(span.to_json()) for span in exporter.get_finished_spans()]


async def _exported(exporter: Any, eng: Engine, runs: int) -> bool:
    assert eng.tracer is not None
    eng.tracer.provider.force_flush(5_000)
    return len([s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent")]) >= runs


def _time(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def draw(spans: list[dict[str, Any]]) -> Console:
    """The spans as a timeline: each trace (session) a block, each span a bar."""
    console = Console(record=True, width=WIDTH, file=open("/dev/null", "w"))  # noqa: SIM115
    start = min(_time(s["start_time"]) for s in spans)
    end = max(_time(s["end_time"]) for s in spans)
    scale = BAR / max(end - start, 1e-6)
    names = {s["context"]["span_id"]: s for s in spans}
    console.print(Text("The trace of a forked, merged session: each session a trace, each run an invoke_agent span,"
                       " each tool call an execute_tool child", style="bold"))
    console.print(Text(f"{end - start:.2f} s in all; drawn from the spans' JSON (screenshots/trace.json)", style="dim"))
    traces: dict[str, list[dict[str, Any]]] = {}
    for s in sorted(spans, key=lambda s: _time(s["start_time"])):
        traces.setdefault(s["context"]["trace_id"], []).append(s)
    for trace_id, members in traces.items():
        first = next(s for s in members if s["name"].startswith("invoke_agent"))
        console.print()
        console.print(Text(f"trace {trace_id[2:14]}…  session {first['attributes']['procession.session.id']}"
                           f" \"{first['attributes']['procession.session.name']}\"", style="bold cyan"))
        runs = [s for s in members if s["parent_id"] is None]
        for run in runs:
            _row(console, run, start, scale, 0)
            for link in run.get("links") or []:
                target = names.get(link["context"]["span_id"])
                where = (f"run {target['attributes']['procession.run.id']} of session"
                         f" {target['attributes']['procession.session.id']}") if target else "a span not shown"
                console.print(Text(f"{'':>{BAR + 2}}  ↳ link: {link['attributes']['procession.link']} {where}",
                                   style="magenta"))
            for child in (s for s in members if s["parent_id"] == run["context"]["span_id"]):
                _row(console, child, start, scale, 1)
    return console


def _row(console: Console, span: dict[str, Any], start: float, scale: float, depth: int) -> None:
    begin = int((_time(span["start_time"]) - start) * scale)
    length = max(1, int((_time(span["end_time"]) - _time(span["start_time"])) * scale))
    attrs = span["attributes"]
    bar = Text(" " * begin + "█" * min(length, BAR - begin))
    bar.pad_right(BAR - len(bar.plain))
    bar.stylize("green" if depth == 0 else "yellow")
    label = span["name"]
    if depth == 0:
        label += f"  run {attrs['procession.run.id']}, {attrs['procession.run.outcome']}"
    else:
        label += f"  {attrs['procession.tool.allowed']}" + (f" ({attrs['procession.tool.allowed_by']})"
                                                            if "procession.tool.allowed_by" in attrs else "")
        events = [e["name"].split(".")[-1] for e in span.get("events") or []]
        if events:
            label += f"  events: {', '.join(events)}"
    line = Text("│") + bar + Text("│ ") + Text("  " * depth + label)
    console.print(line, no_wrap=True, overflow="ellipsis")


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="procession-trace-") as tmp:
        spans = asyncio.run(record(Path(tmp)))
    (HERE / "trace.json").write_text(json.dumps(spans, indent=1) + "\n", encoding="utf-8")
    console = draw(json.loads((HERE / "trace.json").read_text(encoding="utf-8")))
    svg = HERE / "trace.svg"
    console.save_svg(str(svg), title="procession: a trace")
    made = png(svg)
    print(f"wrote screenshots/trace.json, trace.svg" + (f" and {made.name}" if made else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
