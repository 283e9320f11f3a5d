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

Each socket has an owner: the run. Its path is no secret (it is on the relay's command line,
and a run with no world of its own sees other runs' command lines), so each socket has a key
of its own, in a file beside it that only the run's bounds reach (``mcp_relay.key_file``); the
relay sends it first, and a connection that does not is refused and logged, before anything
of it is served. A run's connections are capped (``CONNECTIONS`` per socket): each one served
is a server process.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import importlib
import json
import logging
import os
import secrets
import socket
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ..calls import Workspace
from ..model import mcp_binding
from . import mcp_relay

RELAY = str(Path(mcp_relay.__file__).resolve())
#: The most connections a socket of a run serves at once (an agent CLI needs one).
CONNECTIONS = 4
#: How long a connection has to present its key.
KEY_WAIT_S = 5.0
log = logging.getLogger("procession.engine")


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

    def _listener(self, name: str) -> tuple[_Listener, list[str]]:
        path = os.path.join(self.tmp, f"{name}.sock")
        key = secrets.token_hex(mcp_relay.KEY_BYTES // 2).encode()
        fd = os.open(mcp_relay.key_file(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with open(fd, "wb") as fh:
            fh.write(key)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        os.chmod(path, 0o600)
        listener.listen()
        listener.setblocking(False)
        return _Listener(listener, key, name, self.sid), [sys.executable, "-I", "-S", RELAY, path]

    async def _ask(self, listener: _Listener, ws: Workspace, keep: Callable[[], bool]) -> None:
        """Serve each connection in the engine (its answers wait on the store, never block)."""
        # the MCP SDK, imported by the first run that asks: on a thread, not blocking the loop for a second
        asking = await asyncio.to_thread(importlib.import_module, f"{__package__}.asking")
        with listener.sock:
            while True:
                conn = await listener.accept(len(self.talking))
                conn.setblocking(True)  # read by a worker thread
                self.talking.add(conn)
                self.accepting.append(asyncio.ensure_future(self._talk(asking.serve(conn, ws, self.sid, keep), conn)))

    async def _talk(self, serving: Awaitable[None], conn: socket.socket) -> None:
        try:
            await serving
        finally:
            self.talking.discard(conn)
            conn.close()

    async def _accept(self, listener: _Listener, argv: list[str]) -> None:
        """Serve each connection with a server whose standard input and output are the socket
        (never read here past its key: what the client sends is the server's)."""
        with listener.sock:
            while True:
                conn = await listener.accept(len(self.serving))
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


class _Listener:
    """A run's socket, its key, and what it is for (``name``, in what is logged)."""

    def __init__(self, sock: socket.socket, key: bytes, name: str, sid: int) -> None:
        self.sock, self.key, self.name, self.sid = sock, key, name, sid

    async def accept(self, serving: int) -> socket.socket:
        """The next connection that presents the key, while fewer than ``CONNECTIONS`` are
        served; any other is closed, and said in the engine's log."""
        loop = asyncio.get_running_loop()
        while True:
            conn, _ = await loop.sock_accept(self.sock)
            why = "the run has as many connections as it may" if serving >= CONNECTIONS else await self._unkeyed(conn)
            if not why:
                return conn
            log.warning("session %d: a connection to its %s socket was refused: %s", self.sid, self.name, why)
            conn.close()

    async def _unkeyed(self, conn: socket.socket) -> str:
        """Why ``conn`` is not the run's own ("" if it is): its first bytes must be the key,
        read exactly (what follows is the server's)."""
        loop = asyncio.get_running_loop()
        got = b""
        try:
            async with asyncio.timeout(KEY_WAIT_S):
                while len(got) < len(self.key):
                    chunk = await loop.sock_recv(conn, len(self.key) - len(got))
                    if not chunk:
                        break
                    got += chunk
        except (TimeoutError, OSError):
            pass
        return "" if hmac.compare_digest(got, self.key) else "it did not present the run's key"
