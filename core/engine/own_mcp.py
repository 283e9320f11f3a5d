"""Procession's own MCP server for a run (``bind SID mcp procession``), outside its bounds.

The server makes calls on the workspace, so it writes the workspace's file, which no step
may: it is Procession itself, holding the session to its scope (``procession mcp
--session SID``). So it does not run inside the run's confinement. The run reaches it
through a unix socket in its own temporary folder, by a relay (``mcp_relay``: standard input
and output to the socket, nothing else) that the agent CLI starts as its stdio server, or a
step as ``mcp_binding.server_command`` says (``RELAYS`` in its environment). Each connection
is served by a new server process, scoped as the binding says (its mode, its ``allow``), a
process of the run: it ends with it. The server an agent CLI asks a person through
(``asking``) is served by the engine itself, the same way reached.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import socket
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ..calls import Workspace
from ..model import mcp_binding
from . import mcp_relay

RELAY = str(Path(mcp_relay.__file__).resolve())
#: The most connections a run's asking server serves at once (its agent CLI needs one).
ASK_CONNECTIONS = 4


class OwnServers:
    """The sockets of a run's own MCP servers, and the servers serving them."""

    def __init__(self, db: str, sid: int, tmp: str, env: Mapping[str, str]) -> None:
        self.db, self.sid, self.tmp, self.env = db, sid, tmp, dict(env)
        self.accepting: list[asyncio.Task[None]] = []
        self.serving: set[asyncio.subprocess.Process] = set()
        self.talking: set[socket.socket] = set()  # connections served here (``asking``)

    async def open(self, resources: Iterable[Mapping[str, Any]]) -> dict[str, str]:
        """Listen for each ``mcp procession`` binding; the variables a step gets to reach them
        (``mcp_binding.RELAYS``: each binding's URI and the relay command for it)."""
        relays = {r["uri"]: self._listen(f"mcp-{n}", mcp_binding.server_command(self.db, self.sid, uri=r["uri"],
                                                                                 mode=r["mode"], direct=True))
                  for n, r in enumerate(r for r in resources if mcp_binding.is_procession(r["kind"], r["uri"]))}
        return {mcp_binding.RELAYS: json.dumps(relays)} if relays else {}

    def asking(self, ws: Workspace, keep: Callable[[], bool]) -> list[str]:
        """Listen for the run's agent CLI asking a person, served here (``asking``, answered by
        ``ws``; ``keep``: the engine is stopping, what is asked outlives it); the relay command
        its CLI starts as that MCP server."""
        listener, relay = self._listener("ask")
        self.accepting.append(asyncio.ensure_future(self._ask(listener, ws, keep)))
        return relay

    def _listen(self, name: str, argv: list[str]) -> list[str]:
        listener, relay = self._listener(name)
        self.accepting.append(asyncio.ensure_future(self._accept(listener, argv)))
        return relay

    def _listener(self, name: str) -> tuple[socket.socket, list[str]]:
        path = os.path.join(self.tmp, f"{name}.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        os.chmod(path, 0o600)
        listener.listen()
        listener.setblocking(False)
        return listener, [sys.executable, "-I", "-S", RELAY, path]

    async def _ask(self, listener: socket.socket, ws: Workspace, keep: Callable[[], bool]) -> None:
        """Serve each connection in the engine (its answers wait on the store, never block)."""
        # the MCP SDK, imported by the first run that asks: on a thread, not blocking the loop for a second
        asking = await asyncio.to_thread(importlib.import_module, f"{__package__}.asking")
        loop = asyncio.get_running_loop()
        with listener:
            while True:
                conn, _ = await loop.sock_accept(listener)
                if len(self.talking) >= ASK_CONNECTIONS:  # a CLI needs one: more is a run hoarding threads
                    conn.close()
                    continue
                conn.setblocking(True)  # read by a worker thread
                self.talking.add(conn)
                self.accepting.append(asyncio.ensure_future(self._talk(asking.serve(conn, ws, self.sid, keep), conn)))

    async def _talk(self, serving: Awaitable[None], conn: socket.socket) -> None:
        try:
            await serving
        finally:
            self.talking.discard(conn)
            conn.close()

    async def _accept(self, listener: socket.socket, argv: list[str]) -> None:
        """Serve each connection with a server whose standard input and output are the socket
        (never read here: what the client sends is the server's)."""
        loop = asyncio.get_running_loop()
        with listener:
            while True:
                conn, _ = await loop.sock_accept(listener)
                with conn:
                    conn.setblocking(True)
                    try:  # in the engine's own session: the reaper of steps' orphans leaves it alone
                        proc = await asyncio.create_subprocess_exec(*argv, stdin=conn.fileno(), stdout=conn.fileno(),
                                                                    env=self.env)
                    except OSError:
                        continue
                self.serving.add(proc)
                asyncio.ensure_future(self._served(proc))

    async def _served(self, proc: asyncio.subprocess.Process) -> None:
        await proc.wait()
        self.serving.discard(proc)

    async def close(self) -> None:
        """Stop listening, and end the servers still serving (the run is over)."""
        for conn in list(self.talking):  # a worker thread reading it sees its end
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for task in self.accepting:
            task.cancel()
        await asyncio.gather(*self.accepting, return_exceptions=True)
        for proc in list(self.serving):
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        for proc in list(self.serving):
            try:
                await asyncio.wait_for(proc.wait(), 2.0)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
