"""The MCP server an agent CLI asks a person through (``procession mcp --session SID --ask``):
Claude Code's ``--permission-prompt-tool``, one per run, started by the engine outside the
run's bounds (``own_mcp``).

Its one tool, ``ask``, takes what Claude Code sends (``tool_name``, ``input``, ``tool_use_id``)
and makes the ``ask`` call: the session's permissions, its rules, or a person answer. It
returns once answered (``Workspace.decide``) — however long that takes — as Claude Code reads an
answer: ``{"behavior": "allow", "updatedInput": ...}`` or ``{"behavior": "deny", "message": ...}``,
as text.
"""

from __future__ import annotations

import json
from typing import Any

import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

import procession
from procession.calls import Workspace

TOOL = types.Tool(
    name="ask", description="Ask the person running this session whether a tool call may run.",
    input_schema={"type": "object", "properties": {"tool_name": {"type": "string"}, "input": {"type": "object"},
                                                   "tool_use_id": {"type": "string"}},
                  "required": ["tool_name", "input"]})


async def decide(ws: Workspace, sid: int, given: dict[str, Any]) -> dict[str, Any]:
    """The answer to one call Claude Code asks about, in its terms."""
    input = given.get("input") or {}
    ok, why = await ws.decide(sid, str(given.get("tool_name") or ""), input, key=given.get("tool_use_id"))
    return {"behavior": "allow", "updatedInput": input} if ok else {"behavior": "deny", "message": why}


async def serve(ws: Workspace, sid: int) -> int:
    """Serve the one tool on standard input and output until the CLI hangs up."""
    async def list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
                         ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[TOOL])

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        answer = await decide(ws, sid, params.arguments or {})
        return types.CallToolResult(content=[types.TextContent(text=json.dumps(answer))])

    server: Server[Any] = Server("procession_ask", version=procession.__version__, on_list_tools=list_tools,
                                 on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())
    return 0
