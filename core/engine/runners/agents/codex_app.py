"""Codex driven through ``codex app-server`` (JSON-RPC over stdio, one message per line, no
``"jsonrpc"`` field), for a session whose agent must ask before what it may not do unasked
(``--permissions ask``): ``codex exec`` cannot ask anyone, the app server asks its client.

The conversation (measured on 0.171.0): ``initialize`` and ``initialized``; ``thread/start``,
``thread/resume`` or ``thread/fork`` with the approval policy ``untrusted`` (a command Codex does
not know to be a read asks first) and its sandbox; ``turn/start`` with the prompt. The server
then sends notifications (``item/started`` / ``item/completed`` with camelCase items,
``thread/tokenUsage/updated`` with the thread's running total and the last call's tokens,
``turn/completed``) and *requests*: ``item/commandExecution/requestApproval`` and
``item/fileChange/requestApproval``, answered ``{"decision": "accept" | "decline"}`` once a person
answered (``Turn.decide``). A decline reaches the model as ``rejected by user`` and no more, so
the reason goes before it as a ``turn/steer`` message of the same turn, and the decline only once
the server answered the steer: the steer is then among the turn's input, and reaches the model in
the same request as the refusal (written one after the other, the server could take the decline
first, and the reason came a model request late, as CI once saw). When the turn completes the
reader hangs up: the server exits on its closed stdin. ``exec`` stays the runner of every other
session: the app server is marked experimental in this version.
"""

from __future__ import annotations

import asyncio
import shlex
from typing import Any, Final

from ....model.transcripts.codex import rollout
from .base import Conversation, Turn
from .codex import USAGE_KEYS, CodexReader, sandbox

#: The shells Codex wraps a command in (``/bin/bash -lc 'echo hi'``): a request names what runs inside.
SHELLS: Final = frozenset({"bash", "sh", "zsh"})
#: The server's requests a person answers, and the tool each stands for.
APPROVALS: Final = {"item/commandExecution/requestApproval": "exec_command",
                    "item/fileChange/requestApproval": "apply_patch"}
#: The ids of Procession's own requests.
INITIALIZE, OPEN, TURN = 1, 2, 3


def command(line: str) -> str:
    """What a command of Codex's runs, as its model wrote it: the script of its shell wrapper."""
    try:
        words = shlex.split(line)
    except ValueError:
        return line
    if len(words) == 3 and words[0].rsplit("/", 1)[-1] in SHELLS and words[1] in ("-c", "-lc"):
        return words[2]
    return line


class CodexAppReader(CodexReader):
    """The app server's messages as the run's events, and what the reader answers it."""

    def __init__(self, turn: Turn) -> None:
        super().__init__(turn)
        self.talk = talk = Conversation()
        self.turn_id = ""
        self.last_id = TURN
        self.window: int | None = None
        self.last_tokens = 0  # the last model call's whole context
        self.transcript: str | None = None
        self.completed = False
        self.refused: dict[str, str] = {}  # item id -> why a person refused it
        self.steers: dict[int, asyncio.Future[None]] = {}  # a steer's request id -> answered
        ref = turn.ref or {}
        opened: dict[str, Any] = {"cwd": turn.cwd, "approvalPolicy": "untrusted", "sandbox": sandbox(turn)}
        method = "thread/start"
        if ref:
            method = "thread/fork" if ref.get("fork") else "thread/resume"
            opened |= {"threadId": ref["id"], "excludeTurns": True}
        talk.write({"id": INITIALIZE, "method": "initialize",
                    "params": {"clientInfo": {"name": "procession", "title": "Procession", "version": "1"}}})
        talk.write({"method": "initialized"})
        talk.write({"id": OPEN, "method": method, "params": opened})

    def event(self, event: dict[str, Any]) -> None:
        method, params = event.get("method"), event.get("params")
        params = params if isinstance(params, dict) else {}
        if not isinstance(method, str):
            self._answered(event)
        elif "id" in event:
            self._requested(event["id"], method, params)
        elif method in ("item/started", "item/completed"):
            item = params.get("item")
            self._item(item if isinstance(item, dict) else {}, done=method == "item/completed")
        elif method == "thread/tokenUsage/updated":
            usage = params.get("tokenUsage") or {}
            self.window = usage.get("modelContextWindow") or self.window
            self.last_tokens = int((usage.get("last") or {}).get("totalTokens") or 0)
            total = usage.get("total") or {}
            self._usage({snake: total.get(_camel(snake)) for snake in USAGE_KEYS})
        elif method == "turn/completed":
            self._completed(params.get("turn") or {})
        elif method == "error" and not params.get("willRetry"):
            self.errors.append(f"Codex: {(params.get('error') or {}).get('message', 'an error')}")

    def _answered(self, reply: dict[str, Any]) -> None:
        """A reply to one of Procession's requests: the thread opened, the turn started, a steer taken."""
        answers = reply.get("id")
        steered = self.steers.pop(answers, None) if isinstance(answers, int) else None
        if steered is not None and not steered.done():
            steered.set_result(None)
        error = reply.get("error")
        if error is not None:
            if answers in (INITIALIZE, OPEN, TURN):  # the turn cannot happen: say why and end
                message = error.get("message") if isinstance(error, dict) else error
                self.pending.problems.append(f"Codex: {message}")
                self.hang_up()
            return  # a steer after the turn ended: the turn had its answer
        result = reply.get("result") or {}
        if answers == OPEN:
            thread = result.get("thread") or {}
            self.thread = str(thread.get("id"))
            path = thread.get("path")
            self.transcript = path if isinstance(path, str) else rollout(self.turn.env, self.thread)
            self.announce(self.thread, transcript=self.transcript, total=self.before)
            assert self.talk is not None
            self.talk.write({"id": TURN, "method": "turn/start",
                             "params": {"threadId": self.thread, "input": [{"type": "text", "text": self.turn.prompt}]}})
        elif answers == TURN:
            self.turn_id = str((result.get("turn") or {}).get("id") or "")

    def _requested(self, request_id: Any, method: str, params: dict[str, Any]) -> None:
        assert self.talk is not None
        tool = APPROVALS.get(method)
        if tool is None or self.turn.decide is None:  # nothing Procession answers: said so, not left hanging
            self.talk.write({"id": request_id, "error": {"code": -32601, "message": f"Procession does not answer {method}"}})
            return
        item = str(params.get("itemId") or "")
        _, input, _ = self.open_tools.get(item, (tool, {"command": command(str(params.get("command") or ""))}, {}))
        self.talk.start(self._decide(request_id, item, tool, input if isinstance(input, dict) else {}))

    async def _decide(self, request_id: Any, item: str, tool: str, input: dict[str, Any]) -> None:
        assert self.talk is not None and self.turn.decide is not None
        ok, why = await self.turn.decide(tool, input)
        if not ok:  # the reason first, taken: it then goes to the model with the refusal, in the same request
            self.refused[item] = why
            self.last_id += 1
            self.steers[self.last_id] = steered = asyncio.get_running_loop().create_future()
            self.talk.write({"id": self.last_id, "method": "turn/steer", "params": {
                "threadId": self.thread, "expectedTurnId": self.turn_id,
                "input": [{"type": "text", "text": f"Procession: your {tool} call was refused: {why}"}]}})
            await steered  # a server that ends instead: the reader hangs up and this work is cancelled
        self.talk.write({"id": request_id, "result": {"decision": "accept" if ok else "decline"}})

    def _item(self, item: dict[str, Any], done: bool) -> None:
        kind, item_id = item.get("type"), str(item.get("id"))
        if kind == "agentMessage" and done:
            self.said(str(item.get("text", "")))
        elif kind == "commandExecution":
            input = {"command": command(str(item.get("command") or ""))}
            if not done:
                self.started(item_id, "exec_command", input)
                return
            self.open_tools.setdefault(item_id, ("exec_command", input, {}))
            status, code = item.get("status"), item.get("exitCode")
            output = str(item.get("aggregatedOutput") or "")
            if status == "declined":
                output = f"refused: {self.refused.get(item_id) or 'declined'}"
            self.finished(item_id, output, status in ("failed", "declined") or code not in (0, None), exit_code=code)
        elif kind == "fileChange":
            changes = [{"path": c.get("path"), "kind": (c.get("kind") or {}).get("type") if isinstance(c.get("kind"), dict)
                        else c.get("kind")} for c in item.get("changes") or [] if isinstance(c, dict)]
            if not done:
                self.started(item_id, "apply_patch", {"changes": changes})
                return
            self.open_tools.setdefault(item_id, ("apply_patch", {"changes": changes}, {}))
            status = item.get("status")
            why = self.refused.get(item_id)
            self.finished(item_id, f"refused: {why}" if why else str(status), status != "completed")
        elif kind == "mcpToolCall":
            self._mcp_call(item_id, item, done)

    def _context(self) -> None:
        """After each model call: the thread's total so far (the next run counts from it), and
        the context that call had, as the server says them."""
        if self.thread is None:
            return
        self.announce(self.thread, transcript=self.transcript, total=self.before)
        if self.last_tokens:
            self.context(self.last_tokens, self.window)

    def _completed(self, turn: dict[str, Any]) -> None:
        """The turn ended: what failed it is said, and the server is let go."""
        self.completed = True
        if turn.get("status") == "failed":
            self.pending.problems.append(f"Codex: {(turn.get('error') or {}).get('message', 'the turn failed')}")
            self.pending.diagnostics += self.errors
            self.errors = []
        self.hang_up()

    def closing(self) -> None:
        """Its usage came as it went; its error items say why a turn that never completed ended,
        and are warnings of one that did."""
        (self.pending.diagnostics if self.completed else self.pending.problems).extend(self.errors)
        self.errors = []

    def hang_up(self) -> None:
        assert self.talk is not None
        self.talk.hang_up()


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(word.title() for word in rest)
