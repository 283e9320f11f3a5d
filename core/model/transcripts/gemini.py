"""Gemini CLI's chats: one JSONL file per session, ``tmp/<project>/chats/session-<time>-<id8>.jsonl``
under its folder (``$GEMINI_CLI_HOME/.gemini``, else ``~/.gemini``); the project folder's
``.project_root`` names the working folder (the chats themselves do not).

The file is a log of changes to one document, read as the CLI reads it
(``loadConversationRecord``, 0.61): a first record of the session's metadata (``sessionId``,
``projectHash``, ``startTime``); message records (an ``id``, a ``type``: ``user``, ``gemini``,
``info``, ``error``, ``warning``); ``$set`` records changing the metadata, whose ``messages``
replaces them all (the CLI's context preamble, a resumed history); and ``$rewindTo`` records
dropping a message and all after it. A message record whose id came before replaces that
message where it stood: a model call is written once with its text, then again with its tool
calls, then again with their results.

The conversation is what the CLI would resume: user messages but its own preambles
(``<session_context>``, ``<hook_context>``) and slash commands, the model's text, and each
tool call paired with its result (kept on the model's message; the ``functionResponse`` user
records that repeat them are not said again). A tool call not ended yet (no ``success``,
``error`` or ``cancelled``) ends the part read, so a call and its result are stored together.

Reading on: the whole file is folded each time (a later record may change an earlier
message), and the position keeps the last message said with how many of its tool calls were
(``<id>/<calls>``), so a model call read before its tool calls were written gives them on
the next read. A position whose message was rewound away is ``branched``.

Procession runs Gemini CLI over ACP, where it cannot take a session up again: each run is a
new chat given the whole conversation. So its chats are read to ``adopt`` a session of the
user's own, not to follow a session Procession runs, and none is carried in a snapshot.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from .. import beneath
from ..errors import InvalidArgument
from ..toolcalls import one_line, tool_message
from .base import Found, Position, Said, Transcript, chats, find_in, iso_time, read_lines

CLI: Final = "gemini"
TITLE: Final = "Gemini CLI chat"
TITLE_MAX: Final = 80
#: What the CLI leaves out of a resumed history (``isIgnoredUserContent``).
IGNORED: Final = ("/", "?", "<session_context>", "<hook_context>")
#: A tool call that has ended, with or without success.
ENDED: Final = ("success", "error", "cancelled")
HEAD_BYTES: Final = 64 * 1024


def home(env: Mapping[str, str]) -> str:
    return os.path.join(env.get("GEMINI_CLI_HOME") or env.get("HOME") or os.path.expanduser("~"), ".gemini")


def parts_text(content: Any) -> str:
    """The text of a message's content: a string, or parts of which the ``text`` ones count
    (Gemini's and Qwen Code's shape: ``[{"text": ...}, {"functionCall": ...}]``)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def response_text(response: Any) -> tuple[str, bool]:
    """A ``functionResponse``'s ``response`` as a tool's output, and whether it is an error."""
    if isinstance(response, dict):
        for key, error in (("output", False), ("error", True)):
            if isinstance(response.get(key), str):
                return response[key], error
    return ("" if response is None else str(response)), False


def _header(path: str) -> dict[str, Any]:
    """The session's first record (its id and start), read without the rest of the file."""
    try:
        with beneath.open_file(path) as file:  # not a link, not a FIFO: a file anything may have put there
            line = file.readline(HEAD_BYTES)
        record = json.loads(line)
    except (OSError, ValueError, InvalidArgument):
        return {}
    return record if isinstance(record, dict) else {}


def _project_root(path: str) -> str:
    """The working folder of the chats' project (``tmp/<project>/.project_root``)."""
    try:
        with beneath.open_file(os.path.join(os.path.dirname(os.path.dirname(path)), ".project_root")) as file:
            root = file.read(4096).decode("utf-8").strip()
    except (OSError, UnicodeDecodeError, InvalidArgument):
        return ""
    return root if os.path.isabs(root) else ""


def _found(path: str, stat: os.stat_result | None = None) -> Found:
    stat = stat or os.stat(path)
    ident = _header(path).get("sessionId")
    return Found(CLI, ident if isinstance(ident, str) else Path(path).stem, path, _project_root(path),
                 stat.st_mtime, stat.st_size)


def fold(records: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The session's metadata and its messages, in order, as the CLI reads the records."""
    meta: dict[str, Any] = {}
    messages: dict[str, dict[str, Any]] = {}

    def add(message: Any) -> None:
        if isinstance(message, dict) and isinstance(message.get("id"), str):
            messages[message["id"]] = message

    for record in records:
        if isinstance(record.get("$rewindTo"), str):
            ids = list(messages)
            cut = ids.index(record["$rewindTo"]) if record["$rewindTo"] in ids else 0
            for ident in ids[cut:]:
                del messages[ident]
        elif isinstance(record.get("id"), str):
            add(record)
        elif isinstance(record.get("$set"), dict):
            if isinstance(record["$set"].get("messages"), list):
                messages.clear()
                for message in record["$set"]["messages"]:
                    add(message)
            meta.update({k: v for k, v in record["$set"].items() if k != "messages"})
        elif isinstance(record.get("sessionId"), str) and isinstance(record.get("projectHash"), str):
            meta.update({k: v for k, v in record.items() if k != "messages"})
            for message in record.get("messages") or []:
                add(message)
    return meta, list(messages.values())


def _said_user(message: Mapping[str, Any]) -> str | None:
    text = parts_text(message.get("content"))
    return None if not text.strip() or text.strip().startswith(IGNORED) else text


class GeminiFormat:
    """Gemini CLI's chats (see the module's docstring)."""

    cli = CLI

    def kept(self, env: Mapping[str, str]) -> str:
        return os.path.join(home(env), "tmp")

    def discover(self, env: Mapping[str, str]) -> Iterator[Found]:
        for stat, path in chats(self.kept(env), lambda name: name.startswith("session-") and name.endswith(".jsonl")):
            yield _found(path, stat)

    def find(self, env: Mapping[str, str], ident: str) -> Found:
        return find_in(self, env, ident, "Gemini CLI", _found)

    def read(self, found: Found, position: Position | None = None) -> Transcript:
        position = position or Position()
        lines = read_lines(found.path, 0, TITLE)
        meta, messages = fold(lines.records)
        if (lines.records or lines.problems) and not meta.get("sessionId"):
            raise InvalidArgument(f"{found.path} is not a {TITLE}")
        out = Transcript(CLI, str(meta.get("sessionId") or found.id), found.path,
                         cwd=found.cwd or _project_root(found.path), started=iso_time(meta.get("startTime")),
                         problems=lines.problems)
        out.title = one_line(next((t for m in messages if m.get("type") == "user" and (t := _said_user(m))), ""))[
            :TITLE_MAX]
        start, calls_said, last = 0, 0, position.last
        if last:
            ident, _, count = last.rpartition("/")
            at = next((i for i, m in enumerate(messages) if m.get("id") == (ident or count)), None)
            if at is None:
                out.branched, out.position = True, position
                return out
            start, calls_said = at, int(count) if ident else 0
        for i in range(start, len(messages)):
            message, again = messages[i], bool(position.last) and i == start  # read before: only what it gained
            if message.get("type") == "user":
                if not again and (text := _said_user(message)) is not None:
                    out.messages.append(Said("user", text, ts=iso_time(message.get("timestamp"))))
                last = message["id"]
            elif message.get("type") == "gemini":
                calls = [c for c in message.get("toolCalls") or [] if isinstance(c, dict)]
                ended = next((n for n, c in enumerate(calls) if c.get("status") not in ENDED), len(calls))
                self._model_call(out, message, calls[calls_said if again else 0:ended], again)
                last = f"{message['id']}/{ended}"
                if ended < len(calls):  # a call still running: it and what follows are read next time
                    break
        out.position = Position(lines.end, last)
        return out

    @staticmethod
    def _model_call(out: Transcript, message: Mapping[str, Any], calls: list[dict[str, Any]], again: bool) -> None:
        """A model call's text and tokens (unless read before) and the tool calls given."""
        ts = iso_time(message.get("timestamp"))
        text = parts_text(message.get("content"))
        if not again and text.strip():
            out.messages.append(Said("assistant", text, {"agent_uuid": message["id"]}, ts))
        for call in calls:
            result = [p["functionResponse"] for p in call.get("result") or []
                      if isinstance(p, dict) and isinstance(p.get("functionResponse"), dict)]
            output, failed = response_text(result[0].get("response")) if result else ("", False)
            role, content, meta = tool_message(str(call.get("id") or ""), str(call.get("name") or "tool"),
                                               call.get("args"), output, failed or call.get("status") != "success")
            out.messages.append(Said(role, content, meta, iso_time(call.get("timestamp")) or ts))
        tokens = message.get("tokens")
        if not again and isinstance(tokens, dict):
            cached = int(tokens.get("cached") or 0)
            out.tokens_in += max(0, int(tokens.get("input") or 0) - cached)
            out.cache_read += cached
            out.tokens_out += int(tokens.get("output") or 0) + int(tokens.get("thoughts") or 0)
            out.context = (int(tokens.get("total") or 0), None)
        if isinstance(message.get("model"), str):
            out.model = message["model"]

    def carry(self, ref: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any] | None:
        """None: Procession never takes a Gemini CLI session up again (see the module's
        docstring), so a snapshot need not carry it; its history is the session's own."""
        return None

    def place(self, carried: Mapping[str, Any], env: Mapping[str, str], cwd: str,
              mapping: Mapping[str, str]) -> dict[str, Any]:
        raise InvalidArgument("a Gemini CLI session is not carried in snapshots: its history is the session's own")

    def write(self, history: list[Said], env: Mapping[str, str], cwd: str, model: str) -> dict[str, Any] | None:
        return None  # its first run gives it the history (it takes no session up again anyway)


FORMAT: Final = GeminiFormat()
