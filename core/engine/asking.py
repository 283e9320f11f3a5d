"""The MCP server an agent CLI asks a person through: Claude Code's ``--permission-prompt-tool``,
served by the engine itself on a unix socket of the run (``own_mcp``), which the CLI reaches
through the relay it starts as a stdio server (the run's bounds let it reach nothing else).

In the engine, not a process of its own: the MCP SDK is imported once, by the first run that
asks, instead of by a new process at every run's start (about a second on 2 cores, which the
CLI waited for before it began). Its one tool, ``ask``, takes what Claude Code sends
(``tool_name``, ``input``, ``tool_use_id``) and returns once answered (``Workspace.decide``),
however long that takes, as Claude Code reads an answer (measured on 2.1.197): ``{"behavior":
"allow", "updatedInput": ...}`` or ``{"behavior": "deny", "message": ...}``, as text.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from typing import Any

import anyio
import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from ..calls import Workspace

TOOL = types.Tool(
    name="ask", description="Ask the person running this session whether a tool call may run.",
    input_schema={"type": "object", "properties": {"tool_name": {"type": "string"}, "input": {"type": "object"},
                                                   "tool_use_id": {"type": "string"}},
                  "required": ["tool_name", "input"]})


def server(ws: Workspace, sid: int, keep: Callable[[], bool]) -> Server[Any]:
    """The server for session ``sid``'s runs: one tool, answered by ``ws.decide`` (``keep``:
    a request whose asker hangs up outlives it, the engine stopping)."""
    async def list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
                         ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[TOOL])

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        given = params.arguments or {}
        input = given.get("input") or {}
        ok, why = await ws.decide(sid, str(given.get("tool_name") or ""), input, key=given.get("tool_use_id"),
                                  keep=keep)
        answer = {"behavior": "allow", "updatedInput": input} if ok else {"behavior": "deny", "message": why}
        return types.CallToolResult(content=[types.TextContent(text=json.dumps(answer))])

    return Server("procession_ask", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve(conn: socket.socket, ws: Workspace, sid: int, keep: Callable[[], bool]) -> None:
    """Serve one connection (the relay of one CLI) until it hangs up."""
    asking = server(ws, sid, keep)
    # each with a thread of its own, never from the shared pool: a reader blocked for days
    # holds it, and forty waiting runs would hold them all
    reading = anyio.wrap_file(conn.makefile("r", encoding="utf-8", errors="replace"), limiter=anyio.CapacityLimiter(1))
    writing = anyio.wrap_file(conn.makefile("w", encoding="utf-8"), limiter=anyio.CapacityLimiter(1))
    async with reading, writing, stdio_server(reading, writing) as (read, write):
        await asking.run(read, write, asking.create_initialization_options())
