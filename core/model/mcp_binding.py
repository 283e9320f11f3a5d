"""Procession's own MCP server as a session's resource: ``bind SID mcp procession``.

A session bound to ``mcp procession`` — or ``procession?allow=fork,send,wait`` to narrow the
calls — is to be handed, by a runner that gives MCP servers to an agent CLI, a Procession MCP
server scoped to that session: the command line ``server_command`` makes. A binding in mode
``ro`` gives it read-only. This module only says what that server is; the runners start it
(inside a run, through a relay: ``procession.engine.own_mcp``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

from .errors import InvalidArgument

KIND: Final = "mcp"
NAME: Final = "procession"
#: In a run's environment: each ``mcp procession`` binding's URI and the command that reaches
#: its server from inside the run (JSON), set by the engine.
RELAYS: Final = "PROCESSION_MCP_RELAYS"


def is_procession(kind: str, uri: str) -> bool:
    """Whether a binding names Procession's own server (and not another MCP server)."""
    return kind == KIND and urlsplit(uri).path == NAME and not urlsplit(uri).scheme


def allowed(uri: str) -> tuple[str, ...]:
    """The calls ``procession?allow=a,b`` narrows the server to (empty: every call)."""
    query = parse_qs(urlsplit(uri).query, keep_blank_values=True)
    unknown = set(query) - {"allow"}
    if unknown:
        raise InvalidArgument(f"{uri}: unknown setting {', '.join(sorted(unknown))} (only allow=CALLS)")
    return tuple(c.strip() for v in query.get("allow", []) for c in v.split(",") if c.strip())


def server_command(db: Path | str, sid: int, *, uri: str = NAME, mode: str = "rw", python: str = sys.executable,
                   env: Mapping[str, str] | None = None, direct: bool = False) -> list[str]:
    """The command line of the server for session ``sid``'s binding ``uri`` in ``mode``.

    Inside a run (``env``, default this process's, holds ``RELAYS``), the server itself runs
    outside the run's bounds (it writes the workspace): the command is the relay the engine
    offers for that binding. ``direct``: the server itself, as the engine starts it."""
    relays = (os.environ if env is None else env).get(RELAYS)
    if relays and not direct:
        found = json.loads(relays).get(uri)
        if isinstance(found, list) and all(isinstance(w, str) for w in found):
            return list(found)
    allow = allowed(uri)
    return [python, "-m", "procession", "mcp", "--db", str(db), "--session", str(sid),
            *(["--readonly"] if mode == "ro" else []), *(["--allow", ",".join(allow)] if allow else [])]


def client_config(db: Path | str, sid: int, *, uri: str = NAME, mode: str = "rw",
                  python: str = sys.executable) -> dict[str, Any]:
    """The server as MCP clients configure a stdio server: ``{"command", "args"}`` (Claude
    Code's ``mcpServers`` entries, Codex's ``mcp_servers`` tables, opencode's ``mcp``)."""
    command = server_command(db, sid, uri=uri, mode=mode, python=python)
    return {"command": command[0], "args": command[1:]}
