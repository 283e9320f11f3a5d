"""``procession mcp``: the system-call table as an MCP server, so that agents make the calls.

``tools`` maps the CLI's commands to tools (their schemas come from the same declarations),
``scope`` says what a server may touch, ``server`` puts both on the wire with the MCP SDK.
Only this module is imported by the CLI: the SDK loads when the server starts, so that no
other command pays for it.
"""

from __future__ import annotations

import argparse

from procession.calls import Workspace
from procession.model.errors import InvalidArgument

from ..registry import arg, command, sid_type
from .scope import Scope
from .tools import Served, allowed


async def scope_of(ws: Workspace, args: argparse.Namespace) -> Scope:
    """The scope the command line asks for: a session's (with its agent), an agent's, or all."""
    agent = args.agent
    if args.session is not None:
        own = (await ws.info(args.session)).agent
        if agent is not None and agent != own:
            raise InvalidArgument(f"session {args.session} is agent {own}'s, not {agent}'s")
        agent = own
    return Scope(agent=agent, session=args.session, allow=allowed(args.allow) if args.allow is not None else None,
                 readonly=args.readonly)


@command("mcp", "serve the system calls to agents over MCP (stdio; --http for streamable HTTP on loopback)", args=[
    arg("--agent", metavar="NAME", help="act as this agent: its sessions and those spawned from them"),
    arg("--session", type=sid_type, metavar="SID", help="act as this session (of its agent); it spawns for any agent"),
    arg("--allow", metavar="CALLS", help="offer only these tools, comma-separated (memory, trigger: all of theirs)"),
    arg("--readonly", action="store_true", help="offer the reads only (ps, show, history, memory_get, wait)"),
    arg("--http", metavar="HOST:PORT", help="serve streamable HTTP at http://HOST:PORT/mcp (loopback only)"),
])
async def mcp(ws: Workspace, args: argparse.Namespace) -> int:
    scope = await scope_of(ws, args)
    from .server import loopback, serve

    if args.http is not None:
        loopback(args.http)  # refused before anything listens
    return await serve(Served(ws.as_actor("mcp", scope.session), scope), args.http)
