"""The ``procession`` command: every system call from the shell, ``--json`` for scripts.

The CLI maps arguments to ``Workspace`` calls and prints their results; it holds no logic
of its own. A refused call prints one line, ``procession: error: ...``, and exits 1 (3 for
unresolved merge conflicts); a usage mistake exits 2. It imports neither Textual nor the
monitor unless asked to open the monitor, so that ``procession ps`` starts fast.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import asdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import humanize, runners, triggers
from .humanize import printable as safe
from .errors import InvalidArgument, MergeConflict, ProcessionError, WorkspaceError
from .merge import MISSING, Resolution, canonical
from .records import SessionInfo
from .states import State
from .workspace import DEFAULT_KEEP_LAST, DEFAULT_WINDOW, Workspace

PROG = "procession"


class UsageError(Exception):
    """A mistake in the command line found after parsing (exit status 2)."""


# ---------------------------------------------------------------- output


def emit(args: argparse.Namespace, data: Any, text: str | Callable[[], str]) -> None:
    """Print ``data`` as JSON with ``--json``, else the human ``text``."""
    if args.json:
        sys.stdout.write(json.dumps(data, ensure_ascii=False, default=str) + "\n")
    else:
        out = text() if callable(text) else text
        if out:
            sys.stdout.write(out + "\n")


def one_line(text: str, width: int) -> str:
    flat = safe(" ".join(text.split()))
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def trigger_summary(info: SessionInfo) -> str:
    if not info.triggers:
        return "-"
    fired = info.last_fired
    return f"{info.trigger_kinds} {humanize.age(fired)}" if fired else info.trigger_kinds


def ps_table(rows: Sequence[SessionInfo]) -> str:
    header = ("SID", "AGENT", "NAME", "S", "PRI", "CONTEXT", "MSGS", "TRIGGERS", "ACTIVE", "CPU%", "RSS", "RUNNER")
    table = [header]
    for s in rows:
        pct = 100 * s.context_tokens / s.context_window if s.context_window else 0
        table.append((
            str(s.id), one_line(s.agent, 12), one_line(s.name, 28), s.state.letter, str(s.priority),
            f"{humanize.count(s.context_tokens):>6}/{humanize.count(s.context_window):<5} {pct:4.0f}%",
            str(s.messages), trigger_summary(s), humanize.age(s.last_active),
            "-" if s.cpu is None else f"{s.cpu:.0f}", "-" if s.rss is None else humanize.size(s.rss),
            one_line(s.runner, 28),
        ))
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    right = {0, 4, 6, 9, 10}
    return "\n".join(
        "  ".join(c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(r)).rstrip()
        for r in table
    )


def progress_bar(args: argparse.Namespace, label: str) -> tuple[Callable[[int, int], None] | None, Callable[[], None]]:
    """A rich progress bar on a terminal; nothing with ``--json`` or when not on a terminal."""
    if args.json or not sys.stderr.isatty():
        return None, lambda: None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from rich.console import Console

    bar = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=Console(stderr=True), transient=True)
    task = bar.add_task(label, total=None)
    bar.start()

    def update(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total or None)

    return update, bar.stop


# ---------------------------------------------------------------- commands


async def cmd_ps(ws: Workspace, args: argparse.Namespace) -> int:
    rows = await ws.ps(all=args.all, agent=args.agent, state=args.state)
    emit(args, [r.to_json() for r in rows], lambda: ps_table(rows) + f"\n({humanize.plural(len(rows), 'session')}; tokens: {ws.tokenizer})")
    return 0


async def cmd_spawn(ws: Workspace, args: argparse.Namespace) -> int:
    sid = await ws.spawn(args.name, args.agent, system=args.system, goal=args.goal, priority=args.priority,
                         runner=args.runner, window=args.window, timeout=args.timeout,
                         cwd=str(Path(args.cwd).resolve()) if args.cwd else None)
    emit(args, {"id": sid}, str(sid))
    return 0


async def cmd_show(ws: Workspace, args: argparse.Namespace) -> int:
    d = await ws.show(args.sid)
    if args.json:
        emit(args, d.to_json(), "")
        return 0
    s = d.info
    lines = [
        f"session {s.id}  {safe(s.name)}  (agent {safe(s.agent)})",
        f"  state      {s.state}{f' ({s.reason})' if s.reason else ''}{'' if s.armed else '  [not approved: runner and triggers disarmed]'}",
        f"  priority   {s.priority}",
        f"  runner     {safe(s.runner)}  window {s.context_window}",
        f"  context    {s.context_tokens} tokens ({d.tokenizer}), {s.messages} items; history {s.length} messages",
        f"  created    {humanize.clock(s.created)}   last active {humanize.age(s.last_active)}",
        f"  folder     {safe(s.cwd)}",
    ]
    if s.goal:
        lines.append(f"  goal       {safe(s.goal)}")
    if s.parent:
        lines.append(f"  parent     {s.parent} at message {s.fork_seq}")
    if s.merged_into:
        lines.append(f"  merged     into {s.merged_into}")
    if d.system:
        lines += ["", "system prompt:", *("  " + safe(x) for x in d.system.splitlines())]
    if d.memory:
        lines += ["", "memory:", *(f"  {safe(k)} = {safe(canonical(v))}" for k, v in d.memory.items())]
    if d.resources:
        lines += ["", "resources:", *(f"  [{r.id}] {r.kind} {safe(r.uri)} ({r.mode})" for r in d.resources)]
    if s.triggers:
        lines += ["", "triggers:"]
        for t in s.triggers:
            state = "armed" if t.armed else "disarmed"
            fired = f", fired {t.fired}x, last {humanize.age(t.last_fired)} ago" if t.fired else ""
            lines.append(f"  [{t.id}] {safe(t.label)} ({state}{fired})")
    if d.checkpoints:
        lines += ["", "checkpoints:", *(f"  {safe(c.name)} at message {c.seq}, {humanize.clock(c.created)}"
                                         for c in d.checkpoints)]
    lines += ["", "context:"]
    for item in d.context:
        if item.fold is not None:
            lines.append(f"  [{item.seq:>5}] ~~ {item.folded} items folded ({item.tokens} tok): "
                         f"{one_line(item.content, 70)}")
        else:
            pin = "*" if item.pinned else " "
            lines.append(f"  [{item.seq:>5}]{pin}{item.role:<9} {one_line(item.content, 90)}")
    emit(args, None, "\n".join(lines))
    return 0


async def cmd_history(ws: Workspace, args: argparse.Namespace) -> int:
    msgs = await ws.history(args.sid)
    emit(args, [{"seq": m.seq, "role": m.role, "content": m.content, "tokens": m.tokens, "author": m.author,
                 "pinned": m.pinned, "created": m.created, "meta": m.meta} for m in msgs],
         lambda: "\n".join(f"[{m.seq:>5}]{'*' if m.pinned else ' '}{m.role:<9} {safe(m.author):<12}"
                           f" {one_line(m.content, 100)}" for m in msgs))
    return 0


async def cmd_send(ws: Workspace, args: argparse.Namespace) -> int:
    if args.jsonl:
        if args.text is not None:
            raise UsageError("give either TEXT or --jsonl FILE, not both")
        messages = read_jsonl(args.jsonl)
        update, done = progress_bar(args, "appending")
        try:
            n = await ws.send_many(args.sid, messages, sender=args.sender, progress=update)
        finally:
            done()
        emit(args, {"appended": n}, f"appended {n} messages to session {args.sid}")
        return 0
    if args.text is None:
        raise UsageError("send needs TEXT (or - to read standard input) or --jsonl FILE")
    if args.text == "-":
        try:
            text = sys.stdin.buffer.read().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidArgument(f"standard input is not UTF-8 text (invalid byte at {exc.start})") from None
    else:
        text = args.text
    if not text.strip():
        raise InvalidArgument("the message is empty (an empty one is likely a mistake on the command line)")
    seq = await ws.send(args.sid, text, role=args.role, sender=args.sender, pin=args.pin)
    emit(args, {"seq": seq}, f"message {seq} sent to session {args.sid}")
    return 0


def read_jsonl(file: str) -> list[dict[str, Any]]:
    """A transcript file, checked whole before anything is written."""
    try:
        fh = sys.stdin if file == "-" else open(file, encoding="utf-8")
    except OSError as exc:
        raise InvalidArgument(f"cannot read {file}: {exc.strerror}") from None
    out = []
    with fh:
        try:
            for n, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    raise InvalidArgument(f"{file} line {n}: not a JSON object") from None
                if not isinstance(obj, dict):
                    raise InvalidArgument(f"{file} line {n}: not a JSON object")
                out.append(obj)
        except UnicodeDecodeError:
            raise InvalidArgument(f"{file} is not UTF-8 text") from None
    return out


async def cmd_memory(ws: Workspace, args: argparse.Namespace) -> int:
    match args.op:
        case "set":
            try:
                value = json.loads(args.value)
            except ValueError:
                raise InvalidArgument(f"the value must be JSON (for text, quote it: '\"{args.value}\"')") from None
            await ws.memory_set(args.sid, args.key, value)
            emit(args, {"ok": True}, "")
        case "get":
            value = await ws.memory_get(args.sid, args.key)
            emit(args, value, lambda: safe(canonical(value)))
        case "delete":
            await ws.memory_delete(args.sid, args.key)
            emit(args, {"ok": True}, "")
        case _:
            memory = (await ws.show(args.sid)).memory
            emit(args, memory, lambda: "\n".join(f"{safe(k)} = {safe(canonical(v))}" for k, v in memory.items()))
    return 0


async def cmd_fork(ws: Workspace, args: argparse.Namespace) -> int:
    sid = await ws.fork(args.sid, args.name, at=args.at)
    emit(args, {"id": sid}, str(sid))
    copied = (await ws.info(sid)).triggers
    if copied and not args.json:
        print(f"{PROG}: note: {humanize.plural(len(copied), 'trigger')} copied disarmed; `{PROG} approve {sid}`"
              " arms them", file=sys.stderr)
    return 0


async def cmd_merge(ws: Workspace, args: argparse.Namespace) -> int:
    values: dict[str, str] = {}
    for item in args.set or []:
        key, sep, raw = item.partition("=")
        if not sep:
            raise UsageError(f"--set takes KEY=JSON, got {item!r}")
        try:
            values[key] = canonical(json.loads(raw))
        except ValueError:
            raise InvalidArgument(f"--set {key}: the value is not JSON (quote text: --set '{key}=\"text\"')") from None
    picks: dict[str, str] = {}
    for item in args.pick or []:
        key, sep, side = item.partition("=")
        if side not in ("ours", "theirs"):
            raise UsageError(f"--pick takes KEY=ours or KEY=theirs, got {item!r}")
        picks[key] = side
    side = "ours" if args.ours else "theirs" if args.theirs else None
    try:
        result = await ws.merge(args.source, args.target, Resolution(side, picks, values))
    except MergeConflict as exc:
        if args.json:
            emit(args, {"error": str(exc), "conflicts": {k: {"base": _show_missing(b), "ours": _show_missing(o),
                                                            "theirs": _show_missing(t)}
                                                        for k, (b, o, t) in exc.conflicts.items()}}, "")
        else:
            print(f"{PROG}: error: {exc}", file=sys.stderr)
            for key, (b, o, t) in sorted(exc.conflicts.items()):
                print(f"  {safe(key)}: base {_fmt(b)}, ours ({args.target}) {_fmt(o)}, theirs ({args.source}) {_fmt(t)}",
                      file=sys.stderr)
        return exc.exit_code
    emit(args, asdict(result),
         f"merged {result.source} into {result.target}: {humanize.plural(result.messages, 'message')} joined,"
         f" {humanize.plural(len(result.memory_changed), 'memory key')} changed,"
         f" {humanize.plural(result.resources_added, 'resource')} added")
    if result.base is None and not args.json:
        print(f"{PROG}: note: {args.source} and {args.target} share no history, so all of {args.source}'s"
              " messages joined (merging a copy into its original repeats them)", file=sys.stderr)
    return 0


def _show_missing(v: Any) -> Any:
    return None if v is MISSING else v


def _fmt(v: Any) -> str:
    return "(absent)" if v is MISSING else safe(canonical(v))


async def cmd_save(ws: Workspace, args: argparse.Namespace) -> int:
    if args.output:
        if args.name:
            raise UsageError("give either a checkpoint NAME or -o FILE, not both")
        if os.path.exists(args.output) and not args.force:
            raise InvalidArgument(f"{args.output} exists; give --force to replace it")
        out = await ws.export(args.sid, args.output)
        emit(args, out, f"wrote {out['file']} ({out['messages']} messages, {humanize.size(out['bytes'])})")
        return 0
    if not args.name:
        raise UsageError("save needs a checkpoint NAME or -o FILE")
    cp = await ws.save(args.sid, args.name)
    emit(args, asdict(cp), f"checkpoint {cp.name!r} of session {args.sid} at message {cp.seq}")
    return 0


async def cmd_load(ws: Workspace, args: argparse.Namespace) -> int:
    if args.checkpoint is not None:
        try:
            source = int(args.source)
        except ValueError:
            raise UsageError("load SID CHECKPOINT takes a session id first") from None
        sid = await ws.restore(source, args.checkpoint, args.name)
    else:
        if args.name:
            raise UsageError("--name applies to loading a checkpoint")
        update, done = progress_bar(args, "loading")
        try:
            sid = await ws.load(args.source, progress=update)
        finally:
            done()
        if not args.json:
            print(f"session {sid} loaded; its runner and triggers are disarmed until `{PROG} approve {sid}`",
                  file=sys.stderr)
    emit(args, {"id": sid}, str(sid))
    return 0


async def cmd_compress(ws: Workspace, args: argparse.Namespace) -> int:
    fold = await ws.compress(args.sid, args.keep_last)
    emit(args, asdict(fold), f"folded {fold.archived_count} items ({fold.archived_tokens} tokens) into a summary"
                              f" of {fold.summary_tokens} tokens")
    info = await ws.info(args.sid)
    if info.context_tokens > info.context_window and not args.json:
        print(f"{PROG}: note: the context ({info.context_tokens} tokens) is still over the window"
              f" ({info.context_window}); runs will refuse it until it fits: keep fewer with --keep-last,"
              " or migrate to a larger window", file=sys.stderr)
    return 0


async def cmd_expand(ws: Workspace, args: argparse.Namespace) -> int:
    fold = await ws.expand(args.sid)
    emit(args, asdict(fold), f"restored {fold.archived_count} items ({fold.archived_tokens} tokens)")
    return 0


async def each(ws: Workspace, args: argparse.Namespace, call: str,
               already: State | None = None) -> tuple[int, list[dict[str, Any]]]:
    """A lifecycle call on every SID given, like kill: a refusal is reported and the rest go on.
    A session already in the state ``already`` counts as done (``activate --now`` of a queued one)."""
    status, results = 0, []
    for sid in args.sids:
        try:
            if already is not None and (await ws.info(sid)).state is already:
                state = already
            else:
                state = await getattr(ws, call)(sid)
            results.append({"id": sid, "state": str(state)})
            if not args.json:
                print(f"{sid}: {state}")
        except ProcessionError as exc:
            status = 1
            results.append({"id": sid, "error": str(exc)})
            print(f"{PROG}: error: {exc}", file=sys.stderr)
    return status, results


def lifecycle(call: str) -> Callable[[Workspace, argparse.Namespace], Any]:
    """suspend / resume / interrupt / cancel on one or more sessions."""

    async def run(ws: Workspace, args: argparse.Namespace) -> int:
        status, results = await each(ws, args, call)
        if args.json:
            emit(args, results, "")
        return status

    return run


async def cmd_activate(ws: Workspace, args: argparse.Namespace) -> int:
    status, results = await each(ws, args, "activate", already=State.READY if args.now else None)
    queued = [r["id"] for r in results if r.get("state") == State.READY]
    if not queued:
        if args.json:
            emit(args, results, "")
        return status
    from .ledger import Ledger

    holder = await Ledger(ws.store).holder()
    if holder is not None or not args.now:
        if holder is None:
            print(f"{PROG}: no engine runs on this workspace: the run waits in the queue; start one with"
                  f" `{PROG} run`, or use `activate --now`", file=sys.stderr)
        if args.json:
            emit(args, results, "")
        return status
    before = {sid: (await ws.info(sid)).length for sid in queued}
    await run_until_idle(ws, set(queued))
    report = []
    for sid in queued:
        run = (await ws.runs(sid, limit=1))[-1]
        new = await ws.history(sid, before[sid])
        report.append({"id": sid, "run": run.id, "outcome": run.outcome, "error": run.error,
                       "messages": [{"seq": m.seq, "role": m.role, "content": m.content} for m in new]})
        if not args.json:
            print(f"{sid}: run {run.id} {run.outcome}" + (f": {run.error}" if run.error else ""))
            for m in new:
                print(f"  [{m.seq}] {m.role}: {safe(m.content)}")
    if args.json:
        emit(args, report, "")
    return status if all(r["outcome"] == "ok" for r in report) else 1


async def run_until_idle(ws: Workspace, sids: set[int]) -> None:
    """A foreground engine for these sessions only, until none of them is queued or running."""
    from .engine import Engine

    engine = Engine(ws.path, slots=max(1, len(sids)), only=sids, triggers=False)
    stop = asyncio.Event()
    await engine.start()
    serving = asyncio.ensure_future(engine.serve(stop))
    try:
        while not serving.done():
            states = [(await ws.info(sid)).state for sid in sids]
            if all(s not in (State.READY, State.RUNNING) for s in states):
                break
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await serving


async def cmd_run(ws: Workspace, args: argparse.Namespace) -> int:
    """The engine in the foreground, without a monitor; logs to stderr."""
    import logging
    import signal

    from .engine import Engine

    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s: %(message)s")
    if not args.verbose:
        logging.getLogger("watchfiles").setLevel(logging.WARNING)  # one line per file event is noise
    engine = Engine(ws.path, slots=args.slots, grace=args.grace)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await engine.serve(stop)
    return 0


async def cmd_runs(ws: Workspace, args: argparse.Namespace) -> int:
    runs = await ws.runs(args.sid, args.limit)

    def table() -> str:
        lines = [f"{'RUN':>5} {'SID':>4}  {'OUTCOME':<11} {'STARTED':<19} {'TIME':>7} {'EXIT':>4} {'PID':>7}"
                 f" {'TOKENS':>9}  CAUSE"]
        for r in runs:
            took = f"{(r.ended or time.time()) - r.started:.1f}s"
            cause = ",".join(c.get("kind", "?") for c in r.cause)
            lines.append(f"{r.id:>5} {r.session:>4}  {r.outcome or 'running':<11} {humanize.clock(r.started):<19}"
                         f" {took:>7} {'-' if r.exit_code is None else r.exit_code:>4} {r.pid or '-':>7}"
                         f" {r.tokens_in + r.tokens_out:>9}  {cause}"
                         + (f"\n        {one_line(r.error, 100)}" if r.error else ""))
        return "\n".join(lines)

    emit(args, [r.to_json() for r in runs], table)
    return 0


async def cmd_migrate(ws: Workspace, args: argparse.Namespace) -> int:
    out = await ws.migrate(args.sid, args.runner, window=args.window, compress=args.compress)
    emit(args, out, f"session {args.sid} now runs on {out['runner']} (window {out['window']},"
                    f" context {out['context_tokens']} tokens{', compressed to fit' if out['compressed'] else ''})")
    return 0


async def cmd_nice(ws: Workspace, args: argparse.Namespace) -> int:
    value = await ws.nice(args.sid, args.priority, relative=args.relative)
    emit(args, {"priority": value}, f"session {args.sid} priority {value}")
    return 0


def here(path: str) -> str:
    """A path the user typed, made absolute against their shell's folder, as every shell
    command reads it (the engine would read it against the session's folder)."""
    return os.path.abspath(os.path.expanduser(path))


def note_missing(paths: Sequence[str]) -> None:
    """After a bind or a watch was accepted: say which of its paths hold nothing yet."""
    for path in paths:
        if not any(ch in path for ch in "*?[") and not os.path.exists(path):
            print(f"{PROG}: note: {path} does not exist (yet)", file=sys.stderr)


async def cmd_bind(ws: Workspace, args: argparse.Namespace) -> int:
    local = args.kind in ("file", "folder", "db")
    uri = here(args.uri) if local else args.uri
    rid = await ws.bind(args.sid, args.kind, uri, mode=args.mode)
    emit(args, {"id": rid}, str(rid))
    if local:
        note_missing([uri])
    return 0


async def cmd_unbind(ws: Workspace, args: argparse.Namespace) -> int:
    await ws.unbind(args.sid, args.resource)
    emit(args, {"ok": True}, "")
    return 0


async def cmd_trigger(ws: Workspace, args: argparse.Namespace) -> int:
    match args.op:
        case "add":
            words = [here(p) for p in args.args] if args.kind == "watch" else args.args
            tid = await ws.trigger_add(args.sid, args.kind, words, debounce_ms=args.debounce)
            emit(args, {"id": tid}, str(tid))
            if args.kind == "watch":
                note_missing(words)
        case "rm":
            await ws.trigger_remove(args.sid, args.tid)
            emit(args, {"ok": True}, "")
        case _:
            trigs = await ws.triggers(args.sid)
            emit(args, [{"id": t.id, "kind": t.kind, "spec": t.spec, "armed": t.armed, "last_fired": t.last_fired,
                         "fired": t.fired} for t in trigs],
                 lambda: "\n".join(f"{t.id:>4}  {safe(t.label)}  {'armed' if t.armed else 'disarmed'}"
                                   f"  fired {t.fired}x, last {humanize.age(t.last_fired)}" for t in trigs))
    return 0


async def cmd_approve(ws: Workspace, args: argparse.Namespace) -> int:
    await ws.approve(args.sid)
    emit(args, {"ok": True}, f"session {args.sid} approved: its runner and triggers are armed")
    return 0


async def cmd_log(ws: Workspace, args: argparse.Namespace) -> int:
    entries = await ws.journal(args.sid, args.limit)
    emit(args, [e.to_json() for e in entries], lambda: "\n".join(
        f"{humanize.clock(e.ts)}  {e.actor:<7} {e.call:<9} {e.session if e.session is not None else '-':>4}"
        f"  {one_line(json.dumps(e.args, ensure_ascii=False), 60)} -> {one_line(json.dumps(e.outcome, default=str), 40)}"
        for e in entries))
    return 0


# ---------------------------------------------------------------- parser


INT64 = 2**63 - 1


def sid_type(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) <= INT64:
        raise argparse.ArgumentTypeError(f"not a valid id: {text!r}")
    return int(text)


def count_type(text: str) -> int:
    """A whole number of things, 1 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 0 < value <= INT64:
        raise argparse.ArgumentTypeError(f"must be 1 or more: {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", metavar="PATH", default=argparse.SUPPRESS,
                        help="workspace file (default: $PROCESSION_DB or the user data folder)")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON for scripts")

    parser = argparse.ArgumentParser(
        prog=PROG, parents=[common],
        description="Agent sessions as processes. With no command, opens the monitor.",
    )
    parser.add_argument("--readonly", action="store_true", help="a monitor that changes nothing")
    parser.add_argument("--theme", help="the monitor's colour theme")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, fn: Callable[..., Any], help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help, description=help)
        p.set_defaults(fn=fn)
        return p

    p = add("ps", cmd_ps, "list sessions (like ps)")
    p.add_argument("-a", "--all", action="store_true", help="include terminated sessions")
    p.add_argument("--agent", help="only this agent's sessions")
    p.add_argument("--state", help="only sessions in this state")

    p = add("spawn", cmd_spawn, "create a session")
    p.add_argument("name")
    p.add_argument("--agent", required=True)
    p.add_argument("--system", default="", help="system prompt")
    p.add_argument("--goal", default="")
    p.add_argument("--priority", type=int, default=0)
    p.add_argument("--runner", default=runners.DEFAULT, help="command:CMD | openai:MODEL[@URL] | builtin:NAME")
    p.add_argument("--window", type=int, default=DEFAULT_WINDOW, help="context window in tokens")
    p.add_argument("--timeout", type=float, help="seconds a run may take")
    p.add_argument("--cwd", help="the session's working folder (default: here)")

    p = add("show", cmd_show, "show one session: state, memory, resources, triggers, context")
    p.add_argument("sid", type=sid_type)

    p = add("history", cmd_history, "the full history of a session, archived messages included")
    p.add_argument("sid", type=sid_type)

    p = add("send", cmd_send, "send a message into a session")
    p.add_argument("sid", type=sid_type)
    p.add_argument("text", nargs="?", help="the message; - reads standard input")
    p.add_argument("--from", dest="sender", type=sid_type, help="the session it comes from")
    p.add_argument("--role", default="user")
    p.add_argument("--pin", action="store_true", help="never compress this message away")
    p.add_argument("--jsonl", metavar="FILE", help="append a transcript: one {role, content} object per line")

    p = add("memory", cmd_memory, "working memory: set KEY JSON | get KEY | delete KEY | ls")
    p.add_argument("sid", type=sid_type)
    msub = p.add_subparsers(dest="op", metavar="OP")
    m = msub.add_parser("set", parents=[common])
    m.add_argument("key")
    m.add_argument("value", help="a JSON value")
    msub.add_parser("get", parents=[common]).add_argument("key")
    msub.add_parser("delete", parents=[common]).add_argument("key")
    msub.add_parser("ls", parents=[common])

    p = add("fork", cmd_fork, "fork a session (copy-on-write)")
    p.add_argument("sid", type=sid_type)
    p.add_argument("--name")
    p.add_argument("--at", type=int, help="fork at this message (default: the end)")

    p = add("merge", cmd_merge, "merge SOURCE into TARGET (three-way); exits 3 on conflicts")
    p.add_argument("source", type=sid_type)
    p.add_argument("target", type=sid_type)
    side = p.add_mutually_exclusive_group()
    side.add_argument("--ours", action="store_true", help="settle conflicts with the target's values")
    side.add_argument("--theirs", action="store_true", help="settle conflicts with the source's values")
    p.add_argument("--set", action="append", metavar="KEY=JSON", help="settle one key with this value")
    p.add_argument("--pick", action="append", metavar="KEY=ours|theirs", help="settle one key with one side")

    p = add("save", cmd_save, "checkpoint a session in the store (NAME) or to a snapshot file (-o FILE)")
    p.add_argument("sid", type=sid_type)
    p.add_argument("name", nargs="?")
    p.add_argument("-o", "--output", metavar="FILE")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")

    p = add("load", cmd_load, "load a snapshot FILE, or SID CHECKPOINT, as a new session")
    p.add_argument("source", metavar="FILE|SID")
    p.add_argument("checkpoint", nargs="?")
    p.add_argument("--name", help="name of the new session (checkpoints)")

    p = add("compress", cmd_compress, "fold older context behind a summary (reversible)")
    p.add_argument("sid", type=sid_type)
    p.add_argument("--keep-last", type=int, default=DEFAULT_KEEP_LAST)

    p = add("expand", cmd_expand, "undo the newest compress exactly")
    p.add_argument("sid", type=sid_type)

    p = add("activate", cmd_activate, "queue a run (the engine starts it when a slot is free)")
    p.add_argument("sids", type=sid_type, nargs="+", metavar="SID")
    p.add_argument("--now", action="store_true", help="with no engine running, run it here in the foreground")

    for call, text in (("suspend", "freeze (SIGSTOP a running step)"),
                       ("resume", "thaw a suspended session"), ("interrupt", "stop the current step, keep its output"),
                       ("cancel", "terminate (kills a running step, keeps history)")):
        p = add(call, lifecycle(call), text)
        p.add_argument("sids", type=sid_type, nargs="+", metavar="SID")

    p = add("migrate", cmd_migrate, "move a session to another runner / window")
    p.add_argument("sid", type=sid_type)
    p.add_argument("--runner", required=True)
    p.add_argument("--window", type=int)
    p.add_argument("--compress", action="store_true", help="compress the context if it does not fit")

    p = add("nice", cmd_nice, "set the priority (higher runs first)")
    p.add_argument("sid", type=sid_type)
    p.add_argument("priority", type=int)
    p.add_argument("--relative", action="store_true", help="move the priority by this much")

    p = add("bind", cmd_bind, "bind a resource: file, folder, db, mcp, tool, url")
    p.add_argument("sid", type=sid_type)
    p.add_argument("kind")
    p.add_argument("uri")
    p.add_argument("--mode", default="rw", choices=("ro", "rw"))

    p = add("unbind", cmd_unbind, "unbind a resource (by id or URI)")
    p.add_argument("sid", type=sid_type)
    p.add_argument("resource")

    p = add("trigger", cmd_trigger, "triggers: add SID KIND ARGS | rm SID TID | ls SID")
    tsub = p.add_subparsers(dest="op", metavar="OP", required=True)
    t = tsub.add_parser("add", parents=[common], help="kinds: " + ", ".join(triggers.KINDS))
    t.add_argument("sid", type=sid_type)
    t.add_argument("kind")
    t.add_argument("args", nargs="*")
    t.add_argument("--debounce", type=int, metavar="MS")
    t = tsub.add_parser("rm", parents=[common])
    t.add_argument("sid", type=sid_type)
    t.add_argument("tid", type=sid_type)
    tsub.add_parser("ls", parents=[common]).add_argument("sid", type=sid_type)

    p = add("approve", cmd_approve, "arm a loaded session's runner and triggers")
    p.add_argument("sid", type=sid_type)

    p = add("run", cmd_run, "run the engine in the foreground (no monitor); logs to stderr")
    p.add_argument("--slots", type=int, default=2, help="how many steps may run at once")
    p.add_argument("--grace", type=float, default=2.0, help="seconds between SIGINT, SIGTERM and SIGKILL")
    p.add_argument("-v", "--verbose", action="store_true")

    p = add("runs", cmd_runs, "runs: cause, start, outcome, exit status, pid, tokens")
    p.add_argument("sid", type=sid_type, nargs="?")
    p.add_argument("-n", "--limit", type=count_type, default=50)

    p = add("demo", cmd_demo, "build the demo workspace (once) and open the monitor on it")
    p.set_defaults(needs_ws=False)
    p.add_argument("--fresh", action="store_true", help="rebuild the demo from scratch")
    p.add_argument("--no-monitor", action="store_true", help="only build it")

    p = add("log", cmd_log, "the journal of system calls")
    p.add_argument("sid", type=sid_type, nargs="?")
    p.add_argument("-n", "--limit", type=count_type, default=50)
    return parser


async def cmd_demo(args: argparse.Namespace) -> int:
    """Build (or reuse) the demo workspace, then open the monitor on it."""
    from . import demo

    db = Path(args.db).expanduser() if getattr(args, "db", None) else demo_path()
    made = await demo.build(db, fresh=args.fresh)
    if args.no_monitor or args.json:
        emit(args, {"db": str(made.db), "folder": str(made.folder), "sessions": made.sessions},
             f"demo workspace {made.db}\nits files: {made.folder}\n"
             f"open it: {PROG} --db {made.db}")
        return 0
    return await open_monitor(made.db, args)


async def monitor_command(args: argparse.Namespace) -> int:
    """The monitor on the workspace given (which must exist), or on the default one (made if new)."""
    from .store import default_path

    explicit = getattr(args, "db", None) or os.environ.get("PROCESSION_DB")
    db = Path(explicit).expanduser() if explicit else default_path()
    if explicit and not db.exists():
        raise WorkspaceError(f"no workspace at {db}: spawn a session there to make one, or try `{PROG} demo`")
    return await open_monitor(db, args)


def demo_path() -> Path:
    from platformdirs import user_data_dir

    return Path(user_data_dir("procession")) / "demo.db"


async def open_monitor(db: Path | None, args: argparse.Namespace) -> int:
    """The Textual monitor; imported only here, so no other command pays for Textual."""
    from procession.tui.app import run_monitor

    return await run_monitor(db, readonly=args.readonly, theme=args.theme)


#: The commands that may make a new workspace; any other on a missing file is a typo.
CREATING = ("spawn", "load")


async def run(args: argparse.Namespace) -> int:
    if not getattr(args, "needs_ws", True):
        return int(await args.fn(args))
    ws = await Workspace.open(getattr(args, "db", None), actor="cli", create=args.command in CREATING)
    try:
        return int(await args.fn(ws, args))
    finally:
        await ws.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.json = getattr(args, "json", False)
    if args.command is None:
        args.fn, args.needs_ws = monitor_command, False
    try:
        return asyncio.run(run(args))
    except UsageError as exc:
        parser.error(str(exc))
    except ProcessionError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
