"""Commands of what agents ask a person: pending, allow, deny, and the rules allow --always makes."""

from __future__ import annotations

import argparse

from procession.calls import Workspace
from procession.model.calls import Call
from procession.present import lines

from .registry import arg, command, sid_type
from .terminal import done, emit

REQ = arg("request", type=sid_type, metavar="REQ", help="the request's number (procession pending lists them)")


@command("pending", "what sessions wait for you: the requests their agents made, oldest first", args=[
    arg("sids", type=sid_type, nargs="*", metavar="SID", help="only these sessions' requests"),
    arg("--request", type=sid_type, metavar="REQ", help="one request whole (its input as the agent gave it)"),
])
async def pending(ws: Workspace, args: argparse.Namespace) -> int:
    if args.request is not None:
        found = await ws.request(args.request)
        emit(args, found.to_json(), lambda: "\n".join(lines.request_text(found)))
        return 0
    waiting = await ws.pending(args.sids or None)
    emit(args, [r.to_json() for r in waiting], lambda: "\n".join(
        ["# REQ  SID session                  age  what it asks", *map(lines.request_line, waiting)]
        if waiting else ["nothing waits for you"]))
    return 0


@command(Call.ALLOW, args=[
    REQ, arg("--always", action="store_true",
             help="and from now on, for that session: a shell command exactly as asked (a program known to run no"
                  " other, such as ls or grep: with any arguments); any other tool, every call of it"),
])
async def allow(ws: Workspace, args: argparse.Namespace) -> int:
    return done(args, await ws.allow(args.request, always=args.always))


@command(Call.DENY, args=[REQ, arg("--why", default="", metavar="TEXT", help="the reason, given to the agent")])
async def deny(ws: Workspace, args: argparse.Namespace) -> int:
    return done(args, await ws.deny(args.request, why=args.why))


@command("rules", "what sessions' agents may do unasked, by allow --always", args=[
    arg("sid", type=sid_type, nargs="?", help="only this session's rules"),
])
async def rules(ws: Workspace, args: argparse.Namespace) -> int:
    found = await ws.rules(args.sid)
    emit(args, [r.to_json() for r in found], lambda: "\n".join(
        ["#RULE  SID  tool(what it matches: exactly, or any arguments)", *map(lines.rule_line, found)] if found else ["no rules"]))
    return 0


@command(Call.FORGET, args=[arg("rule", type=sid_type, metavar="RULE", help="the rule's number (procession rules)")])
async def forget(ws: Workspace, args: argparse.Namespace) -> int:
    return done(args, await ws.forget(args.rule))
