"""Commands on lineage: fork and merge."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from procession.calls import Workspace
from procession.calls.merge import MISSING, Resolution
from procession.model.calls import Call
from procession.model.errors import MergeConflict
from procession.present import lines, parse
from procession.present.words import printable

from .registry import SID, arg, command, sid_type
from .terminal import UsageError, done, emit, error


@command(Call.FORK, args=[
    SID, arg("--name", help="the fork's name (default: the parent's, numbered)"),
    arg("--at", type=int, help="fork at this message (default: the end)"),
])
async def fork(ws: Workspace, args: argparse.Namespace) -> int:
    outcome = await ws.fork(args.sid, args.name, at=args.at)
    return done(args, outcome, str(outcome.sid))


@command(Call.MERGE, help="merge SOURCE into TARGET (three-way); exits 3 listing conflicts", args=[
    arg("source", type=sid_type), arg("target", type=sid_type),
    arg("--ours", action="store_true", help="settle conflicts with the target's values"),
    arg("--theirs", action="store_true", help="settle conflicts with the source's values"),
    arg("--set", action="append", metavar="KEY=JSON", help="settle one key with this value"),
    arg("--pick", action="append", metavar="KEY=ours|theirs", help="settle one key with one side"),
])
async def merge(ws: Workspace, args: argparse.Namespace) -> int:
    if args.ours and args.theirs:
        raise UsageError("give --ours or --theirs, not both")
    values = dict(parse.key_json(item) for item in args.set or [])
    picks = dict(parse.key_side(item) for item in args.pick or [])
    side = "ours" if args.ours else "theirs" if args.theirs else None
    try:
        outcome = await ws.merge(args.source, args.target, Resolution(side, picks, values))
    except MergeConflict as exc:
        if args.json:
            emit(args, conflicts_json(exc), "")
        else:
            error(str(exc))
            for key, (b, o, t) in sorted(exc.conflicts.items()):
                print(f"  {printable(key)}: base {lines.value(b)}, ours ({args.target}) {lines.value(o)},"
                      f" theirs ({args.source}) {lines.value(t)}", file=sys.stderr)
        return exc.exit_code
    return done(args, outcome)


def conflicts_json(exc: MergeConflict) -> dict[str, Any]:
    """A refused merge as data: the reason, and each key's base, ours and theirs (null: absent)."""
    return {"error": str(exc), "conflicts": {
        k: {"base": None if b is MISSING else b, "ours": None if o is MISSING else o,
            "theirs": None if t is MISSING else t} for k, (b, o, t) in exc.conflicts.items()}}
