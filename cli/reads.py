"""The reads: ps, show, history, log, runs. They change nothing and journal nothing."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
from collections.abc import Sequence

from procession.calls import Workspace
from procession.model.records import SessionInfo
from procession.present import lines, words
from procession.present.cells import COLUMNS

from .registry import SID, arg, command, count_type, sid_type
from .terminal import emit

#: How often ``logs -f`` looks for more.
FOLLOW_S = 0.2
#: The widest a cell of ``ps`` grows before it is cut with ``…`` (the rest take what they need).
PS_WIDTHS = {"agent": 12, "name": 28, "runner": 28}


def ps_table(rows: Sequence[SessionInfo], now: float) -> str:
    """The process table as the monitor draws it, in plain text: the same columns and cells."""
    table = [[c.title for c in COLUMNS]]
    for s in rows:
        cells = []
        for c in COLUMNS:
            text = "".join(part for part, _ in c.cell(s, now)).replace("\n", " ")
            limit = PS_WIDTHS.get(c.key)
            cells.append(words.one_line(text, limit) if limit else text.rstrip())
        table.append(cells)
    widths = [max(len(r[i]) for r in table) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(cell.rjust(widths[i]) if COLUMNS[i].right else cell.ljust(widths[i])
                  for i, cell in enumerate(r)).rstrip()
        for r in table
    )


@command("ps", "list sessions (like ps)", args=[
    arg("-a", "--all", action="store_true", help="include terminated sessions"),
    arg("--agent", help="only this agent's sessions"),
    arg("--state", help="only sessions in this state"),
])
async def ps(ws: Workspace, args: argparse.Namespace) -> int:
    found = await ws.ps(all=args.all, agent=args.agent, state=args.state)
    emit(args, [r.to_json() for r in found],
         lambda: ps_table(found, time.time()) + f"\n({words.plural(len(found), 'session')}; tokens: {ws.tokenizer})")
    return 0


@command("show", "show one session: state, memory, resources, triggers, context", args=[
    SID, arg("--last", type=count_type, metavar="N", help="only the last N items of the context"),
])
async def show(ws: Workspace, args: argparse.Namespace) -> int:
    d = await ws.show(args.sid)
    if args.last is not None:
        d = dataclasses.replace(d, context=d.context[-args.last:])
    if args.json:
        emit(args, d.to_json(), "")
        return 0
    out = lines.summary(d)
    if d.system:
        out += ["", "system prompt:", *("  " + words.printable(x) for x in d.system.splitlines())]
    if d.memory:
        out += ["", "memory:", *("  " + lines.memory_line(k, v) for k, v in d.memory.items())]
    if d.resources:
        out += ["", "resources:", *("  " + lines.resource_line(r) for r in d.resources)]
    if d.info.triggers:
        out += ["", "triggers:", *("  " + lines.trigger_line(t) for t in d.info.triggers)]
    if d.checkpoints:
        out += ["", "checkpoints:", *(f"  {words.printable(c.name)} at message {c.seq}, {words.clock(c.created)}"
                                      for c in d.checkpoints)]
    out += ["", "context:", *("  " + lines.context_line(item) for item in d.context)]
    emit(args, None, "\n".join(out))
    return 0


@command("history", "the full history of a session, archived messages included, every message whole", args=[
    SID, arg("--short", action="store_true", help="one line a message, long ones cut"),
    arg("--after", type=int, default=0, metavar="SEQ", help="only the messages after this one"),
    arg("-n", "--limit", type=count_type, metavar="N", help="at most this many messages"),
])
async def history(ws: Workspace, args: argparse.Namespace) -> int:
    msgs = await ws.history(args.sid, max(0, args.after), None if args.limit is None else max(0, args.after) + args.limit)
    emit(args, [{"seq": m.seq, "role": m.role, "content": m.content, "tokens": m.tokens, "author": m.author,
                 "pinned": m.pinned, "created": m.created, "meta": m.meta} for m in msgs],
         lambda: "\n".join(lines.history_line(m, short=args.short) for m in msgs))
    return 0


@command("wait", "wait until a run of a session ends or a message arrives in its inbox", args=[
    SID, arg("--timeout", type=float, default=60.0, metavar="S", help="seconds to wait at most"),
])
async def wait(ws: Workspace, args: argparse.Namespace) -> int:
    """Ends on what woke it (``timeout`` too: exit 0); prints the messages the session gained."""
    got = await ws.wait(args.sid, args.timeout)
    emit(args, got.to_json(), lambda: "\n".join([lines.waited(got), *(lines.history_line(m, short=True)
                                                                         for m in got.messages)]))
    return 0


@command("log", "the journal of system calls", args=[
    arg("sid", type=sid_type, nargs="?"), arg("-n", "--limit", type=count_type, default=50),
])
async def log(ws: Workspace, args: argparse.Namespace) -> int:
    entries = await ws.journal(args.sid, args.limit)
    emit(args, [e.to_json() for e in entries], lambda: "\n".join(lines.journal_line(e) for e in entries))
    return 0


@command("runs", "runs: cause, start, outcome, exit status, pid, tokens", args=[
    arg("sid", type=sid_type, nargs="?"), arg("-n", "--limit", type=count_type, default=50),
])
async def runs(ws: Workspace, args: argparse.Namespace) -> int:
    found = await ws.runs(args.sid, args.limit)
    now = time.time()
    emit(args, [r.to_json() for r in found],
         lambda: "\n".join([lines.RUNS_HEADER, *(lines.run_line(r, now) for r in found)]))
    return 0


@command("logs", "what a run's step printed (the last run by default); -f follows a live one", args=[
    SID, arg("run", type=sid_type, nargs="?"), arg("-f", "--follow", action="store_true", help="follow until it ends"),
    arg("--stream", choices=("out", "err", "all"), default="all", help="only its stdout, or its stderr"),
])
async def logs(ws: Workspace, args: argparse.Namespace) -> int:
    """The log as the step printed it, made printable; with ``--json``, one chunk per line."""
    after, run_id = 0, args.run
    while True:
        run, chunks = await ws.run_log(args.sid, run_id, after=after)
        run_id = run.id
        for c in chunks:
            after = c.id
            if args.stream != "all" and c.stream != args.stream and not (args.stream == "out" and c.stream == "reply"):
                continue
            if args.json:
                sys.stdout.write(json.dumps(c.to_json(), ensure_ascii=False) + "\n")
            else:
                sys.stdout.write(words.printable(c.data))
        sys.stdout.flush()
        if not args.follow or run.ended is not None:
            return 0
        await asyncio.sleep(FOLLOW_S)
