"""The engine from the shell: ``procession run``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from procession.calls import Workspace
from procession.model.errors import InvalidArgument, WorkspaceError
from procession.present import results
from procession.present.words import printable

from .registry import arg, command
from .settings import note_unknown_keys
from .terminal import emit


class PrintableFormatter(logging.Formatter):
    """The engine's log lines quote session folders, runner errors and paths as they are:
    made printable before they reach the terminal."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))


@command("run", "run the engine in the foreground (no monitor); logs to stderr; waits for a database that"
         " cannot be reached yet", patient=True, args=[
    arg("--slots", type=int, default=2, help="how many steps may run at once"),
    arg("--grace", type=float, default=2.0, help="seconds between SIGINT, SIGTERM and SIGKILL"),
    arg("--tracker", choices=("auto", "cgroup", "marker"), default="auto",
        help="how a run's processes are followed (auto: a cgroup where one can be made, else a marker)"),
    arg("-v", "--verbose", action="store_true"),
])
async def run(ws: Workspace, args: argparse.Namespace) -> int:
    from procession.engine import Engine

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(PrintableFormatter("%(asctime)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, handlers=[handler])
    if not args.verbose:
        logging.getLogger("watchfiles").setLevel(logging.WARNING)  # one line per file event is noise
    note_unknown_keys()
    engine = Engine(ws.path, slots=args.slots, grace=args.grace, tracker=args.tracker)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await engine.serve(stop)
    if engine.lost:
        raise WorkspaceError(f"the engine stopped: {engine.lost}")
    return 0


@command("host", "the engines of the workspace's hosts (where each runs, whether it is heard); --dead: say a host's"
         " engine is dead, so that an engine of another machine may take the host over", args=[
    arg("name", nargs="?", metavar="HOST", help="the host (with --dead)"),
    arg("--dead", action="store_true", help="HOST's engine is dead (from another machine it cannot be told dead from"
        " cut off): its lease is given up; should it come back, it changes nothing"),
])
async def host(ws: Workspace, args: argparse.Namespace) -> int:
    if args.dead:
        if not args.name:
            raise InvalidArgument("--dead names the host whose engine is dead: procession host HOST --dead")
        done = await ws.dead(args.name)
        emit(args, done.to_json(), results.describe(done))
        return 0
    if args.name:
        raise InvalidArgument("a host is named only with --dead (procession host lists them all)")
    engines = (await ws.activity())["engines"]
    emit(args, engines, lambda: "\n".join(results.engine_line(e) for e in engines) or "no engine holds a host")
    return 0


@command("team", "the people of a shared (PostgreSQL) workspace, a database role each, which its journal names:"
         " add one, remove one, list them", ops={
    "add": [arg("name", metavar="NAME", help="the person's role (lower-case letters, digits, _)"),
            arg("--read-only", action="store_true", help="a role that may only look (a viewer)")],
    "remove": [arg("name", metavar="NAME")],
    "ls": [],
}, default_op="ls")
async def team(ws: Workspace, args: argparse.Namespace) -> int:
    match args.op:
        case "add" | "remove":
            done = await (ws.team_add(args.name, read_only=args.read_only) if args.op == "add"
                          else ws.team_remove(args.name))
            emit(args, done.to_json(), results.describe(done))
        case _:
            found = await ws.team()
            emit(args, [{"name": name, "read_only": ro} for name, ro in found],
                 lambda: "\n".join(f"{name}{'  (read only)' if ro else ''}" for name, ro in found)
                 or "no one but the workspace's owner: procession team add NAME")
    return 0
