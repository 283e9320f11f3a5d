"""Commands on bindings and approval: approve, bind, unbind, trigger."""

from __future__ import annotations

import argparse
import sys

from procession.calls import Workspace
from procession.model import trigger_spec
from procession.model.calls import Call
from procession.model.errors import ProcessionError
from procession.present import lines, parse

from .registry import SID, SIDS, arg, command, sid_type
from .terminal import done, each, emit


@command(Call.APPROVE, args=[
    SIDS, arg("-y", "--yes", action="store_true", help="arm without asking (after reading what is listed)"),
])
async def approve(ws: Workspace, args: argparse.Namespace) -> int:
    """Lists what it arms first, and asks on a terminal; elsewhere it wants ``--yes``."""
    details = [await ws.show(sid) for sid in args.sids]
    listing = [line for d in details if d.info.unapproved for line in lines.approval(d)]
    if not listing:  # nothing to arm: the call itself says so
        await each(args, ws.each(Call.APPROVE, args.sids))
        return 0
    print("\n".join(["approving arms these (their steps may run, with what is bound):", *listing]),
          file=sys.stderr)
    if not args.yes:
        if not sys.stdin.isatty():
            raise ProcessionError("approving needs a yes: give --yes, having read the list above")
        if input("approve? [y/N] ").strip().lower() not in ("y", "yes"):
            raise ProcessionError("not approved: nothing was armed")
    await each(args, ws.each(Call.APPROVE, args.sids))
    return 0


@command(Call.BIND, args=[
    SID, arg("kind", help="file, folder, db (or sqlite), mcp, tool, url"), arg("uri"),
    arg("--mode", default="rw", choices=("ro", "rw")),
])
async def bind(ws: Workspace, args: argparse.Namespace) -> int:
    uri = parse.local_paths(args.kind, [args.uri])[0]
    return done(args, await ws.bind(args.sid, args.kind, uri, mode=args.mode))


@command(Call.UNBIND, args=[SID, arg("resource", help="its id, or its URI")])
async def unbind(ws: Workspace, args: argparse.Namespace) -> int:
    return done(args, await ws.unbind(args.sid, args.resource))


@command(Call.TRIGGER, ops={
    "add": [SID, arg("kind", help=", ".join(trigger_spec.KINDS)),
            arg("args", nargs="*", help="what the kind takes: " + "; ".join(
                f"{kind} {takes}" for kind, takes in trigger_spec.TAKES.items())),
            arg("--debounce", type=int, metavar="MS",
                help=f"watch and commit: quiet it waits for before it fires, so a burst of changes fires once"
                     f" (default: {trigger_spec.DEFAULT_DEBOUNCE_MS}; commit {trigger_spec.DEFAULT_COMMIT_DEBOUNCE_MS})"),
            arg("--branch", help="commit: the branch to follow (default: the one checked out; '*': every branch)"),
            arg("--path", action="append", default=[], metavar="GLOB",
                help="commit: only commits touching these paths (relative to the repository, like 'src/**')")],
    "rm": [SID, arg("tid", type=sid_type)],
    "ls": [SID],
})
async def trigger(ws: Workspace, args: argparse.Namespace) -> int:
    match args.op:
        case "add":
            words = parse.local_paths(args.kind, args.args)
            return done(args, await ws.trigger_add(args.sid, args.kind, words, debounce_ms=args.debounce,
                                                   branch=args.branch, paths=args.path))
        case "rm":
            return done(args, await ws.trigger_remove(args.sid, args.tid))
    found = await ws.triggers(args.sid)
    emit(args, [t.to_json() for t in found], lambda: "\n".join(lines.trigger_line(t) for t in found))
    return 0
