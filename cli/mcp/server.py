"""The tools and resources on the wire, with the official MCP SDK's low-level server: stdio,
or streamable HTTP on a loopback address.

A tool's reply carries what the CLI prints with ``--json``, as text and as structured content
(an object: a list or a value is wrapped as ``{"result": ...}``). A refusal is a tool result
marked as an error whose text is the one line the CLI prints after ``procession: error:``, one
line per session refused (its structured content is the CLI's ``--json`` of the refusal:
``{"error": ...}``, a merge's conflicts, the per-session report of a lifecycle call).
Arguments that do not fit a tool's schema are refused the same way; an unknown tool or
resource is a protocol error. Imported only when ``procession mcp`` starts.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

import jsonschema
import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

import procession
from procession.model.errors import InvalidArgument, ProcessionError

from ..terminal import json_text, refusal
from .scope import Scope
from .tools import TOOLS, Json, Refused, Served

#: A session's parts served as resources, and the most sessions listed (the templates reach all).
PARTS = {"context": "its active context: the messages (and summaries) a step is given",
         "memory": "its working memory: key -> JSON value"}
RESOURCES_MAX = 200
_URI = re.compile(r"^procession://session/([1-9][0-9]{0,18})/(context|memory)$")
LOOPBACK = ("localhost",)


def instructions(scope: Scope) -> str:
    if scope.everything:
        who = "It acts for the person who started it, on every session."
    else:
        who = (f"It acts as {scope.who}: it reaches {scope.agent}'s sessions, the sessions spawned as one of them"
               " and their forks; send reaches any session.")
    return ("Procession's system calls: sessions are like processes (spawn, send, fork, merge, suspend, ...). "
            f"{who} wait blocks until a session's run ends or a message arrives in its inbox.")


def build(served: Served) -> Server[Any]:
    """The low-level server for one scope: every connection to it shares the workspace."""
    scope = served.scope
    offered = [t for t in TOOLS.values() if scope.offers(t.name, reads=t.reads)]
    listing = [types.Tool(name=t.name, description=t.description(), input_schema=t.input_schema(),
                          annotations=types.ToolAnnotations(read_only_hint=t.reads, destructive_hint=t.destructive))
               for t in offered]
    validators = {t.name: jsonschema.Draft202012Validator(t.input_schema()) for t in offered}

    async def list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
                         ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listing)

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        tool = TOOLS.get(params.name)
        if tool is None:
            raise MCPError(types.INVALID_PARAMS, f"no tool {params.name!r}")
        given = params.arguments or {}
        try:
            scope.check_tool(tool.name, reads=tool.reads)
            problem = next(iter(validators[tool.name].iter_errors(given)), None)
            if problem is not None:
                where = ".".join(map(str, problem.absolute_path))
                raise InvalidArgument(f"{tool.name}: {f'{where}: ' if where else ''}{problem.message}")
            data = await tool.run(served, tool.with_defaults(given))
        except Refused as exc:
            return _refused(exc.lines, exc.data)
        except ProcessionError as exc:
            return _refused([str(exc)], {"error": str(exc)})
        return types.CallToolResult(content=[types.TextContent(text=json_text(data))],
                                    structured_content=_object(data))

    async def list_resources(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
                             ) -> types.ListResourcesResult:
        reach = await scope.reach(served.ws)
        sessions = [s for s in await served.ws.ps() if reach is None or s.id in reach][-RESOURCES_MAX:]
        return types.ListResourcesResult(resources=[
            types.Resource(name=f"session {s.id} {part}", uri=f"procession://session/{s.id}/{part}",
                           description=f"{s.name} ({s.agent}): {what}", mime_type="application/json")
            for s in sessions for part, what in PARTS.items()])

    async def list_templates(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
                             ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[
            types.ResourceTemplate(name=f"session {part}", uri_template=f"procession://session/{{sid}}/{part}",
                                   description=f"a session's {what}", mime_type="application/json")
            for part, what in PARTS.items()])

    async def read_resource(ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
                            ) -> types.ReadResourceResult:
        uri = str(params.uri)
        found = _URI.match(uri)
        if found is None:
            raise MCPError(types.INVALID_PARAMS, f"no resource {uri}: resources are procession://session/SID/"
                                                 f"{'|'.join(PARTS)}")
        sid = int(found.group(1))
        try:
            await scope.check(served.ws, sid)
            data: Json = ([c.to_json() for c in await served.ws.context(sid)] if found.group(2) == "context"
                          else (await served.ws.show(sid)).memory)
        except ProcessionError as exc:
            raise MCPError(types.INVALID_PARAMS, refusal(str(exc))) from None
        return types.ReadResourceResult(contents=[
            types.TextResourceContents(uri=uri, mime_type="application/json", text=json_text(data))])

    return Server("procession", version=procession.__version__, instructions=instructions(scope),
                  on_list_tools=list_tools, on_call_tool=call_tool, on_list_resources=list_resources,
                  on_list_resource_templates=list_templates, on_read_resource=read_resource)


def _object(data: Json) -> dict[str, Any]:
    return data if isinstance(data, dict) else {"result": data}


def _refused(lines: list[str], data: Json) -> types.CallToolResult:
    """A refusal's lines (one per session refused, for a call on several), as the CLI's."""
    return types.CallToolResult(content=[types.TextContent(text="\n".join(map(refusal, lines)))],
                                structured_content=_object(data), is_error=True)


def loopback(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) on a loopback address, or ``InvalidArgument``."""
    host, sep, port = address.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidArgument(f"--http takes HOST:PORT, got {address!r}")
    try:
        local = host in LOOPBACK or ipaddress.ip_address(host).is_loopback
    except ValueError:
        local = False
    if not local:
        raise InvalidArgument(f"--http serves on a loopback address only (127.0.0.1, ::1, localhost), not {host!r}")
    return host, int(port)


async def serve(served: Served, http: str | None = None) -> int:
    """Serve until the client hangs up (stdio) or the process is stopped (HTTP)."""
    server = build(served)
    if http is None:
        from mcp.server.stdio import stdio_server

        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        return 0
    import uvicorn

    host, port = loopback(http)
    app = server.streamable_http_app(host=host)
    await uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning")).serve()
    return 0
