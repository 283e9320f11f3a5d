"""Commands on the agent CLIs: which are installed here (agents), and on their own sessions:
adopt, sync, attach."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from procession.calls import Workspace
from procession.calls.outside import Looker
from procession.model import agents, transcripts
from procession.model.calls import Call
from procession.model.trigger_spec import duration
from procession.present import lines, results

from .registry import SID, SIDS, arg, command
from .terminal import UsageError, done, each, emit, notes, progress_bar


@command("agents", "the agent CLIs a session can be run by: which are installed here, how to install the rest",
         workspace=False)
async def agents_(args: argparse.Namespace) -> int:
    found = agents.installed()
    emit(args, [f.to_json() for f in found], lambda: lines.agent_lines(found))
    return 0


@command(Call.ADOPT, creates=True, args=[
    arg("cli", choices=transcripts.CLIS, help="whose sessions"),
    arg("ident", nargs="?", metavar="ID|PATH", help="one session: its id, an id prefix, or its transcript file"),
    arg("--all", dest="every", action="store_true", help="every session the CLI keeps here"),
    arg("--since", metavar="DURATION", help="only sessions changed in the last DURATION (30m, 2h, 7d)"),
    arg("--agent", help="the agent the new sessions belong to (default: the CLI's name)"),
])
async def adopt(ws: Workspace, args: argparse.Namespace) -> int:
    since = time.time() - duration(args.since) if args.since else None
    update, stop = progress_bar(args, "adopting")
    try:
        adoption = await ws.adopt(args.cli, args.ident, every=args.every, since=since, agent=args.agent,
                                  progress=update)
    finally:
        stop()
    emit(args, adoption.to_json(), lambda: results.adoption(adoption))
    notes(args, adoption.results)
    return 0


@command(Call.SYNC, args=[SIDS])
async def sync(ws: Workspace, args: argparse.Namespace) -> int:
    await each(args, ws.sync_all(args.sids))
    return 0


@command(Call.ATTACH, args=[SID, arg("--accept", action="store_true",
                                     help="open it on the settings its runs changed in its state folder, once read")])
async def attach(ws: Workspace, args: argparse.Namespace) -> int:
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError("attach opens the agent's own interactive CLI: run it on a terminal")
    refs = await ws.agent_refs()
    live = Looker().look({args.sid: refs[args.sid]}) if args.sid in refs else {}
    if live:
        raise UsageError(f"session {args.sid} is open in its agent's own CLI already (pid {live[args.sid].pid}):"
                         " quit that one first")
    from procession.engine.runners import agents  # the engine's runners: only attach starts one

    attached = await ws.attach(args.sid, accept=args.accept)
    notes(args, [attached])
    try:
        await asyncio.to_thread(agents.interactive, attached)
    finally:
        synced = await ws.detach(attached)
    return done(args, synced)
