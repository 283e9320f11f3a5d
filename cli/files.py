"""Commands on files and checkpoints: save and load."""

from __future__ import annotations

import argparse
import os

from procession.calls import Workspace
from procession.model.calls import Call

from .registry import SID, arg, command
from .terminal import UsageError, done, progress_bar


@command(Call.SAVE, help="checkpoint a session in the store (NAME) or write a snapshot file (-o FILE)", args=[
    SID, arg("name", nargs="?"), arg("-o", "--output", metavar="FILE"),
    arg("--force", action="store_true", help="replace FILE if it exists"),
])
async def save(ws: Workspace, args: argparse.Namespace) -> int:
    if bool(args.output) == bool(args.name):
        raise UsageError("save takes a checkpoint NAME or -o FILE (one of them)")
    return done(args, await ws.save(args.sid, args.name, file=args.output, replace=args.force))


@command(Call.LOAD, creates=True, args=[
    arg("source", metavar="FILE|SID"), arg("checkpoint", nargs="?"),
    arg("--name", help="name of the new session (loading a checkpoint)"),
    arg("--map", dest="mapping", action="append", default=[], metavar="OLD=NEW",
        help="move paths that start with folder OLD to NEW: the session's folder, its bound paths and watches,"
             " and the paths inside the agent's own session it carries (repeatable)"),
])
async def load(ws: Workspace, args: argparse.Namespace) -> int:
    if args.checkpoint is not None:
        if not args.source.isdigit():
            raise UsageError("load SID CHECKPOINT takes a session id first")
        if args.mapping:
            raise UsageError("--map applies to loading a file")
        outcome = await ws.load(int(args.source), args.checkpoint, name=args.name)
    else:
        if args.name:
            raise UsageError("--name applies to loading a checkpoint")
        update, stop = progress_bar(args, "loading")
        try:
            outcome = await ws.load(args.source, progress=update, mapping=_pairs(args.mapping))
        finally:
            stop()
    return done(args, outcome, str(outcome.sid))


def _pairs(items: list[str]) -> dict[str, str]:
    found = {}
    for item in items:
        old, sep, new = item.partition("=")
        if not sep or not old or not new:
            raise UsageError(f"--map takes OLD=NEW, not {item!r}")
        found[os.path.abspath(os.path.expanduser(old))] = os.path.abspath(os.path.expanduser(new))
    return found
