"""Commands on a session's context: send, memory, compress, expand."""

from __future__ import annotations

import argparse
import sys

from procession.calls import Workspace
from procession.calls.context import DEFAULT_KEEP_LAST
from procession.model.calls import Call
from procession.model.errors import InvalidArgument
from procession.present import lines, parse

from .registry import SID, arg, command, sid_type
from .terminal import UsageError, done, emit, progress_bar, read_text


@command(Call.SEND, args=[
    SID, arg("text", nargs="?", help="the message", shell="- reads standard input"),
    arg("--from", dest="sender", type=sid_type, help="the session it comes from"),
    arg("--role", default="user"), arg("--pin", action="store_true", help="never compress this message away"),
    arg("--jsonl", metavar="FILE", help="append a transcript: one {role, content} object per line"),
])
async def send(ws: Workspace, args: argparse.Namespace) -> int:
    if args.jsonl:
        if args.text is not None:
            raise UsageError("give either TEXT or --jsonl FILE, not both")
        try:
            fh = sys.stdin if args.jsonl == "-" else open(args.jsonl, encoding="utf-8")
        except OSError as exc:
            raise InvalidArgument(f"cannot read {args.jsonl}: {exc.strerror}") from None
        with fh:
            messages = list(parse.jsonl(fh, args.jsonl))
        update, stop = progress_bar(args, "appending")
        try:
            outcome = await ws.send_many(args.sid, messages, sender=args.sender, progress=update)
        finally:
            stop()
        return done(args, outcome)
    if args.text is None:
        raise UsageError("send needs TEXT (or - to read standard input) or --jsonl FILE")
    text = read_text("-") if args.text == "-" else args.text
    return done(args, await ws.send(args.sid, parse.text_message(text), role=args.role, sender=args.sender,
                                    pin=args.pin))


@command(Call.MEMORY, args=[SID], ops={
    "set": [arg("key"), arg("value", help="a JSON value")],
    "get": [arg("key")],
    "delete": [arg("key")],
    "ls": [],
}, default_op="ls")
async def memory(ws: Workspace, args: argparse.Namespace) -> int:
    match args.op:
        case "set":
            return done(args, await ws.memory_set(args.sid, args.key, parse.json_value(args.value)), "")
        case "delete":
            return done(args, await ws.memory_delete(args.sid, args.key), "")
        case "get":
            value = await ws.memory_get(args.sid, args.key)
            emit(args, value, lambda: lines.value(value))
        case _:
            found = (await ws.show(args.sid)).memory
            emit(args, found, lambda: "\n".join(lines.memory_line(k, v) for k, v in found.items()))
    return 0


@command(Call.COMPRESS, args=[SID, arg("--keep-last", type=int, default=DEFAULT_KEEP_LAST)])
async def compress(ws: Workspace, args: argparse.Namespace) -> int:
    return done(args, await ws.compress(args.sid, args.keep_last))


@command(Call.EXPAND, args=[SID])
async def expand(ws: Workspace, args: argparse.Namespace) -> int:
    return done(args, await ws.expand(args.sid))
