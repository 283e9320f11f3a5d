"""Qwen Code's chats: one JSONL file per session, ``projects/<folder>/chats/<session id>.jsonl``
under its folder (``$QWEN_RUNTIME_DIR``, else ``$QWEN_HOME``, else ``~/.qwen``), one record per
line, each naming its ``parentUuid`` and the ``cwd`` it ran in (0.15).

The conversation is the chain back from the newest record: ``user`` records (Gemini's parts:
their ``text``), ``assistant`` records (the model's text, and its ``functionCall`` parts),
``tool_result`` records (a ``functionResponse`` per call, ``toolCallResult.status`` saying
whether it succeeded); ``system`` records (telemetry, snapshots) are walked through, never
said. A tool call whose result is not written yet ends the part read, before the model call
that made it, so a call and its result are stored together by the next read.

Reading on: the whole file is read each time (a short log of one session), and the position
keeps the uuid of the last record of the chain read; a position the chain no longer passes
through (the user rewound) is ``branched``.

Procession runs Qwen Code over ACP, where the chat it writes misses the model's later
replies (0.15.10: a tool call's result and the answer after it were not written): its chats
are read to ``adopt`` a session of the user's own, not to follow a session Procession runs,
and none is carried in a snapshot (its history is the session's own).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from ..errors import InvalidArgument
from ..toolcalls import one_line, tool_message
from .base import Found, Position, Said, Transcript, chats, find_in, iso_time, read_lines
from .gemini import parts_text, response_text

CLI: Final = "qwen"
TITLE: Final = "Qwen Code chat"
TITLE_MAX: Final = 80


def home(env: Mapping[str, str]) -> str:
    return (env.get("QWEN_RUNTIME_DIR") or env.get("QWEN_HOME")
            or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".qwen"))


def _head_cwd(path: str) -> str:
    try:
        records = read_lines(path, 0, TITLE).records[:4]
    except InvalidArgument:
        return ""
    return next((r["cwd"] for r in records if isinstance(r.get("cwd"), str)), "")


def _found(path: str, stat: os.stat_result | None = None) -> Found:
    stat = stat or os.stat(path)
    return Found(CLI, Path(path).stem, path, _head_cwd(path), stat.st_mtime, stat.st_size)


def _chain(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation: back from the newest record along ``parentUuid``, then in order."""
    by_id = {r["uuid"]: r for r in records if isinstance(r.get("uuid"), str)}
    chain: list[dict[str, Any]] = []
    at = next((r["uuid"] for r in reversed(records) if isinstance(r.get("uuid"), str)), None)
    while isinstance(at, str) and at in by_id and len(chain) < len(by_id):
        chain.append(by_id[at])
        at = by_id[at].get("parentUuid")
    return chain[::-1]


def _parts(record: Mapping[str, Any], kind: str) -> list[dict[str, Any]]:
    """The ``kind`` parts (``functionCall``, ``functionResponse``) of a record's message."""
    message = record.get("message")
    parts = message.get("parts") if isinstance(message, dict) else None
    return [p[kind] for p in parts or [] if isinstance(p, dict) and isinstance(p.get(kind), dict)]


def _pending(chain: list[dict[str, Any]]) -> int:
    """How much of the chain is whole: up to the model call one of whose tools has no result yet."""
    answered = {str(r.get("id")) for rec in chain if rec.get("type") == "tool_result"
                for r in _parts(rec, "functionResponse")}
    for i, record in enumerate(chain):
        if record.get("type") == "assistant" and any(str(c.get("id")) not in answered
                                                     for c in _parts(record, "functionCall")):
            return i
    return len(chain)


class QwenFormat:
    """Qwen Code's chats (see the module's docstring)."""

    cli = CLI

    def kept(self, env: Mapping[str, str]) -> str:
        return os.path.join(home(env), "projects")

    def discover(self, env: Mapping[str, str]) -> Iterator[Found]:
        for stat, path in chats(self.kept(env), lambda name: name.endswith(".jsonl")):
            yield _found(path, stat)

    def find(self, env: Mapping[str, str], ident: str) -> Found:
        return find_in(self, env, ident, "Qwen Code", _found)

    def read(self, found: Found, position: Position | None = None) -> Transcript:
        position = position or Position()
        lines = read_lines(found.path, 0, TITLE)
        if (lines.records or lines.problems) and not any(
                isinstance(r.get("sessionId"), str) and isinstance(r.get("uuid"), str) for r in lines.records):
            raise InvalidArgument(f"{found.path} is not a {TITLE}")
        chain = _chain(lines.records)
        out = Transcript(CLI, found.id, found.path, cwd=found.cwd or next(
            (r["cwd"] for r in chain if isinstance(r.get("cwd"), str)), ""), problems=lines.problems)
        out.started = iso_time(chain[0].get("timestamp")) if chain else None
        out.title = one_line(next((t for r in chain if r.get("type") == "user"
                                   and (t := parts_text((r.get("message") or {}).get("parts")))), ""))[:TITLE_MAX]
        start = 0
        if position.last:
            at = next((i for i, r in enumerate(chain) if r.get("uuid") == position.last), None)
            if at is None:
                out.branched, out.position = True, position
                return out
            start = at + 1
        whole = chain[start:_pending(chain)]
        calls = {str(c.get("id")): c for r in chain if r.get("type") == "assistant" for c in _parts(r, "functionCall")}
        for record in whole:
            self._say(out, record, calls)
        out.position = Position(lines.end, str(whole[-1]["uuid"]) if whole else position.last)
        return out

    @staticmethod
    def _say(out: Transcript, record: Mapping[str, Any], calls: Mapping[str, Mapping[str, Any]]) -> None:
        kind, ts = record.get("type"), iso_time(record.get("timestamp"))
        text = parts_text((record.get("message") or {}).get("parts"))
        if kind == "user" and text.strip():
            out.messages.append(Said("user", text, ts=ts))
        elif kind == "assistant":
            if text.strip():
                out.messages.append(Said("assistant", text, {"agent_uuid": record.get("uuid")}, ts))
            usage = record.get("usageMetadata")
            if isinstance(usage, dict):
                cached = int(usage.get("cachedContentTokenCount") or 0)
                out.tokens_in += max(0, int(usage.get("promptTokenCount") or 0) - cached)
                out.cache_read += cached
                out.tokens_out += int(usage.get("candidatesTokenCount") or 0) + int(usage.get("thoughtsTokenCount") or 0)
                out.context = (int(usage.get("totalTokenCount") or 0), None)
            if isinstance(record.get("model"), str):
                out.model = record["model"]
        elif kind == "tool_result":
            status = (record.get("toolCallResult") or {}).get("status")
            for response in _parts(record, "functionResponse"):
                call = calls.get(str(response.get("id")), {})
                output, failed = response_text(response.get("response"))
                role, content, meta = tool_message(str(response.get("id") or ""),
                                                   str(call.get("name") or response.get("name") or "tool"),
                                                   call.get("args"), output, failed or status not in (None, "success"))
                out.messages.append(Said(role, content, meta, ts))

    def carry(self, ref: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any] | None:
        """None: see the module's docstring."""
        return None

    def place(self, carried: Mapping[str, Any], env: Mapping[str, str], cwd: str,
              mapping: Mapping[str, str]) -> dict[str, Any]:
        raise InvalidArgument("a Qwen Code session is not carried in snapshots: its history is the session's own")

    def write(self, history: list[Said], env: Mapping[str, str], cwd: str, model: str) -> dict[str, Any] | None:
        return None  # its first run gives it the history


FORMAT: Final = QwenFormat()
