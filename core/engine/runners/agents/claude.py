"""Claude Code as a runner (``claude:[MODEL]``), headless: ``claude -p`` with the prompt on
stdin and ``--output-format stream-json --verbose``.

Its events: ``system/init`` (the session id, before any model request: announced at once),
``assistant`` (one per content block, with the call's input and cache usage: the context),
``user`` (tool results), ``result`` (usage summed over the run, the model's context window).
Resume is ``--resume ID``; a fork's first run is ``--resume PARENT --fork-session``, cut at
a message with ``--resume-session-at UUID`` (the uuid of the agent's record that message came
from), so the parent's transcript is never touched. Permissions: ``--allowedTools`` by the
session's permissions (``allowed``), anything else asked of Procession's own MCP server through
``--permission-prompt-tool`` (``engine.asking``; measured on 2.1.197: it calls the tool
with ``tool_name``, ``input`` and ``tool_use_id``, and takes ``{"behavior": "allow",
"updatedInput": ...}`` or ``{"behavior": "deny", "message": ...}`` as its text, the message
reaching the model as the tool's error); ``PROCESSION_AGENT_ARGS`` adds or overrides flags. A
confined run turns its own sandbox off (bubblewrap cannot mount inside the kernel's
confinement, and its Bash tool would fail there): the kernel holds its tools instead.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Final

from ....model import bounds
from ....model.agents import CLIS
from ....model.transcripts.claude import home, transcript
from .base import Invocation, Reader, Turn, text_of

#: What Claude Code may do unasked, by its session's permissions (``model.bounds``): ``ask`` reads
#: (inside its bounds: the kernel holds them), ``bound`` also writes (Claude Code itself keeps them
#: to its folder, and asks for any other), its bound MCP servers' tools, and what its confinement
#: holds (the shell, when the kernel confines the run; the web, when its network is any); ``all``
#: everything. Anything else it asks Procession (``--permission-prompt-tool``): the session's
#: permissions, rules and a person answer.
READS: Final = ("Read", "Glob", "Grep", "TodoWrite")
WRITES: Final = ("Edit", "Write", "NotebookEdit")
WEB: Final = ("WebFetch", "WebSearch")
#: The server and tool it asks through, as Claude Code names an MCP tool.
ASK_SERVER: Final = "procession_ask"
ASK_TOOL: Final = f"mcp__{ASK_SERVER}__ask"
#: How long Claude Code waits for an MCP tool (ms): a person answering may be away for days
#: (Node's longest timer; a longer one fires at once).
TOOL_WAIT_MS: Final = 2_147_483_647
#: Its default model's window, until the CLI says (``result``); a named one's, the CLI says.
DEFAULT_WINDOW: Final = CLIS["claude"].window("")


def invocation(exe: str, turn: Turn) -> Invocation:
    argv = [exe, "-p", "--output-format", "stream-json", "--verbose"]
    if turn.model:
        argv += ["--model", turn.model]
    argv += ["--allowedTools", " ".join(allowed(turn))]
    if turn.ask:
        argv += ["--permission-prompt-tool", ASK_TOOL]
    if turn.system:
        argv += ["--append-system-prompt", turn.system]
    if turn.confined:  # its own sandbox (bubblewrap) cannot mount inside the kernel's: the kernel holds its tools
        argv += ["--settings", json.dumps({"sandbox": {"enabled": False}})]
    if turn.ref:
        argv += ["--resume", turn.ref["id"]]
        if turn.ref.get("fork"):
            argv.append("--fork-session")
            if turn.ref.get("at"):
                argv += ["--resume-session-at", turn.ref["at"]]
    made = Invocation(argv, {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"})
    if turn.mcp or turn.ask:
        servers = {s.name: ({"type": "stdio", "command": s.command[0], "args": list(s.command[1:])} if s.command
                            else {"type": "http", "url": s.url}) for s in turn.mcp}
        if turn.ask:
            servers[ASK_SERVER] = {"type": "stdio", "command": turn.ask[0], "args": list(turn.ask[1:])}
            made.env["MCP_TOOL_TIMEOUT"] = str(TOOL_WAIT_MS)
        fd, path = tempfile.mkstemp(prefix="procession-mcp-", suffix=".json", dir=turn.tmp)
        with os.fdopen(fd, "w") as out:
            json.dump({"mcpServers": servers}, out)
        argv += ["--mcp-config", path, "--strict-mcp-config"]
        made.files.append(Path(path))
        # wait for the servers to connect: by default a slow one is left pending, its tools missing
        made.env.update(MCP_CONNECTION_NONBLOCKING="0", MCP_CONNECT_TIMEOUT_MS="30000")
    argv += turn.extra_args
    return made


def allowed(turn: Turn) -> list[str]:
    """The tools the turn's agent may use unasked (``READS``...)."""
    mcp = [f"mcp__{server.name}" for server in turn.mcp]
    if turn.permissions == bounds.ALL:
        return [*READS, *WRITES, "Bash", *WEB, *mcp]
    if turn.permissions == bounds.ASK:
        return list(READS)
    return [*READS, *WRITES, *mcp, *(["Bash"] if turn.confined else []), *(WEB if turn.net == bounds.ANY else ())]


def state(env: dict[str, str]) -> tuple[list[str], list[str]]:
    """Where Claude Code keeps its sessions, login and settings, its ``.claude.json`` too
    (``$CLAUDE_CONFIG_DIR``: a run's is its session's own folder, ``model.agent_homes``), written
    by a confined run; nothing of the user's own is read."""
    return [home(env)], []


def endpoints(env: dict[str, str]) -> list[str]:
    """The model's address: ``$ANTHROPIC_BASE_URL``, else Anthropic's API."""
    return [env.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com"]


class ClaudeReader(Reader):
    cli = "claude"
    reports_cost = True

    def __init__(self, turn: Turn) -> None:
        super().__init__(turn)
        self.calls: dict[str, tuple[int, int, int]] = {}  # message id -> (input, cache read, cache write)
        self.summed = False
        self.tokens = 0
        self.model = ""  # the model of the turn's own calls (not of the CLI's side calls: titles, summaries)

    def event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "system" and event.get("subtype") == "init" and isinstance(event.get("session_id"), str):
            sid = event["session_id"]
            self.announce(sid, transcript=transcript(self.turn.env, self.turn.cwd, sid))
        elif kind == "assistant":
            message = event.get("message") or {}
            self._usage(message)
            for block in message.get("content") or []:
                if block.get("type") == "text":
                    self.said(block.get("text", ""), agent_uuid=event.get("uuid"))
                elif block.get("type") == "tool_use":
                    self.started(str(block.get("id")), str(block.get("name")), block.get("input"))
        elif kind == "user":
            content = (event.get("message") or {}).get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    self.finished(str(block.get("tool_use_id")), text_of(block.get("content")),
                                  bool(block.get("is_error")), agent_uuid=event.get("uuid"))
        elif kind == "result":
            self._result(event)

    def _usage(self, message: dict[str, Any]) -> None:
        usage = message.get("usage") or {}
        call = (int(usage.get("input_tokens") or 0), int(usage.get("cache_read_input_tokens") or 0),
                int(usage.get("cache_creation_input_tokens") or 0))
        if isinstance(message.get("model"), str):
            self.model = message["model"]
        if message.get("id") and any(call):
            self.calls[str(message["id"])] = call
            self.tokens = sum(call)  # the whole prompt of this call: the agent's context now
            self.context(self.tokens, None if self.turn.model else DEFAULT_WINDOW)

    def _result(self, event: dict[str, Any]) -> None:
        usage = event.get("usage") or {}
        self.pending.tokens_in += int(usage.get("input_tokens") or 0)
        self.pending.tokens_out += int(usage.get("output_tokens") or 0)
        self.pending.cache_read += int(usage.get("cache_read_input_tokens") or 0)
        self.pending.cache_write += int(usage.get("cache_creation_input_tokens") or 0)
        cost = event.get("total_cost_usd")
        self.pending.cost += float(cost) if isinstance(cost, (int, float)) and cost > 0 else 0.0
        self.summed = True
        window = main_window(event.get("modelUsage"), self.model)
        if self.tokens:
            self.context(self.tokens, window)
        if event.get("is_error"):  # the reason is how it ended; what it says of it, the log's
            self.pending.problems.append(f"Claude Code: {event.get('result') or event.get('subtype') or 'an error'}")
            self.pending.diagnostics += [f"Claude Code: {e}" for e in event.get("errors") or [] if e]

    def closing(self) -> None:
        if not self.summed:  # no result (stopped): what the calls made so far read, as they reported it
            for tokens_in, read, write in self.calls.values():
                self.pending.tokens_in += tokens_in
                self.pending.cache_read += read
                self.pending.cache_write += write


def main_window(usage: Any, model: str) -> int | None:
    """The window of the model the turn ran on, from a result's ``modelUsage`` (which lists the
    CLI's side calls' models too, in no set order: the first one's window came and went)."""
    models = {name: m for name, m in (usage if isinstance(usage, dict) else {}).items() if isinstance(m, dict)}
    found = models.get(model) or (next(iter(models.values())) if len(models) == 1 else None)
    window = (found or {}).get("contextWindow")
    return window if isinstance(window, int) and window > 0 else None
