"""A bound MCP server's tools for the ``openai:`` runner, through the official ``mcp`` SDK.

The server is started (stdio) or connected to (streamable HTTP) when a run's toolbox opens,
its tools listed once, and closed when the run ends, however it ends. This is the one module
of the engine that imports the SDK, and only when a session has an MCP server bound.
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import AsyncIterator
from typing import Any

from .agents import McpServer
from .agents.base import text_of
from .toolbox import Refused, Tool

#: How long one tool call may take before it is answered with an error.
CALL_TIMEOUT_S = 120.0


def name_of(uri: str) -> str:
    """What the server's tools are prefixed with (its script, or its host), as the agent CLIs name it."""
    return McpServer.parse(uri).name


@contextlib.asynccontextmanager
async def connected(uri: str, cwd: str, env: dict[str, str]) -> AsyncIterator[list[Tool]]:
    """The server at ``uri`` (``stdio:COMMAND ARGS`` or an http(s) URL), its tools ready to call."""
    from mcp.client.session import ClientSession

    async with contextlib.AsyncExitStack() as stack:
        if uri.startswith("stdio:"):
            from mcp.client.stdio import StdioServerParameters, stdio_client

            argv = shlex.split(uri[len("stdio:"):])
            if not argv:
                raise Refused(f"{uri}: no command")
            params = StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=cwd)
            streams = await stack.enter_async_context(stdio_client(params))
        else:
            from mcp.client.streamable_http import streamable_http_client

            streams = await stack.enter_async_context(streamable_http_client(uri))
        read, write = streams[0], streams[1]
        session = await stack.enter_async_context(ClientSession(read, write, read_timeout_seconds=CALL_TIMEOUT_S))
        await session.initialize()
        listed = await session.list_tools()

        def caller(name: str) -> Any:
            async def call(args: dict[str, Any]) -> str:
                result = await session.call_tool(name, args)
                text = text_of([b.model_dump() for b in result.content])
                if result.is_error:
                    raise Refused(text or f"{name} failed")
                return text

            return call

        yield [Tool(t.name, t.description or t.name, t.input_schema, caller(t.name)) for t in listed.tools]
