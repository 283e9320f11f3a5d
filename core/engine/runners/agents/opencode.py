"""opencode as a runner (``opencode:[PROVIDER/MODEL]``), headless: ``opencode run --format
json --auto``, the prompt on stdin, ``--dir`` the session's folder (a resumed session runs
in the folder it was made in, and prints nothing when started from another one).

Its events, each with the session id: ``step_start`` (the first: announced then), ``text``,
``tool_use`` (a finished call: input and output together), ``step_finish`` (the step's tokens;
``total`` is the agent's context now), ``error``. Resume is ``-s ID``, a fork's first run
``-s PARENT --fork`` (a copy with new ids; the parent's rows are not touched). The session's
system prompt and MCP servers are added to the run's configuration
(``OPENCODE_CONFIG_CONTENT``, merged with one the user set): ``instructions`` and ``mcp``.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Final

from ....model.transcripts.opencode import database, session_made, step_usage, tool_call
from .base import Invocation, Reader, Turn

CONFIG = "OPENCODE_CONFIG_CONTENT"
SERVER_PASSWORD = "OPENCODE_SERVER_PASSWORD"
#: What asks when the session's permissions are ask (opencode 1.18.33 asks for nothing by
#: default): all but reading. ``edit`` stands for its write and edit tools.
ASK: Final = {tool: "ask" for tool in ("bash", "edit", "webfetch", "websearch", "task", "external_directory",
                                       "skill", "doom_loop")}


def _config(env: dict[str, str]) -> dict[str, Any]:
    try:
        found = json.loads(env.get(CONFIG) or "{}")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def folder(turn: Turn) -> str:
    """Where the run's opencode session is: a resumed one, in the folder it was made in."""
    return str((turn.ref or {}).get("cwd") or turn.cwd)


def invocation(exe: str, turn: Turn) -> Invocation:
    if turn.decide is not None:  # its agent must ask: the server, whose API is asked (``opencode_serve``)
        return configured(Invocation([exe, "serve", "--port", "0", "--hostname", "127.0.0.1"],
                                     {SERVER_PASSWORD: turn.secret}), turn, permission=ASK)
    argv = [exe, "run", "--format", "json", "--auto"]
    if turn.model:
        argv += ["-m", turn.model]
    if turn.ref:
        argv += ["-s", turn.ref["id"]]
        if turn.ref.get("fork"):
            argv.append("--fork")
    argv += ["--dir", folder(turn), *turn.extra_args]
    return configured(Invocation(argv), turn)


def configured(made: Invocation, turn: Turn, permission: dict[str, str] | None = None) -> Invocation:
    """``made`` with the session's system prompt, MCP servers and (``permission``) what asks
    added to the run's configuration."""
    config = _config(turn.env)
    if turn.system:
        fd, path = tempfile.mkstemp(prefix="procession-system-", suffix=".md", dir=turn.tmp)
        with os.fdopen(fd, "w") as out:
            out.write(turn.system)
        made.files.append(Path(path))
        config["instructions"] = [*config.get("instructions", []), path]
    if turn.mcp:
        servers = config.setdefault("mcp", {})
        for server in turn.mcp:
            servers[server.name] = ({"type": "local", "command": list(server.command), "enabled": True}
                                    if server.command else {"type": "remote", "url": server.url, "enabled": True})
    if permission:
        config["permission"] = permission
    if turn.system or turn.mcp or permission:
        made.env[CONFIG] = json.dumps(config)
    return made


def state(env: dict[str, str]) -> tuple[list[str], list[str]]:
    """Where opencode keeps its sessions (a database), cache, state and configuration (it
    installs its plugins there): its XDG folders, for a run its session's own
    (``model.agent_homes``); and a configuration file the user named, read."""
    home = env.get("HOME") or os.path.expanduser("~")
    folders = [os.path.join(env.get(var) or os.path.join(home, *default), "opencode")
               for var, default in (("XDG_DATA_HOME", (".local", "share")), ("XDG_CACHE_HOME", (".cache",)),
                                    ("XDG_STATE_HOME", (".local", "state")), ("XDG_CONFIG_HOME", (".config",)))]
    return folders, [env["OPENCODE_CONFIG"]] if env.get("OPENCODE_CONFIG") else []


def endpoints(env: dict[str, str]) -> list[str]:
    """The model's address: the base URL of each provider its configuration names (given whole
    in ``OPENCODE_CONFIG_CONTENT``), else the providers' own APIs (https)."""
    providers = _config(env).get("provider")
    urls = [((p.get("options") or {}).get("baseURL")) for p in (providers or {}).values() if isinstance(p, dict)]
    return [u for u in urls if isinstance(u, str)] or ["https://"]


def window(env: dict[str, str], model: str) -> int | None:
    """The model's context limit, when the configuration names one (``limit.context``)."""
    config = _config(env)
    name = model or str(config.get("model") or "")
    provider, _, model_id = name.partition("/")
    limit = (((config.get("provider") or {}).get(provider) or {}).get("models") or {}).get(model_id, {}).get("limit")
    value = (limit or {}).get("context")
    return value if isinstance(value, int) and value > 0 else None


class OpencodeReader(Reader):
    cli = "opencode"
    reports_cost = True

    def __init__(self, turn: Turn) -> None:
        super().__init__(turn)
        self.session: str | None = None
        self.window = window(turn.env, turn.model)
        self.since_ms = int(time.time() * 1000)
        self.data = database(turn.env)

    def _announce(self, session: str) -> None:
        self.session = session
        self.announce(session, cwd=folder(self.turn), transcript=self.data)

    def event(self, event: dict[str, Any]) -> None:
        session = event.get("sessionID")
        if isinstance(session, str) and session != self.session:
            self._announce(session)
        part = event.get("part") or {}
        kind = event.get("type")
        if kind == "text" and not part.get("synthetic"):
            self.said(str(part.get("text", "")))
        elif kind == "tool_use":
            call_id, name, value, output, failed, meta = tool_call(part)
            self.started(call_id, name, value)
            self.finished(call_id, output, failed, **meta)
        elif kind == "step_finish":
            tokens_in, tokens_out, cache_read, cache_write, total = step_usage(part.get("tokens") or {})
            self.pending.tokens_in += tokens_in
            self.pending.tokens_out += tokens_out
            self.pending.cache_read += cache_read
            self.pending.cache_write += cache_write
            cost = part.get("cost")
            self.pending.cost += float(cost) if isinstance(cost, (int, float)) and cost > 0 else 0.0
            if total:
                self.context(total, self.window)
        elif kind == "error":
            error = event.get("error") or {}
            message = (error.get("data") or {}).get("message") or error.get("name") or "an error"
            self.pending.problems.append(f"opencode: {message}")

    def closing(self) -> None:
        """opencode names its session only with its first finished part: a run stopped before
        that (while the model had not answered yet) has made one all the same, which its
        database holds. The session made in this folder since the run started is it (the
        engine runs one step of a Procession session at a time; another opencode started in
        the same folder meanwhile could be taken for it)."""
        if self.session is not None or not os.path.exists(self.data):
            return
        found = session_made(self.data, folder(self.turn), self.since_ms, (self.turn.ref or {}).get("id", ""))
        if found:
            self._announce(found)
