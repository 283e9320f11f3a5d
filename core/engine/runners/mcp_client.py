"""A bound MCP server's tools for the ``openai:`` runner, through the official ``mcp`` SDK.

The server is started (stdio) or connected to (streamable HTTP) when a run's toolbox opens,
its tools listed once, and closed when the run ends, however it ends. This is the one module
of the engine that imports the SDK, and only when a session has an MCP server bound.
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import AsyncIterator, Callable
from typing import Any

from ..reaper import starting
from .agents import McpServer
from .agents.base import text_of
from .toolbox import Refused, Tool

#: How long one tool call may take before it is answered with an error.
CALL_TIMEOUT_S = 120.0


def name_of(uri: str) -> str:
    """What the server's tools are prefixed with (its script, or its host), as the agent CLIs name it."""
    return McpServer.parse(uri).name


@contextlib.asynccontextmanager
async def connected(uri: str, cwd: str, env: dict[str, str],
                    wrap: Callable[[list[str]], list[str]] = list) -> AsyncIterator[list[Tool]]:
    """The server at ``uri`` (``stdio:COMMAND ARGS`` or an http(s) URL), its tools ready to call;
    a stdio server's command started as ``wrap`` makes it (within the run's bounds).

    A server that cannot be started, or does not answer its handshake, is refused in one
    line (``Refused``); one that fails after the run is done does not fail the run."""
    ready = used = False
    try:
        async with contextlib.AsyncExitStack() as stack:
            session = await _session(stack, uri, cwd, env, wrap)
            listed = await session.list_tools()
            ready = True
            try:
                yield [Tool(t.name, t.description or t.name, t.input_schema, _caller(session, t.name))
                       for t in listed.tools]
            finally:
                used = True
    except Exception as exc:  # noqa: BLE001 - the SDK raises exception groups of any kind
        if not ready:
            raise Refused(f"the MCP server {uri} could not be started: {_cause(exc)}") from None
        if not used:
            raise


async def _session(stack: contextlib.AsyncExitStack, uri: str, cwd: str, env: dict[str, str],
                   wrap: Callable[[list[str]], list[str]]) -> Any:
    from mcp.client.session import ClientSession

    if uri.startswith("stdio:"):
        from mcp.client.stdio import StdioServerParameters, stdio_client

        words = shlex.split(uri[len("stdio:"):])
        if not words:
            raise Refused("no command")
        argv = wrap(words)
        with starting():  # until it has exec'd with the run's marker, no reaper takes it for an orphan
            streams = await stack.enter_async_context(stdio_client(
                StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=cwd)))
    else:
        from mcp.client.streamable_http import streamable_http_client

        streams = await stack.enter_async_context(streamable_http_client(uri))
    session = await stack.enter_async_context(ClientSession(streams[0], streams[1],
                                                            read_timeout_seconds=CALL_TIMEOUT_S))
    await session.initialize()
    return session


def _caller(session: Any, name: str) -> Any:
    async def call(args: dict[str, Any]) -> str:
        try:
            result = await session.call_tool(name, args)
        except Exception as exc:  # noqa: BLE001 - a server that fails a call answers it with an error
            raise Refused(f"{name} failed: {_cause(exc)}") from None
        text = text_of([b.model_dump() for b in result.content])
        if result.is_error:
            raise Refused(text or f"{name} failed")
        return text

    return call


def _cause(exc: BaseException) -> str:
    """The first failure inside an exception group, in one line."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
