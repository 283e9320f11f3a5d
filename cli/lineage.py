"""Commands on lineage: fork and merge."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from procession.calls import Workspace
from procession.model.calls import Call
from procession.model.errors import MergeConflict
from procession.model.records import plain_conflicts
from procession.present import lines, parse

from .registry import SID, arg, command, sid_type
from .terminal import UsageError, done, emit, error


@command(Call.FORK, args=[
    SID, arg("--name", help="the fork's name (default: the parent's, numbered)"),
    arg("--at", type=int, help="fork at this message (default: the end)"),
    arg("--worktree", action="store_true",
        help="give the fork a folder of its own: a git worktree on a new branch (a copy outside git)"),
    arg("--carry", action="store_true", help="with --worktree: take the repository's uncommitted changes along"),
])
async def fork(ws: Workspace, args: argparse.Namespace) -> int:
    outcome = await ws.fork(args.sid, args.name, at=args.at, worktree=args.worktree, carry=args.carry)
    return done(args, outcome, str(outcome.sid))


@command(Call.MERGE, help="merge SOURCE into TARGET (three-way); exits 3 listing conflicts", args=[
    arg("source", type=sid_type), arg("target", type=sid_type),
    arg("--ours", action="append", nargs="?", const=parse.ALL, metavar="PATH",
        help="settle conflicts with the target's side (with a PATH: that file only; repeatable)"),
    arg("--theirs", action="append", nargs="?", const=parse.ALL, metavar="PATH",
        help="settle conflicts with the source's side (with a PATH: that file only; repeatable)"),
    arg("--set", action="append", metavar="KEY=JSON", help="settle one key with this value"),
    arg("--pick", action="append", metavar="KEY=ours|theirs", help="settle one key with one side"),
    arg("--dry-run", action="store_true", help="show what would change (memory and files) and change nothing"),
])
async def merge(ws: Workspace, args: argparse.Namespace) -> int:
    resolution = parse.resolution(args.ours or [], args.theirs or [], args.set or [], args.pick or [],
                                  usage=UsageError)
    if args.dry_run:
        plan = await ws.merge_plan(args.source, args.target, resolution)
        emit(args, plan.to_json(), lambda: "\n".join(lines.merge_plan(plan)))
        return 0 if plan.clean else MergeConflict.exit_code
    try:
        outcome = await ws.merge(args.source, args.target, resolution)
    except MergeConflict as exc:
        if args.json:
            emit(args, conflicts_json(exc), "")
        else:
            error(str(exc))
            for line in lines.conflict_lines(exc.conflicts, exc.files, args.source, args.target):
                print(f"  {line}", file=sys.stderr)
        return exc.exit_code
    return done(args, outcome)


def conflicts_json(exc: MergeConflict) -> dict[str, Any]:
    """A refused merge as data: the reason, each key's base, ours and theirs (null: absent), and
    each conflicting file of a worktree fork with what both sides did to it."""
    return {"error": str(exc), "conflicts": plain_conflicts(exc.conflicts), "files": exc.files}
