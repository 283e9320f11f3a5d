"""The reads: ps, show, history, log, runs. They change nothing and journal nothing."""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import time
from collections.abc import AsyncGenerator
from typing import Any, Final

from procession.calls import Workspace
from procession.calls.outside import Looker, marked
from procession.calls.reads import GREP_LIMIT, PS_SORTS
from procession.model import allowed, limits
from procession.model.errors import InvalidArgument
from procession.model.trigger_spec import duration
from procession.model.records import Message, SessionDetail
from procession.model.states import State
from procession.present import lines, parse, words
from procession.present.cells import text_table

from . import cursor
from .registry import PROG, SID, arg, command, count_type, sid_type
from .terminal import UsageError, emit, emit_stream, json_text

#: How often ``logs -f`` looks for more.
FOLLOW_S = 0.2
@command("ps", "list sessions (like ps)", args=[
    arg("-a", "--all", action="store_true", help="include terminated sessions"),
    arg("--agent", help="only this agent's sessions"),
    arg("--state", help="only sessions in this state"),
    arg("--sort", choices=list(PS_SORTS), metavar="COLUMN", help=f"order by this column ({', '.join(PS_SORTS)})"),
    arg("-r", "--reverse", action="store_true", help="the other way round (largest first)"),
    arg("-n", "--limit", type=count_type, metavar="N", help="at most N sessions"),
])
async def ps(ws: Workspace, args: argparse.Namespace) -> int:
    """``--json`` is streamed a batch at a time; the table needs every row to size its columns."""
    how = {"all": args.all, "agent": args.agent, "state": args.state, "sort": args.sort, "reverse": args.reverse,
           "limit": args.limit}
    if args.json:
        await emit_stream(args, ws.ps_json_batches(**how), lambda data: data, str)
        return 0
    found = [s async for batch in ws.ps_batches(**how) for s in batch]
    if refs := await ws.agent_refs():  # none: no process scan
        live = await asyncio.to_thread(Looker().look, refs)
        found = [marked(s, live.get(s.id)) for s in found]
    outside = [f"session {s.id}: {lines.open_outside(s.outside)}" for s in found if s.outside is not None]
    emit(args, None, "\n".join([text_table(found, time.time()), *outside,  # its NAME cell cuts the mark short
                                f"({words.plural(len(found), 'session')}; tokens: {ws.tokenizer})"]))
    return 0


@command("show", "show one session: state, memory, resources, triggers, context", args=[
    SID, arg("--last", "--tail", type=count_type, metavar="N", help="only the last N items of the context"),
])
async def show(ws: Workspace, args: argparse.Namespace) -> int:
    """``--tail N`` reads only those items (and what a fold before them needs); on a terminal
    the context is cut to what fits on the screen, saying how to see more; else the whole
    context is streamed, a batch at a time (the same text as printed whole)."""
    if args.last is None and not args.json and sys.stdout.isatty():
        await _screenful(ws, args.sid)
        return 0
    if args.last is not None:
        batches = _just(await ws.show(args.sid, last=args.last))
    else:
        batches = ws.show_batches(args.sid)
    try:
        await _print_detail(args, batches)
    finally:
        await batches.aclose()  # a reader gone (`| head`): the read ends before the workspace closes
    return 0


async def _print_detail(args: argparse.Namespace, batches: AsyncGenerator[SessionDetail, None]) -> None:
    d = await anext(batches)
    out = sys.stdout
    if args.json:
        data = d.to_json()
        data["context"] = _HOLE
        head, tail = json_text(data).split(json_text(_HOLE), 1)
        out.write(head + "[" + _context_json(d))
        started = bool(d.context)
        async for later in batches:
            if later.context:
                out.write(("," if started else "") + _context_json(later))
                started = True
        out.write("]" + tail + "\n")
        return
    out.write(words.printable("\n".join(_show_head(d) + ["", "context:"])) + "\n")
    _context_lines(d)
    async for later in batches:
        _context_lines(later)


#: Where the streamed context goes in ``show --json``'s object (no value of a user's can be it).
_HOLE = "\x00context streamed here " + "\x00" * 8


def _context_json(d: SessionDetail) -> str:
    return json_text([c.to_json() for c in d.context])[1:-1]


async def _screenful(ws: Workspace, sid: int) -> None:
    """``show`` on a terminal: the session and the end of its context, one screen of it (what
    that costs to read, not the whole history), then one line saying how to see more."""
    size = shutil.get_terminal_size()
    d = await ws.show(sid, last=max(size.lines, 1))
    head = words.printable("\n".join(_show_head(d) + ["", "context:"])).split("\n")
    total = d.info.messages

    def more(shown: int) -> str:
        return lines.more_context(shown, total, f"`{PROG} show {sid} --tail N`", f"`{PROG} history {sid}`")

    # room for the line saying more (as long as it can be) and the prompt's after it
    room = size.lines - sum(_rows(x, size.columns) for x in head) - _rows(more(total), size.columns) - 1
    shown: list[str] = []
    for item in reversed(d.context):
        line = words.printable("  " + lines.context_line(item))
        room -= _rows(line, size.columns)
        if room < 0 and shown:
            break
        shown.insert(0, line)
    sys.stdout.write("\n".join(head + shown) + "\n")
    if len(shown) < total:
        sys.stdout.write(more(len(shown)) + "\n")


def _rows(line: str, columns: int) -> int:
    """How many rows of a terminal ``columns`` wide a line takes."""
    return max(1, -(-len(line) // max(columns, 1)))


def _context_lines(d: SessionDetail) -> None:
    if d.context:
        sys.stdout.write(words.printable("\n".join("  " + lines.context_line(item) for item in d.context)) + "\n")


async def _just(d: SessionDetail) -> AsyncGenerator[SessionDetail, None]:
    yield d


def _show_head(d: SessionDetail) -> list[str]:
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
    return out


def range_type(text: str) -> tuple[int, int | None]:
    """``A:B``: history positions A to B, both included; either end may be left out."""
    try:
        return parse.history_range(text)
    except InvalidArgument as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _message_json(m: Message) -> dict[str, Any]:
    return {"seq": m.seq, "role": m.role, "content": m.content, "tokens": m.tokens, "author": m.author,
            "pinned": m.pinned, "created": m.created, "meta": m.meta}


@command("history", "the full history of a session, archived messages included, every message whole", args=[
    SID, arg("--short", action="store_true", help="one line a message, long ones cut"),
    arg("--after", type=int, default=0, metavar="SEQ", help="only the messages after this one"),
    arg("-n", "--limit", type=count_type, metavar="N", help="at most this many messages"),
    arg("--tail", type=count_type, metavar="N", help="only the last N messages (of the range, if given)"),
    arg("--range", type=range_type, metavar="A:B", help="only positions A to B (1-based, both included)"),
])
async def history(ws: Workspace, args: argparse.Namespace) -> int:
    """Streamed: printed a batch at a time as it is read, so memory does not grow with the history."""
    lo, hi = parse.history_window(args.after, args.limit, args.range)
    await emit_stream(args, ws.history_batches(args.sid, lo, hi, tail=args.tail), _message_json,
                      lambda m: lines.history_line(m, short=args.short))
    return 0


#: How ``wait`` exits when the time ran out with nothing woken (as ``timeout(1)`` exits).
TIMED_OUT: Final = 124


@command("wait", "wait until a run of a session ends or a message arrives in its inbox", args=[
    SID, arg("--timeout", type=float, default=60.0, metavar="S", help="seconds to wait at most (then exit 124)"),
    arg("--since", type=int, metavar="ROW", help="what happened after journal row ROW counts (activate and send"
        " print theirs; default: where this shell's last activate, send or wait left it, else now)"),
])
async def wait(ws: Workspace, args: argparse.Namespace) -> int:
    """Ends on what woke it, and prints the messages the session gained; a timeout exits
    ``TIMED_OUT`` (as ``timeout(1)`` does), anything else 0."""
    got = await ws.wait(args.sid, args.timeout, since=args.since if args.since is not None else cursor.point(ws.path))
    cursor.seen(ws.path, got.row)
    emit(args, got.to_json(), lambda: "\n".join([lines.waited(got), *(lines.history_line(m, short=True)
                                                                         for m in got.messages)]))
    return TIMED_OUT if got.woke == "timeout" else 0


@command("grep", "find messages by what was said in them, across every session, best first", args=[
    arg("text", help='the words to find, each of them in a message; "a quoted phrase" as written'),
    arg("--agent", help="only this agent's sessions"),
    arg("--on", metavar="HOST", help="only the sessions of this host (--host is the host this process is)"),
    arg("--since", metavar="DURATION", help="only messages of the last DURATION (30m, 2h, 7d)"),
    arg("--role", choices=limits.ROLES, help="only messages of this role (tool: the tool calls)"),
    arg("-n", "--limit", type=count_type, default=GREP_LIMIT, metavar="N", help="at most N messages"),
])
async def grep(ws: Workspace, args: argparse.Namespace) -> int:
    """Exits 1 when nothing is found, as grep(1) does."""
    found = await ws.grep(args.text, agent=args.agent, host=args.on, role=args.role, limit=args.limit,
                          since=time.time() - duration(args.since) if args.since else None)
    emit(args, [f.to_json() for f in found], lambda: lines.found_text(found, time.time()))
    return 0 if found else 1


@command("log", "the journal of system calls", args=[
    arg("sid", type=sid_type, nargs="?"), arg("-n", "--limit", type=count_type, default=50),
])
async def log(ws: Workspace, args: argparse.Namespace) -> int:
    entries = await ws.journal(args.sid, args.limit)
    emit(args, [e.to_json() for e in entries], lambda: "\n".join(lines.journal_line(e) for e in entries))
    return 0


@command("runs", "runs: cause, start, outcome, exit status, pid, tokens", args=[
    arg("sid", type=sid_type, nargs="?"), arg("-n", "--limit", type=count_type, default=50),
    arg("--tools", action="store_true", help="each run's tool calls too, and what let each run (a session's runs)"),
])
async def runs(ws: Workspace, args: argparse.Namespace) -> int:
    found = await ws.runs(args.sid, args.limit)
    now = time.time()
    if not args.tools:
        emit(args, [r.to_json() for r in found],
             lambda: "\n".join([lines.RUNS_HEADER, *(lines.run_line(r, now) for r in found)]))
        return 0
    if args.sid is None:
        raise UsageError("--tools lists a session's runs' tool calls: give its SID")
    used = allowed.by_run(await ws.tool_uses(args.sid, [r.id for r in found]))
    emit(args, [{**r.to_json(), "tools": [u.to_json() for u in used.get(r.id, [])]} for r in found],
         lambda: "\n".join([lines.RUNS_HEADER, *(line for r in found for line in
                                                   [lines.run_line(r, now), *map(lines.tool_use_line, used.get(r.id, []))])]))
    return 0


@command("logs", "what a run's step printed (the last run by default); -f follows a live one", args=[
    SID, arg("run", type=sid_type, nargs="?"), arg("-f", "--follow", action="store_true", help="follow until it ends"),
    arg("--stream", choices=("out", "err", "all"), default="all", help="only its stdout, or its stderr"),
])
async def logs(ws: Workspace, args: argparse.Namespace) -> int:
    """The log as the step printed it, made printable; with ``--json``, one chunk per line.
    Following a session whose run is queued (``activate`` then ``logs -f``), the run it waits
    for, once it starts."""
    after, run_id = 0, args.run
    if args.follow and run_id is None:
        run_id = await _queued_run(ws, args.sid)
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


async def _queued_run(ws: Workspace, sid: int) -> int | None:
    """The run a queued (ready) session is waiting for, once it starts; None (its last run)
    once it is not ready."""
    before = [r.id for r in await ws.runs(sid, limit=1)]
    while True:
        newest = [r.id for r in await ws.runs(sid, limit=1)]
        if newest != before:
            return newest[0]
        if (await ws.info(sid)).state is not State.READY:
            return None
        await asyncio.sleep(FOLLOW_S)
