"""Commands on files and checkpoints, and on where a session's files are: save, load, move."""

from __future__ import annotations

import argparse

from procession.calls import Workspace
from procession.model.calls import Call
from procession.present import parse, results

from .registry import SID, arg, command
from .reads import TIMED_OUT
from .terminal import UsageError, done, emit, error, notes, progress_bar


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
            outcome = await ws.load(args.source, progress=update, mapping=parse.path_map(args.mapping))
        finally:
            stop()
    return done(args, outcome, str(outcome.sid))


@command(Call.MOVE, args=[
    SID, arg("--to", required=True, metavar="HOST", help="the host it goes to (where an engine runs as"
                                                        " procession --host HOST run); its own host takes back"
                                                        " a move not placed yet"),
    arg("--map", dest="mapping", action="append", default=[], metavar="OLD=NEW",
        help="where its paths go on HOST: its folder (by default the same path there), its bound paths and watches"
             " that start with folder OLD go to NEW (absolute paths; repeatable)"),
    arg("--no-files", dest="files", action="store_false",
        help="carry no file: its folder is on HOST already (you copied it, or it is a clone there)"),
    arg("--no-wait", dest="wait", action="store_false", help="return once the move is asked for (show SID says how"
                                                             " it goes)"),
    arg("--timeout", type=float, default=300.0, metavar="S",
        help="seconds to wait for the engines of both hosts (default 300; then exit 124, the move going on; at"
             " once when one of them runs no engine)"),
])
async def move(ws: Workspace, args: argparse.Namespace) -> int:
    outcome = await ws.move(args.sid, args.to, mapping=parse.path_map(args.mapping, here_=False), files=args.files)
    if not args.wait or outcome.cancelled:
        return done(args, outcome)
    if outcome.waiting:  # no engine to wait for (said in its notes): not moved, and a script must not go on as if
        done(args, outcome)
        return TIMED_OUT
    notes(args, [outcome])
    found = await ws.moved(args.sid, args.timeout)
    if found.stage == "failed" and not args.json:  # a failure, said where the CLI says failures
        error(results.move_failed(found), detail=found.said)
        return 1
    emit(args, found.to_json(), results.moved(found))
    if found.stage == "failed":
        return 1
    return TIMED_OUT if found.stage != "done" else 0
