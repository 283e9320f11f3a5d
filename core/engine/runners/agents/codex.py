"""Codex CLI as a runner (``codex:[MODEL]``), headless: ``codex exec --json``, the prompt on
stdin (``-``).

Its events: ``thread.started`` (the thread id, first, before any request: announced at once),
``item.started`` / ``item.completed`` (``agent_message``, ``command_execution``,
``mcp_tool_call``, ``error``), ``turn.completed`` (usage: the thread's running total, so a
run's own is the difference from the total its reference kept), ``turn.failed``. The agent's
real context is in its rollout file (``token_count``: the last call's tokens and the model's
window), read when the turn ends. Resume is ``exec resume ID``; a fork's first run is
``exec fork PARENT`` (a new thread; the parent's rollout is not touched). Permissions:
``approval_policy="never"`` and ``sandbox_mode="workspace-write"`` (``danger-full-access`` in a
confined run: Codex's bubblewrap cannot mount inside it, and the kernel holds its tools to the
session's bounds instead); a session whose agent must ask runs the app server instead
(``codex_app``). ``PROCESSION_AGENT_ARGS``
adds or overrides ``-c`` settings (the last one given wins). The model provider is the
user's own Codex configuration (``$CODEX_HOME/config.toml``).
"""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path
from typing import Any, Final

from ....model.transcripts.codex import home, last_count, rollout
from .base import Invocation, Reader, Turn, text_of

#: The counts of Codex's usage totals the runner follows.
USAGE_KEYS: Final = ("input_tokens", "cached_input_tokens", "cache_write_input_tokens", "output_tokens")


def native(exe: str) -> str:
    """The native binary behind npm's Node wrapper: Node 20 stays the parent of the real
    ``codex`` and forwards only some signals, so the runner starts the binary itself."""
    real = os.path.realpath(exe)
    if real.endswith(".js"):
        modules = Path(real).parents[2]  # node_modules/@openai/codex/bin/codex.js
        found = sorted(glob.glob(str(modules / "codex-linux-*" / "vendor" / "*" / "bin" / "codex")))
        if found:
            return found[0]
    return exe


def _toml(value: Any) -> str:
    return json.dumps(value)  # a JSON string or list of strings is a TOML one too


def invocation(exe: str, turn: Turn) -> Invocation:
    if turn.decide is not None:  # its agent must ask: the app server, which asks its client
        return Invocation([native(exe), "app-server", *settings(turn)])
    argv = [native(exe), "exec"]
    ref = turn.ref
    if ref and ref.get("fork"):
        argv.append("fork")
    elif ref:
        argv.append("resume")
    argv += ["--json", "--skip-git-repo-check", "-c", 'approval_policy="never"', "-c", f'sandbox_mode="{sandbox(turn)}"']
    argv += settings(turn)
    if ref:
        argv.append(ref["id"])
    argv.append("-")
    return Invocation(argv)


def sandbox(turn: Turn) -> str:
    """Codex's own sandbox (bubblewrap) cannot start inside the kernel's confinement of the run
    (a confined process may not mount), which holds its tools to the session's bounds instead."""
    return "danger-full-access" if turn.confined else "workspace-write"


def settings(turn: Turn) -> list[str]:
    """The ``-c`` settings of a turn: its model, system prompt and bound MCP servers, then the
    session's own (``PROCESSION_AGENT_ARGS``: the last one given wins)."""
    argv: list[str] = []
    if turn.model:
        argv += ["-c", f"model={_toml(turn.model)}"]
    if turn.system:
        argv += ["-c", f"developer_instructions={_toml(turn.system)}"]
    for server in turn.mcp:
        key = f"mcp_servers.{server.name}"
        if server.command:
            argv += ["-c", f"{key}.command={_toml(server.command[0])}", "-c", f"{key}.args={_toml(list(server.command[1:]))}"]
        else:
            argv += ["-c", f"{key}.url={_toml(server.url)}"]
        argv += ["-c", f"{key}.required=true", "-c", f'{key}.default_tools_approval_mode="approve"']
    return argv + turn.extra_args


def state(env: dict[str, str]) -> tuple[list[str], list[str]]:
    """Where Codex keeps its threads, databases, login and ``config.toml``: ``$CODEX_HOME`` (a
    run's is its session's own folder, ``model.agent_homes``); nothing of the user's own is read."""
    return [str(home(env))], []


def endpoints(env: dict[str, str]) -> list[str]:
    """The model's address: the base URL of the provider ``config.toml`` chooses (every one it
    names, when it chooses none), else OpenAI's API."""
    import tomllib

    try:
        config = tomllib.loads((home(env) / "config.toml").read_text("utf-8"))
    except (OSError, ValueError):
        config = {}
    found_providers = config.get("model_providers")
    providers: dict[str, Any] = found_providers if isinstance(found_providers, dict) else {}
    chosen = config.get("model_provider")
    found = [p.get("base_url") for name, p in providers.items()
             if isinstance(p, dict) and (chosen is None or name == chosen)]
    urls = [u for u in found if isinstance(u, str)]
    return urls or [env.get("OPENAI_BASE_URL") or "https://api.openai.com"]


def thread_total(turn: Turn) -> dict[str, int]:
    """The running total of the thread a turn resumes or forks: the one its reference keeps,
    else (a thread adopted, loaded or migrated, which Procession did not run) its rollout's
    last count, so the first run counts only its own tokens."""
    ref = turn.ref or {}
    if not ref or "total" in ref:
        return dict(ref.get("total") or {})
    path = ref.get("transcript")
    info = last_count(path if isinstance(path, str) and os.path.isfile(path) else rollout(turn.env, str(ref.get("id"))))
    total = (info or {}).get("total_token_usage") or {}
    return {k: int(total.get(k) or 0) for k in USAGE_KEYS if k in total}


class CodexReader(Reader):
    cli = "codex"

    def __init__(self, turn: Turn) -> None:
        super().__init__(turn)
        self.thread: str | None = None
        # the thread's running total before this run (a fork's starts from its parent's)
        self.before = thread_total(turn)
        self.counted = False
        self.errors: list[str] = []

    def event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "thread.started" and isinstance(event.get("thread_id"), str):
            self.thread = event["thread_id"]
            self.announce(self.thread, transcript=rollout(self.turn.env, self.thread), total=self.before)
        elif kind in ("item.started", "item.completed"):
            self._item(event.get("item") or {}, done=kind == "item.completed")
        elif kind == "turn.completed":
            self._usage(event.get("usage") or {})
        elif kind == "turn.failed":
            self.pending.problems.append(f"Codex: {(event.get('error') or {}).get('message', 'the turn failed')}")
            self.pending.diagnostics += self.errors  # what it said on the way: the log's
            self.errors = []

    def _item(self, item: dict[str, Any], done: bool) -> None:
        kind, item_id = item.get("type"), str(item.get("id"))
        if kind == "agent_message" and done:
            self.said(str(item.get("text", "")))
        elif kind == "command_execution":
            if not done:
                self.started(item_id, "exec_command", {"command": item.get("command")})
            else:
                self.open_tools.setdefault(item_id, ("exec_command", {"command": item.get("command")}, {}))
                self.finished(item_id, str(item.get("aggregated_output") or ""), item.get("status") == "failed"
                              or (item.get("exit_code") not in (0, None)), exit_code=item.get("exit_code"))
        elif kind == "mcp_tool_call":
            self._mcp_call(item_id, item, done)
        elif kind == "error" and done:
            self.errors.append(f"Codex: {item.get('message')}")

    def _mcp_call(self, item_id: str, item: dict[str, Any], done: bool) -> None:
        """A call of a bound MCP server's tool (the same fields in ``exec``'s events and the app
        server's)."""
        name = f"mcp__{item.get('server')}__{item.get('tool')}"
        if not done:
            self.started(item_id, name, item.get("arguments"))
            return
        self.open_tools.setdefault(item_id, (name, item.get("arguments"), {}))
        error = item.get("error")
        result = item.get("result") or {}
        output = error.get("message") if isinstance(error, dict) else text_of(result.get("content"))
        self.finished(item_id, output, bool(error) or item.get("status") == "failed")

    def _usage(self, total: dict[str, Any]) -> None:
        """A run's usage from the thread's running totals, before and after."""
        now = {k: int(total.get(k) or 0) for k in USAGE_KEYS}
        spent = {k: max(v - self.before.get(k, 0), 0) for k, v in now.items()}
        # its input counts the whole prompt, cached parts included
        self.pending.tokens_in += max(spent["input_tokens"] - spent["cached_input_tokens"]
                                      - spent["cache_write_input_tokens"], 0)
        self.pending.cache_read += spent["cached_input_tokens"]
        self.pending.cache_write += spent["cache_write_input_tokens"]
        self.pending.tokens_out += spent["output_tokens"]
        self.before = now
        self.counted = True
        self._context()

    def _context(self) -> None:
        if self.thread is None:
            return
        path = rollout(self.turn.env, self.thread)
        info = last_count(path)
        self.announce(self.thread, transcript=path, total=self.before)
        if info:
            last = info.get("last_token_usage") or {}
            tokens = int(last.get("total_tokens") or 0)
            if tokens:
                self.context(tokens, info.get("model_context_window"))

    def closing(self) -> None:
        if not self.counted and self.thread is not None:  # stopped before turn.completed: the rollout's totals
            info = last_count(rollout(self.turn.env, self.thread))
            total = (info or {}).get("total_token_usage")
            if total:
                self._usage({"input_tokens": total.get("input_tokens"),
                             "cached_input_tokens": total.get("cached_input_tokens"),
                             "output_tokens": total.get("output_tokens")})
        if not self.counted:  # no end of the turn: its error items are all that says why
            self.pending.problems += self.errors
        else:  # the turn completed: its error items were warnings, the log's
            self.pending.diagnostics += self.errors
