"""``procession limit``: a session's (or an agent's) budget, and what was spent against it."""

from __future__ import annotations

import argparse

from procession.calls import Workspace
from procession.model import budgets
from procession.model.calls import Call
from procession.present import lines

from .registry import arg, command, sid_type
from .terminal import UsageError, done, emit


@command(Call.LIMIT, args=[
    arg("sid", type=sid_type, nargs="?", help="the session (or --agent)"),
    arg("--agent", metavar="NAME", help="all of this agent's sessions together"),
    arg("--tokens", metavar="N", help="input and output tokens its runs reported (500k, 2M)"),
    arg("--cost", type=float, metavar="USD", help="dollars: as its agent CLI reported, else by [prices] of the config"),
    arg("--time", metavar="DURATION", help="its runs' running time (90m, 2h)"),
    arg("--runs", type=int, metavar="N", help="runs started"),
    arg("--per", choices=budgets.PERIODS, help="day (the default), week, month (local time) or total"),
    arg("--clear", action="store_true", help="remove the limit"),
])
async def limit(ws: Workspace, args: argparse.Namespace) -> int:
    """With no cap, --per or --clear, shows the budgets and what was spent."""
    if args.sid is None and args.agent is None:
        found = await ws.budgets()
    elif (args.tokens, args.cost, args.time, args.runs, args.per) == (None,) * 5 and not args.clear:
        found = await ws.budgets(args.sid, agent=args.agent if args.sid is None else None)
    else:
        if args.sid is not None and args.agent is not None:
            raise UsageError("give a session or --agent NAME, not both")
        return done(args, await ws.limit(
            args.sid, agent=args.agent, tokens=budgets.amount(args.tokens, "--tokens") if args.tokens else None,
            cost=args.cost, seconds=budgets.seconds(args.time) if args.time else None, runs=args.runs,
            per=args.per, clear=args.clear))
    emit(args, [b.to_json() for b in found], lambda: "\n".join(map(lines.budget_line, found)) if found
         else "no limits")
    return 0
