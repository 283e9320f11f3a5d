"""Commands on a session's context: send, memory, compress, expand."""

from __future__ import annotations

import argparse
import io
import sys

from procession.calls import Workspace
from procession.calls.context import DEFAULT_KEEP_LAST
from procession.model import user_files
from procession.model.calls import Call
from procession.model.errors import InvalidArgument
from procession.present import lines, parse, results

from . import cursor
from .registry import SID, arg, command, sid_type
from .terminal import UsageError, done, emit, progress_bar, read_text


@command(Call.SEND, args=[
    SID, arg("text", nargs="?", help="the message", shell="- reads standard input"),
    arg("--from", dest="sender", type=sid_type, help="the session it comes from"),
    arg("--role", default="user"), arg("--pin", action="store_true", help="never compress this message away"),
    arg("--jsonl", metavar="FILE", help="append a transcript: one {role, content[, author, pinned, meta, created]} object per line"),
])
async def send(ws: Workspace, args: argparse.Namespace) -> int:
    if args.jsonl:
        if args.text is not None:
            raise UsageError("give either TEXT or --jsonl FILE, not both")
        try:
            fh = sys.stdin if args.jsonl == "-" else io.TextIOWrapper(user_files.open_regular(args.jsonl),
                                                                      encoding="utf-8")
        except OSError as exc:
            raise InvalidArgument(f"cannot read {args.jsonl}: {exc.strerror}") from None
        update, stop = progress_bar(args, "appending")
        with fh:  # read as it is appended, a batch at a time, in the call's one transaction
            try:
                outcome = await ws.send_many(args.sid, parse.jsonl(fh, args.jsonl), sender=args.sender,
                                             progress=update)
            finally:
                stop()
        cursor.caused(ws.path, outcome.row)
        return done(args, outcome, results.waitable(outcome))
    if args.text is None:
        raise UsageError("send needs TEXT (or - to read standard input) or --jsonl FILE")
    text = read_text("-") if args.text == "-" else args.text
    sent = await ws.send(args.sid, parse.text_message(text), role=args.role, sender=args.sender, pin=args.pin)
    cursor.caused(ws.path, sent.row)
    return done(args, sent, results.waitable(sent))


@command(Call.MEMORY, args=[SID], ops={
    "set": [arg("key"), arg("value", help="a JSON value")],
    "get": [arg("key")],
    "delete": [arg("key")],
    "ls": [],
    "load": [arg("file", metavar="FILE", help="a JSON object: each of its keys set to its value, all in one call"
                 " or none ('-' reads standard input)")],
}, default_op="ls")
async def memory(ws: Workspace, args: argparse.Namespace) -> int:
    match args.op:
        case "set":
            return done(args, await ws.memory_set(args.sid, args.key, parse.json_value(args.value)))
        case "load":
            return done(args, await ws.memory_set_many(args.sid, parse.json_object(read_text(args.file), args.file)))
        case "delete":
            return done(args, await ws.memory_delete(args.sid, args.key))
        case "get":
            value = await ws.memory_get(args.sid, args.key)
            emit(args, value, lambda: lines.value(value))
        case _:
            found = (await ws.show(args.sid)).memory
            emit(args, found, lambda: "\n".join(lines.memory_line(k, v) for k, v in found.items()))
    return 0


@command(Call.COMPRESS, args=[
    SID, arg("--keep-last", type=int, default=DEFAULT_KEEP_LAST),
    arg("--model", action="store_true", help="have the session's model (an openai: runner) write the summary"),
    arg("--with", dest="with_spec", metavar="SPEC", help="the model to ask instead: openai:MODEL[@URL][#KEY_VAR]"),
    arg("--mask-tools", action="store_true", help="replace older tool outputs with one-line stubs instead"),
    arg("--summary", metavar="TEXT", help="your own summary of what is folded ('-': read it from stdin)"),
])
async def compress(ws: Workspace, args: argparse.Namespace) -> int:
    chosen = [n for n, v in (("--model", args.model or args.with_spec), ("--mask-tools", args.mask_tools),
                             ("--summary", args.summary is not None)) if v]
    if len(chosen) > 1:
        raise UsageError(f"choose one way to compress, not {' and '.join(chosen)}")
    if args.model or args.with_spec:
        from procession.engine.summaries import compress_by_model

        return done(args, await compress_by_model(ws, args.sid, args.keep_last, spec=args.with_spec))
    summary = read_text("-") if args.summary == "-" else args.summary
    return done(args, await ws.compress(args.sid, args.keep_last, summary=summary, mask_tools=args.mask_tools))


@command(Call.EXPAND, args=[SID])
async def expand(ws: Workspace, args: argparse.Namespace) -> int:
    return done(args, await ws.expand(args.sid))
