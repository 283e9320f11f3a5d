"""Any agent that speaks the Agent Client Protocol (``acp:NAME``, ``acp:command:PROG ARGS``):
JSON-RPC 2.0 over its stdio, one message per line, Procession the client.

A run is one process of the agent and one turn: ``initialize`` (Procession offers to read and
write text files for it, ``fs``), then ``session/new`` in the session's folder with its MCP
servers, or for a session that has one already ``session/resume`` (where the agent offers it;
nothing is told again) or ``session/load`` (the agent tells the whole conversation again as
updates: they are not this run's, and are left out until its answer), or for a fork's first
run ``session/fork`` (where the agent offers it: a copy of the whole session). An agent that
takes none up again (Gemini CLI 0.61's load finds no session it made over ACP; a way it offers
that fails) is given a new session and the whole conversation so far (``Turn.whole``). Then the model,
when the runner names one (the session's ``model`` option, or the older ``session/set_model``),
and ``session/prompt`` with what the agent has not seen. Its ``session/update`` notifications
are the run's events: the agent's text, tool calls and their results, its context
(``usage_update``); the prompt's answer ends the turn (``stopReason``) and carries its tokens
where the agent reports them (``usage``; Gemini CLI's in its ``_meta``). The reader then hangs
up and the agent, which may outlive its stdin (codex-acp does), is ended with its whole tree.

What the agent asks of Procession, each checked against the protocol's own schema first:

- ``session/request_permission``: under ``--permissions ask`` a person answers from the queue
  (state W; the tool as the agent names it, best effort, since ACP has no field for it, and its
  input, or that the agent gave none); otherwise the run's bounds hold it and it is allowed. The
  answer is the option of the kind meant (``allow_once``, ``reject_once``: their ids differ per
  agent). ACP carries no reason with a refusal: the reason goes to the model as the next user
  message of the same session, once the turn ends, and the history keeps it.
- ``fs/read_text_file`` / ``fs/write_text_file``: served beneath the session's bounds only
  (its folder, its bound folders and files; written only where it may write), each path
  resolved once from a descriptor of the bound folder, no link followed out of it
  (``model.beneath``): a write out of bounds is refused by Procession itself, before the kernel.
- Anything else (``terminal/*``, which is not offered) is answered "method not found".

Interrupt is ``session/cancel`` (``Conversation.interrupt``): the agent ends its turn and
answers the prompt ``cancelled``, keeping its own session whole.
"""

from __future__ import annotations

import asyncio
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from ....model import agents, beneath, transcripts
from ....model.errors import ProcessionError
from ....model.toolcalls import summary, text_of
from .base import Conversation, Invocation, Reader, Turn

#: The protocol version Procession speaks (``acp.meta.PROTOCOL_VERSION``).
VERSION: Final = 1
#: The ids of Procession's own requests, in the order they go.
INITIALIZE, OPEN, MODEL, PROMPT = 1, 2, 3, 4
#: How long an agent is given to end by itself once its input is closed (Gemini CLI writes its
#: session then); codex-acp never does.
LINGER_S: Final = 5.0
LINGER: Final = {"codex": 0.0}
#: The agents whose session reaches its file only after the turn's answer (Claude Code under
#: claude-agent-acp writes it a moment later), and how long to wait for it before hanging up:
#: hung up at the answer, its next run found no session to take up (1 run in 4-5, measured)
SAVED_AFTER: Final = {"claude": 5.0}
#: How often that file is looked for
SAVED_POLL_S: Final = 0.05
#: The most of a file an agent is given in one read.
READ_MAX: Final = 8 << 20
#: JSON-RPC's and ACP's error codes Procession answers with.
NOT_FOUND, INVALID, NO_METHOD, REFUSED = -32002, -32602, -32601, -32000
#: The option kinds that allow and that refuse, in the order taken.
ALLOW: Final = ("allow_once", "allow_always")
#: The keys of a tool call's input that name a path (the agents' own file tools).
PATH_KEYS: Final = frozenset({"path", "filePath", "file_path", "absolute_path", "filepath"})
#: The tool kinds that only read.
READS: Final = frozenset({"read", "search", "fetch", "think"})
REJECT: Final = ("reject_once", "reject_always")


def invocation(turn: Turn, argv: list[str], cli: str) -> Invocation:
    """The agent's command line (``agents.acp_program``), with what its CLI needs besides."""
    made = Invocation([native(cli, argv[0]), *argv[1:], *_ARGS.get(cli, _none)(turn), *turn.extra_args])
    if cli == "claude" and turn.confined:  # Claude Code, as root, runs only where it is told it is held
        made.env["IS_SANDBOX"] = "1"
    if cli == "opencode":  # what asks is its configuration's (it asks for nothing by default), and its system prompt
        from .opencode import ASK, configured

        made = configured(made, turn, permission=ASK if turn.decide is not None else None)
    return made


def prompt(turn: Turn, cli: str) -> str:
    """What the turn's prompt is over ACP, which has no system prompt: an agent that takes one
    otherwise (opencode's configuration) has it there; any other is given it before its
    session's first prompt."""
    if turn.system and not turn.ref and cli != "opencode":
        return f"{turn.system}\n\n{turn.prompt}"
    return turn.prompt


def native(cli: str, exe: str) -> str:
    """The native binary behind npm's Node launcher of codex-acp or Copilot CLI (a
    ``spawnSync`` that does not pass on its end: codex-acp's binary, left alone, outlives its
    stdin): the runner starts the binary itself, where npm installed it for this machine."""
    real = Path(os.path.realpath(exe))
    machine = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine().lower())
    system = platform.system().lower()
    if real.suffix != ".js" or machine is None:
        return exe
    if cli == "codex":  # node_modules/@zed-industries/codex-acp/bin/codex-acp.js
        found = [real.parents[2] / f"codex-acp-{system}-{machine}" / "bin" / "codex-acp"]
    elif cli == "copilot":  # node_modules/@github/copilot/npm-loader.js
        found = [real.parents[1] / f"copilot-{flavour}-{machine}" / "copilot" for flavour in (system, f"{system}musl")]
    else:
        return exe
    return next((str(path) for path in found if path.is_file() and os.access(path, os.X_OK)), exe)


def _none(turn: Turn) -> list[str]:
    return []


def _codex(turn: Turn) -> list[str]:
    """Codex asks through ACP under its ``untrusted`` policy only; its own sandbox cannot nest in
    the kernel's confinement (as for ``codex exec``)."""
    from .codex import sandbox

    policy = "untrusted" if turn.decide is not None else "never"
    return ["-c", f'approval_policy="{policy}"', "-c", f'sandbox_mode="{sandbox(turn)}"']


_ARGS: Final[dict[str, Callable[[Turn], list[str]]]] = {"codex": _codex}


def tool_name(update: dict[str, Any]) -> str:
    """The tool a call is of, as far as the agent says (ACP has no field for it): Claude Code's
    and Qwen Code's in its ``_meta``, Gemini CLI's before ``__`` in the call's id, else its title when that is
    a word (opencode's), else its kind."""
    meta = update.get("_meta")
    named = (((meta.get("claudeCode") or {}).get("toolName") or meta.get("toolName"))  # Claude Code's, Qwen Code's
             if isinstance(meta, dict) else None)
    if isinstance(named, str) and named:
        return named
    head, sep, _ = str(update.get("toolCallId") or "").partition("__")
    if sep and head.replace("_", "").isalnum():
        return head
    title = str(update.get("title") or "")
    if title and title.replace("_", "").isalnum() and len(title) <= 40:
        return title
    return str(update.get("kind") or "tool")


def _output(update: dict[str, Any]) -> str:
    """A finished call's output: the text of its content, else its raw output."""
    texts = []
    for item in update.get("content") or []:
        if isinstance(item, dict) and item.get("type") == "content":
            texts.append(text_of([item.get("content")]))
        elif isinstance(item, dict) and item.get("type") == "diff":
            texts.append(f"{item.get('path')}: changed")
    if any(texts):
        return "\n".join(texts)
    raw = update.get("rawOutput")
    if isinstance(raw, dict):
        for key in ("formatted_output", "output", "stdout"):
            if isinstance(raw.get(key), str):
                return str(raw[key])
    return text_of(raw) if raw is not None else ""


class AcpReader(Reader):
    """An ACP agent's messages as the run's events, and what Procession answers it."""

    cli = "acp"

    def __init__(self, turn: Turn, cli: str) -> None:
        super().__init__(turn)
        self.cli = cli  # the reference names the CLI whose sessions these are
        self.bounds = Bounds(*turn.served)
        self.talk = talk = Conversation()
        talk.terminate = True  # an agent may outlive its stdin: ended when the turn is over
        talk.linger = LINGER.get(cli, LINGER_S)  # after its stdin closed: it may save its session first
        talk.interrupt = self.cancel
        self.session = ""
        self.agent: dict[str, Any] = {}  # its agentInfo and capabilities, from initialize
        self.loading = False  # session/load is telling the conversation again: not this run's
        self.replayed = 0  # how many updates it told again
        self.taking_up = False  # it resumes or loads a session it had
        self.whole = False  # a new session in place of one it could not take up: given the whole conversation
        self.forking = False  # it forks a session, and has said nothing of the fork's yet
        self.ways: list[str] = []  # the ways left to take the session up again
        self.refusals: set[str] = set()  # the calls refused (stored so, whatever the agent says of them after)
        self.counted: dict[str, int] = {}  # an agent's usage so far in this process, where it reports a running total
        self.text: list[str] = []  # the agent's message so far (chunks)
        self.calls: dict[str, dict[str, Any]] = {}  # tool call id -> what the updates said of it
        self.refused: list[str] = []  # reasons a person gave, for the model once the turn ends
        self.told = False  # the reasons were sent: the next answer ends the run
        self.cancelled = False
        self._request(INITIALIZE, "initialize", {
            "protocolVersion": VERSION, "clientInfo": {"name": "procession", "title": "Procession", "version": "1"},
            "clientCapabilities": {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": False}})

    # ------------------------------------------------------------------ the wire

    def _request(self, rid: int, method: str, params: dict[str, Any]) -> None:
        assert self.talk is not None
        self.talk.write({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})

    def _reply(self, rid: Any, result: dict[str, Any] | None = None, *, error: tuple[int, str] | None = None) -> None:
        assert self.talk is not None
        answer: dict[str, Any] = {"jsonrpc": "2.0", "id": rid}
        if error is not None:
            answer["error"] = {"code": error[0], "message": error[1]}
        else:
            answer["result"] = result or {}
        self.talk.write(answer)

    def event(self, event: dict[str, Any]) -> None:
        method = event.get("method")
        found = event.get("params")
        params: dict[str, Any] = found if isinstance(found, dict) else {}
        if not isinstance(method, str):
            self._answered(event)
        elif "id" in event:
            self._asked(event["id"], method, params)
        elif method == "session/update" and self.loading:
            self.replayed += 1
        elif method == "session/update":
            update = params.get("update")
            if isinstance(update, dict):
                self._update(update)

    def _stop(self, why: str) -> None:
        self.pending.problems.append(why)
        assert self.talk is not None
        self.talk.failed = True
        self.hang_up()

    def hang_up(self) -> None:
        self._flush()
        assert self.talk is not None
        self.talk.hang_up()

    def cancel(self) -> bool:
        """Interrupt: the turn is cancelled by the protocol (False: no turn to cancel yet)."""
        if not self.session or self.talk is None:
            return False
        self.cancelled = True
        self.talk.write({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": self.session}})
        return True

    # ------------------------------------------------------------------ Procession's requests answered

    def _answered(self, reply: dict[str, Any]) -> None:
        rid = reply.get("id")
        error = reply.get("error")
        found = reply.get("result")
        result: dict[str, Any] = found if isinstance(found, dict) else {}
        if error is not None:
            message = error.get("message") if isinstance(error, dict) else error
            detail = (error.get("data") or {}) if isinstance(error, dict) else {}
            more = detail.get("details") if isinstance(detail, dict) else None
            said = f"{self._title()}: {message}" + (f" ({more})" if more else "")
            if rid == OPEN and self.taking_up:  # one offered does not work (Qwen Code's session/resume): the next
                self.pending.diagnostics.append(said)
                self._take_up(said)
                return
            if self.forking and rid in (OPEN, MODEL, PROMPT) and self.turn.whole and not self.pending.messages\
                    and not self.text:
                # the session it forks is not in the fork's folder (its files were never written, say): the
                # fork's own conversation is given to a new session instead, as when one cannot be taken up
                self.forking = False
                self._anew(f"{said}: it could not fork its session; a new session of it is given the conversation")
                return
            self._stop(said)
            return
        if rid == INITIALIZE:
            self._initialized(result)
        elif rid == OPEN and self.loading and not self.replayed and self.turn.whole:
            # Qwen Code "loads" a session it does not hold as a new, empty one: the conversation would be lost
            self._anew(f"{self._title()} told none of session {self.session} again when it loaded it (it does"
                       " not hold it): a new session of it is given the conversation so far")
        elif rid == OPEN:
            self.loading = False
            self._opened(result)
        elif rid == MODEL:
            self._prompt(self.turn.whole if self.whole else prompt(self.turn, self.cli))
        elif rid == PROMPT:
            self._ended(result)

    def _title(self) -> str:
        info = self.agent.get("agentInfo") or {}
        return str(info.get("title") or info.get("name") or agents.title(self.cli))

    def _initialized(self, result: dict[str, Any]) -> None:
        self.agent = result
        if result.get("protocolVersion") != VERSION:
            self._stop(f"{self._title()} speaks ACP version {result.get('protocolVersion')}; Procession speaks {VERSION}")
            return
        can = result.get("agentCapabilities") or {}
        sessions = can.get("sessionCapabilities") or {}
        ref = self.turn.ref or {}
        opened: dict[str, Any] = {"cwd": self.turn.cwd, "mcpServers": [_server(s) for s in self.turn.mcp]}
        self.taking_up = bool(ref) and not ref.get("fork")
        if not ref:
            self._request(OPEN, "session/new", opened)
        elif self.cli in agents.CLIS and not agents.CLIS[self.cli].acp_load and self.turn.whole:  # its own, or a fork
            self._anew(f"{self._title()} cannot take a session up again over ACP: a new session of it is given"
                       " the conversation so far")
        elif ref.get("fork"):
            if "fork" not in sessions and self.turn.whole:  # a snapshot's session whose agent's own was not carried
                self._anew(f"{self._title()} cannot fork a session over ACP: a new session of it is given the"
                           " conversation so far")
            elif "fork" not in sessions:
                self._stop(f"{self._title()} cannot fork a session over ACP: fork it before its first run, or migrate"
                           " the fork to a runner that can")
                return
            self.forking = True
            self._request(OPEN, "session/fork", {**opened, "sessionId": ref["id"]})
        else:
            self.ways = [m for m, offered in (("session/resume", "resume" in sessions),
                                              ("session/load", bool(can.get("loadSession")))) if offered]
            self._take_up(f"{self._title()} offers neither session/resume nor session/load")

    def _take_up(self, why: str) -> None:
        """The next way the agent offers to take its session up again (resume: nothing told
        again; load: all of it told again, not this run's); none left: a new session given the
        whole conversation, else the run cannot go on (``why``)."""
        if not self.ways:
            if self.turn.whole:
                self._anew(f"{why}: a new session of it is given the conversation so far")
            else:
                self._stop(why)
            return
        method = self.ways.pop(0)
        ref = self.turn.ref or {}
        self.session, self.loading = str(ref["id"]), method == "session/load"
        self._request(OPEN, method, {"cwd": self.turn.cwd, "mcpServers": [_server(s) for s in self.turn.mcp],
                                     "sessionId": ref["id"]})

    def _anew(self, why: str) -> None:
        """A new session of the agent, given the whole conversation (``Turn.whole``) instead of
        the one it cannot take up again."""
        self.pending.diagnostics.append(why)
        self.session, self.loading, self.taking_up = "", False, False
        self.whole = True
        self._request(OPEN, "session/new", {"cwd": self.turn.cwd, "mcpServers": [_server(s) for s in self.turn.mcp]})

    def _opened(self, result: dict[str, Any]) -> None:
        if isinstance(result.get("sessionId"), str):
            self.session = result["sessionId"]
        info = self.agent.get("agentInfo") or {}
        self.announce(self.session, acp={"agent": info.get("name"), "version": info.get("version"),
                                         "protocol": self.agent.get("protocolVersion")})
        model = self.turn.model
        options = [o for o in result.get("configOptions") or [] if isinstance(o, dict)]
        if model and any(o.get("id") == "model" for o in options):
            self._request(MODEL, "session/set_config_option",
                          {"sessionId": self.session, "configId": "model", "value": model})
        elif model and result.get("models"):
            self._request(MODEL, "session/set_model", {"sessionId": self.session, "modelId": model})
        elif model:
            self._stop(f"{self._title()} offers no choice of model over ACP: run it without one (acp:{self.cli})")
        else:
            self._prompt(self.turn.whole if self.whole else prompt(self.turn, self.cli))

    def _prompt(self, text: str) -> None:
        self._request(PROMPT, "session/prompt", {"sessionId": self.session, "prompt": [{"type": "text", "text": text}]})

    def _ended(self, result: dict[str, Any]) -> None:
        """The turn's answer: its tokens where the agent says them; the reasons of refusals go
        to the model as the next message of the session (not after an interrupt); else done."""
        answer = "".join(self.text).strip()  # the last of what it said
        self._flush()
        self._usage(result)
        reason = result.get("stopReason")
        if reason in ("refusal", "max_tokens", "max_turn_requests"):
            self.pending.problems.append(f"{self._title()} stopped its turn: {reason}")
        if self.refused and not self.told and not self.cancelled:
            self.told = True
            text = "\n".join(self.refused)
            self.pending.messages.append(("user", text, {"refusal": True}))
            self._prompt(text)
            return
        if self.cli in SAVED_AFTER and self.session and not self.cancelled:
            assert self.talk is not None
            self.talk.start(self._hang_up_when_saved(answer, SAVED_AFTER[self.cli]))
            return
        self.hang_up()

    async def _hang_up_when_saved(self, answer: str, within: float) -> None:
        """Hang up once the session's own file holds the turn's ``answer``, or after ``within``
        seconds (then its next run is given the conversation, as for a session it cannot find)."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline and not await asyncio.to_thread(self._saved, answer):
            await asyncio.sleep(SAVED_POLL_S)
        self.hang_up()

    def _saved(self, answer: str) -> bool:
        """Whether the agent's own file of the session ends with ``answer`` (with an answer,
        when it said nothing last)."""
        kind = transcripts.format_of(self.cli)
        try:
            said = kind.read(kind.find(self.turn.env, self.session)).messages
        except (ProcessionError, OSError, ValueError):
            return False
        return bool(said) and said[-1].role == "assistant" and answer in said[-1].content

    def _usage(self, result: dict[str, Any]) -> None:
        usage = result.get("usage")
        if not isinstance(usage, dict):  # Gemini CLI's, in its _meta
            meta = result.get("_meta")
            count = ((meta or {}).get("quota") or {}).get("token_count") if isinstance(meta, dict) else None
            usage = {"inputTokens": count.get("input_tokens"), "outputTokens": count.get("output_tokens")} \
                if isinstance(count, dict) else {}
        counts = {k: _int(usage.get(k)) for k in ("inputTokens", "outputTokens", "cachedReadTokens", "cachedWriteTokens")}
        if self.cli in agents.CLIS and agents.CLIS[self.cli].acp_usage_total:  # the process's total so far: this turn's is the rest
            counts, self.counted = {k: max(v - self.counted.get(k, 0), 0) for k, v in counts.items()}, counts
        cached_read, cached_write = counts["cachedReadTokens"], counts["cachedWriteTokens"]
        self.pending.tokens_in += max(counts["inputTokens"] - cached_read - cached_write, 0)
        self.pending.tokens_out += counts["outputTokens"]
        self.pending.cache_read += cached_read
        self.pending.cache_write += cached_write

    # ------------------------------------------------------------------ what the agent said

    def _update(self, update: dict[str, Any]) -> None:
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":
            content = update.get("content")
            if isinstance(content, dict) and content.get("type") == "text":
                self.text.append(str(content.get("text") or ""))
            return
        if kind == "agent_thought_chunk":
            return
        self._flush()
        if kind in ("tool_call", "tool_call_update"):
            self._call(update, started=kind == "tool_call")
        elif kind == "usage_update":
            used, size = update.get("used"), update.get("size")
            if isinstance(used, int) and used > 0:
                self.context(used, size if isinstance(size, int) and size > 0 else None)

    def _flush(self) -> None:
        if self.text:
            self.said("".join(self.text))
            self.text = []

    def _call(self, update: dict[str, Any], started: bool) -> None:
        cid = str(update.get("toolCallId") or "")
        if cid in self.refusals:  # stored as refused already: what the agent says of it after is its own view
            return
        known = self.calls.setdefault(cid, {})
        known.update({k: v for k, v in update.items() if v not in (None, [], {}) or k not in known})
        if cid not in self.open_tools and known.get("status") not in ("completed", "failed"):
            self.started(cid, tool_name(known), _input(known))
        elif cid in self.open_tools:
            name, _, meta = self.open_tools[cid]
            self.open_tools[cid] = (tool_name(known) if name in ("tool", known.get("kind")) else name, _input(known), meta)
        if known.get("status") in ("completed", "failed"):
            if cid not in self.open_tools:
                self.open_tools[cid] = (tool_name(known), _input(known), {})
            self.finished(cid, _output(known), known.get("status") == "failed")

    # ------------------------------------------------------------------ the agent's requests

    def _asked(self, rid: Any, method: str, params: dict[str, Any]) -> None:
        from acp import schema
        from pydantic import ValidationError

        try:
            if method == "session/request_permission":
                asked = schema.RequestPermissionRequest.model_validate(params)
                assert self.talk is not None
                self.talk.start(self._permission(rid, asked))
            elif method == "fs/read_text_file":
                self._read(rid, schema.ReadTextFileRequest.model_validate(params))
            elif method == "fs/write_text_file":
                self._write(rid, schema.WriteTextFileRequest.model_validate(params))
            else:
                self._reply(rid, error=(NO_METHOD, f"Procession does not answer {method}"))
        except ValidationError as exc:
            self._reply(rid, error=(INVALID, f"{method}: {exc.errors()[0].get('msg', 'invalid')}"))

    async def _permission(self, rid: Any, asked: Any) -> None:
        call = asked.tool_call.model_dump(by_alias=True, exclude_none=True)
        cid = str(call.get("toolCallId"))
        known = self.calls[cid] = {**self.calls.get(cid, {}), **{k: v for k, v in call.items() if v}}
        tool, given = tool_name(known), _input(known)
        if cid not in self.open_tools:  # an agent may ask before it says it calls (Qwen Code)
            self.started(cid, tool, given)
        kinds = {o.kind: o.option_id for o in asked.options}
        if self.turn.decide is not None:
            ok, why = await self.turn.decide(tool, given)
        else:  # unasked: what the session's bounds hold (all: anything)
            why = self.bounds.leaves(known) if self.turn.permissions == "bound" else ""
            ok = not why
        chosen = next((kinds[k] for k in (ALLOW if ok else REJECT) if k in kinds), None)
        if chosen is None:  # no option of that kind: the request is cancelled, which refuses it
            self._reply(rid, {"outcome": {"outcome": "cancelled"}})
        else:
            self._reply(rid, {"outcome": {"outcome": "selected", "optionId": chosen}})
        if not ok:
            self.refused.append(f"Procession: your {tool} call ({summary(given)}) was refused: {why}")
            self.refusals.add(cid)
            self.finished(cid, f"refused: {why}", True)

    def _read(self, rid: Any, asked: Any) -> None:
        try:
            with self.bounds.folder(asked.path, write=False) as folder:
                data = folder.read(asked.path, READ_MAX + 1)
        except FileNotFoundError:
            if self.cli == "gemini":  # it reads a file it is about to make, and fails on the standard answer
                self._reply(rid, {"content": ""})
            else:
                self._reply(rid, error=(NOT_FOUND, f"Resource not found: {asked.path}"))
            return
        except (ProcessionError, OSError) as exc:
            self._reply(rid, error=(REFUSED, str(exc)))
            return
        if len(data) > READ_MAX:
            self._reply(rid, error=(REFUSED, f"{asked.path} is over {READ_MAX >> 20} MiB"))
            return
        text = data.decode("utf-8", "replace")
        if asked.line is not None or asked.limit is not None:
            lines = text.splitlines(keepends=True)
            start = max((asked.line or 1) - 1, 0)
            text = "".join(lines[start:start + asked.limit] if asked.limit is not None else lines[start:])
        self._reply(rid, {"content": text})

    def _write(self, rid: Any, asked: Any) -> None:
        try:
            with self.bounds.folder(asked.path, write=True) as folder:
                _write(folder, asked.path, asked.content.encode("utf-8"))
        except (ProcessionError, OSError) as exc:
            self._reply(rid, error=(REFUSED, str(exc)))
            self.pending.diagnostics.append(f"a file write refused: {exc}")
            return
        self._reply(rid, {})

    def closing(self) -> None:
        self._flush()


class Bounds:
    """The folders and files the session may read and write (its folder, its bindings), each
    path the agent names resolved beneath the one it is in (``beneath.Folder``)."""

    def __init__(self, writes: list[str], reads: list[str]) -> None:
        self.writes = [os.path.realpath(p) for p in writes]
        self.reads = [os.path.realpath(p) for p in reads] + self.writes

    def holds(self, path: str, *, write: bool) -> bool:
        """Whether ``path`` (links resolved as they are now) is beneath what the session may
        write (or read)."""
        real = os.path.realpath(path)
        return any(real == root or real.startswith(root.rstrip("/") + "/")
                   for root in (self.writes if write else self.reads))

    def leaves(self, call: dict[str, Any]) -> str:
        """Why a tool call the agent asks to make leaves the session's bounds (the paths it
        names: its locations, its input's path), or "" if it does not: under ``bound``, a call
        that would is refused by Procession, before the kernel (which holds a confined run
        anyway)."""
        found = call.get("rawInput")
        raw: dict[str, Any] = found if isinstance(found, dict) else {}
        paths = [str(loc.get("path")) for loc in call.get("locations") or [] if isinstance(loc, dict) and loc.get("path")]
        paths += [str(v) for k, v in raw.items() if k in PATH_KEYS and isinstance(v, str)]
        write = call.get("kind") not in READS
        for path in paths:
            if os.path.isabs(path) and not self.holds(path, write=write):
                return f"{path}: outside what the session may {'write' if write else 'read'}; refused"
        return ""

    def folder(self, path: str, *, write: bool) -> beneath.Folder:
        """The bound folder ``path`` is beneath, opened (a bound file: its folder, for that file
        only); refused in one line when it is beneath none."""
        if not os.path.isabs(path):
            raise beneath.Outside(f"{path}: not an absolute path; refused")
        plain = os.path.normpath(path)
        for root in sorted(self.writes if write else self.reads, key=len, reverse=True):
            if os.path.isdir(root) and (plain == root or plain.startswith(root.rstrip("/") + "/")):
                return beneath.Folder(root, "the session's bound folder")
            if plain == root and os.path.isfile(root):
                return beneath.Folder(os.path.dirname(root), "the bound file's folder")
        raise beneath.Outside(f"{path}: outside what the session may {'write' if write else 'read'}; refused")


def _write(folder: beneath.Folder, path: str, data: bytes) -> None:
    """A whole text file written for the agent beneath ``folder``: a new one made, an existing
    regular file replaced in place through the one descriptor it was checked on, unless it has
    another name (a hard link the agent made could name a file outside the bounds)."""
    try:
        fd = folder.regular(path, os.O_WRONLY)
    except FileNotFoundError:
        folder.write(path, data)
        return
    try:
        if os.fstat(fd).st_nlink > 1:
            raise beneath.NotRegular(f"{path}: a file with another name too (a hard link); refused")
        os.ftruncate(fd, 0)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _server(server: Any) -> dict[str, Any]:
    """A bound MCP server as ACP gives it to the agent."""
    if server.command:
        return {"name": server.name, "command": server.command[0], "args": list(server.command[1:]), "env": []}
    return {"type": "http", "name": server.name, "url": server.url, "headers": []}


def _input(call: dict[str, Any]) -> dict[str, Any]:
    """A call's input as the agent gave it; where it gave none (Gemini CLI), its title and kind,
    saying so."""
    raw = call.get("rawInput")
    if isinstance(raw, dict) and raw:
        return raw
    return {"title": str(call.get("title") or ""), "kind": str(call.get("kind") or ""),
            "input": "(the agent gave none)"}


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and value > 0 else 0


