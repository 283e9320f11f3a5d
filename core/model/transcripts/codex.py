"""Codex CLI's rollouts: ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<thread>.jsonl``
(``$CODEX_HOME`` defaults to ``~/.codex``), one JSON record per line, appended to as the
thread goes on, and indexed in ``$CODEX_HOME/state_5.sqlite`` (table ``threads``).

Records (measured with Codex CLI 0.171.0): ``session_meta`` first (the thread id, cwd, and a
fork's ``forked_from_id``), ``turn_context`` at each turn (its model), ``response_item`` (what
the model sees: messages of roles developer / user / assistant, ``function_call`` /
``custom_tool_call`` / ... and their ``*_output`` by ``call_id``, ``reasoning``), ``event_msg``
(``token_count``: the thread's running total, the last call's usage and the model's window;
``item_completed``: a command's or an MCP call's result as ``codex exec --json`` shows it;
``task_started`` / ``task_complete`` / ``turn_aborted``), and records only the CLI reads
(``world_state``, ``token_usage_record``...).

The conversation is the user and assistant messages without what Codex injects (developer
messages, the ``<environment_context>`` / AGENTS.md / instructions blocks it sends as user
messages, marked ``harness`` by their provenance), and each tool call paired with its output
as one tool message shaped as the runner stores it (``exec_command`` with the command line
and its plain output, ``mcp__SERVER__TOOL`` with the result's text), so that an adopted
thread and one Procession ran look alike.

Found by measuring the CLI: ``codex exec resume ID`` finds a rollout that its index does not
list (it looks in the sessions folder and indexes it), so ``place`` and ``write`` only write
rollout files and never touch the CLI's databases. A fork's rollout does not copy its parent's
history: it names the parent and the ordinal it forked at, and the CLI refuses to resume it
without the parent's rollout ("invalid paginated history lineage"), so ``read`` from the
start includes the parent's part and ``carry`` takes the ancestors along.
"""

from __future__ import annotations

import glob
import json
import os
import re
import secrets
import shlex
import sqlite3
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

from .. import beneath, limits
from ..errors import InvalidArgument
from ..toolcalls import summary, text_of, tool_message
from .base import Differs, Found, Position, Said, Transcript, iso_time, remap

CLI = "codex"
#: User messages Codex writes itself, recognised by their opening tag when a rollout has no
#: provenance metadata (versions before it had one).
INJECTED = ("<environment_context>", "<user_instructions>", "# AGENTS.md instructions", "<INSTRUCTIONS>",
            "<turn_aborted>", "<subagent_notification>", "<user_shell_command>", "<skill>")
#: A rollout's file name: ``rollout-<local time>-<thread uuid>.jsonl``.
DATED = re.compile(r"rollout-(\d{4})-(\d{2})-(\d{2})T[0-9-]+-[0-9a-f-]{36}\.jsonl")
#: Events after which a tool call still without output never gets one (the turn ended).
TURN_ENDS = ("task_complete", "turn_aborted", "task_started")


def home(env: Mapping[str, str]) -> Path:
    """``$CODEX_HOME``, else ``$HOME/.codex``."""
    if env.get("CODEX_HOME"):
        return Path(env["CODEX_HOME"])
    return Path(env.get("HOME") or os.path.expanduser("~")) / ".codex"


def _rollouts(sessions: Path, thread: str = "*") -> list[str]:
    pattern = f"rollout-*-{glob.escape(thread) if thread != '*' else '*'}.jsonl"
    return glob.glob(os.path.join(glob.escape(str(sessions)), "*", "*", "*", pattern))


def rollout(env: Mapping[str, str], thread: str) -> str | None:
    """A thread's rollout file under ``env``'s Codex home, None when there is none."""
    found = _rollouts(home(env) / "sessions", thread)
    return found[0] if found else None


def thread_of(path: str) -> str:
    """The thread id a rollout's file name ends with (``rollout-<time>-<uuid>.jsonl``)."""
    return os.path.basename(path)[-42:-6]


def _dated(name: str) -> str | None:
    """A rollout's path inside a sessions folder, from its file name: ``YYYY/MM/DD/<name>``."""
    match = DATED.fullmatch(name)
    return f"{match[1]}/{match[2]}/{match[3]}/{name}" if match else None


def _sessions_of(path: str) -> Path | None:
    """The sessions folder a rollout lies in (None for a file elsewhere)."""
    parents = Path(path).parents
    return parents[3] if len(parents) > 3 and parents[3].name == "sessions" else None


def _parent_path(path: str, parent: str, env: Mapping[str, str] | None = None) -> str | None:
    """The rollout of a fork's parent: under ``env``'s home, else beside the fork."""
    found = rollout(env, parent) if env is not None else None
    sessions = _sessions_of(path)
    if found is None and sessions is not None:
        beside = _rollouts(sessions, parent)
        found = beside[0] if beside else None
    return found


def last_count(path: str | None) -> dict[str, Any] | None:
    """The last ``token_count`` of a rollout: the thread's totals, the last call, the window."""
    if not path:
        return None
    info = None
    try:
        with open(path, "rb") as lines:
            for raw in lines:
                if b'"token_count"' not in raw:
                    continue
                try:
                    record = json.loads(raw)
                except ValueError:
                    continue
                payload = record.get("payload") or {}
                if payload.get("type") == "token_count" and payload.get("info"):
                    info = payload["info"]
    except OSError:
        return None
    return info


def uuid7() -> str:
    """A new thread id as Codex makes them: a UUID version 7 (milliseconds, then random)."""
    raw = bytearray(int(time.time() * 1000).to_bytes(6, "big") + secrets.token_bytes(10))
    raw[6] = (raw[6] & 0x0F) | 0x70
    raw[8] = (raw[8] & 0x3F) | 0x80
    return str(uuid.UUID(bytes=bytes(raw)))



def _stamp(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _meta(path: str) -> dict[str, Any]:
    """A rollout's ``session_meta`` payload (its first line); ``InvalidArgument`` for any other file."""
    try:
        with open(path, "rb") as file:
            first = file.readline()
    except OSError as error:
        raise InvalidArgument(f"cannot read {path}: {error.strerror or error}") from None
    try:
        record = json.loads(first) if first.endswith(b"\n") else None
    except ValueError:
        record = None
    payload = record.get("payload") if isinstance(record, dict) and record.get("type") == "session_meta" else None
    if not isinstance(payload, dict) or not isinstance(payload.get("id"), str):
        raise InvalidArgument(f"{path} is not a Codex rollout (its first line is not a session_meta record)")
    return payload


# ------------------------------------------------------------------------------ reading


@dataclass(slots=True)
class _Record:
    start: int  # the byte offset of its line
    type: str
    payload: dict[str, Any]
    ts: float | None
    ordinal: int | None


def _records(path: str, offset: int, problems: list[tuple[int, str]]) -> tuple[list[_Record], int]:
    """The whole lines after ``offset``, parsed, and the offset after the last of them; a line
    that is no record is said (with its offset) and skipped, a last line without its newline
    (being written) is left out."""
    try:
        with open(path, "rb") as file:
            file.seek(offset)
            data = file.read()
    except OSError as error:
        raise InvalidArgument(f"cannot read {path}: {error.strerror or error}") from None
    out, at = [], 0
    while (newline := data.find(b"\n", at)) >= 0:
        raw, start, at = data[at:newline], offset + at, newline + 1
        if not raw.strip():
            continue
        try:
            record = limits.json_loads(raw, f"the rollout line at byte {start}")
        except InvalidArgument as error:
            problems.append((start, f"{error}; skipped"))
            continue
        payload = record.get("payload") if isinstance(record, dict) else None
        if not isinstance(payload, dict) or not isinstance(record.get("type"), str):
            problems.append((start, f"the rollout line at byte {start} is not a rollout record; skipped"))
            continue
        ordinal = record.get("ordinal")
        out.append(_Record(start, record["type"], payload, iso_time(record.get("timestamp")),
                           ordinal if isinstance(ordinal, int) else None))
    return out, offset + at


def _text(content: Any) -> str:
    """A message's text parts, joined (images and other parts left out)."""
    if isinstance(content, str):
        return content
    parts = [p.get("text") for p in content or [] if isinstance(p, dict)]
    return "".join(p for p in parts if isinstance(p, str))


def _injected(payload: Mapping[str, Any], text: str) -> bool:
    """A user message Codex wrote itself (context, instructions), not the user's."""
    metadata = (payload.get("internal_chat_message_metadata_passthrough") or {}).get("content_item_metadata")
    if isinstance(metadata, list) and metadata:
        return all(isinstance(m, dict) and (m.get("provenance") or {}).get("type") == "harness" for m in metadata)
    return text.lstrip().startswith(INJECTED)


def _arguments(payload: Mapping[str, Any]) -> Any:
    """A call's input: its JSON arguments decoded, a custom tool's raw input, a local shell's action."""
    if isinstance(payload.get("arguments"), str):
        try:
            return json.loads(payload["arguments"])
        except ValueError:
            return payload["arguments"]
    for key in ("arguments", "input", "action"):
        if key in payload:
            return payload[key]
    return None


def _output(payload: Mapping[str, Any]) -> tuple[str, bool]:
    """An ``*_output`` item's text, and whether it says the call failed."""
    output = payload.get("output")
    if isinstance(output, dict):
        return text_of(output.get("content", output.get("output"))), output.get("success") is False
    return text_of(output), False


def _tool(call: _Record, output: _Record | None, done: Mapping[str, Any] | None) -> Said:
    """A call and its result as one tool message; ``done``: the CLI's own account of it
    (``item_completed``), which is what ``codex exec --json`` gives the runner."""
    payload = call.payload
    call_id = str(payload.get("call_id") or "")
    meta: dict[str, Any] = {}
    input: Any
    if done and done.get("type") == "CommandExecution":
        command = done.get("command")
        name, input = "exec_command", {"command": shlex.join(command) if isinstance(command, list) else command}
        text: str | None = str(done.get("aggregated_output") or "")
        failed = done.get("status") == "failed" or done.get("exit_code") not in (0, None)
        meta["exit_code"] = done.get("exit_code")
    elif done and done.get("type") == "McpToolCall":
        name, input = f"mcp__{done.get('server')}__{done.get('tool')}", done.get("arguments")
        error = done.get("error")
        text = str(error.get("message")) if isinstance(error, dict) else text_of((done.get("result") or {}).get("content"))
        failed = bool(error) or done.get("status") == "failed"
    else:
        base = str(payload.get("name") or str(payload.get("type")).removesuffix("_call"))
        name = f"{payload['namespace']}__{base}" if payload.get("namespace") else base
        input = _arguments(payload)
        text, failed = _output(output.payload) if output else (None, True)
        if not call_id:  # a call that has no result item (a web search): done as it stands
            text, failed = "", False
    role, content, stored = tool_message(call_id or str(payload.get("id") or ""), name, input, text, failed, **meta)
    return Said(role, content, stored, call.ts)


@dataclass(slots=True)
class _Reading:
    """What one pass over a rollout's records finds."""

    transcript: Transcript
    total: int | None  # the thread's running token total at the last token_count counted


def _is_call(record: _Record) -> bool:
    return record.type == "response_item" and str(record.payload.get("type", "")).endswith("_call")


def _is_output(record: _Record) -> bool:
    kind = str(record.payload.get("type", ""))
    return record.type == "response_item" and kind.endswith("_output") and bool(record.payload.get("call_id"))


def _ends_turn(record: _Record) -> bool:
    return record.type == "turn_context" or (record.type == "event_msg" and record.payload.get("type") in TURN_ENDS)


def _cut(records: list[_Record]) -> int:
    """How many records may be read now: up to the first tool call whose output is still to
    come (no output, and its turn goes on), so that the next read pairs it instead of
    storing it without a result; a call whose turn ended without its output never gets one."""
    outputs = {str(r.payload["call_id"]) for r in records if _is_output(r)}
    ended = False
    first = len(records)
    for index in range(len(records) - 1, -1, -1):
        record = records[index]
        call_id = record.payload.get("call_id")
        if _is_call(record) and call_id and str(call_id) not in outputs and not ended:
            first = index
        ended = ended or _ends_turn(record)
    return first


def _read(path: str, meta: Mapping[str, Any], offset: int, total: int | None, upto: int | None = None,
          seen: frozenset[str] = frozenset()) -> _Reading:
    """The conversation after ``offset`` (``total``: the running token total read so far);
    ``upto``: only the records before that ordinal (a fork's part of its parent), whole;
    ``seen``: the threads whose reads led here (a lineage is no loop)."""
    thread = str(meta["id"])
    found = Transcript(CLI, thread, path, cwd=str(meta.get("cwd") or ""), started=iso_time(meta.get("timestamp")),
                       forked_from=meta.get("forked_from_id") if isinstance(meta.get("forked_from_id"), str) else None)
    problems: list[tuple[int, str]] = []
    records, end = _records(path, offset, problems)
    if upto is not None:
        records = [r for r in records if r.ordinal is None or r.ordinal < upto]
    cut = _cut(records) if upto is None else len(records)
    kept = records[:cut]
    found.position = Position(records[cut].start if cut < len(records) else end)
    found.problems += [said for at, said in problems if at < found.position.offset]  # the rest: said when read
    if offset == 0 and found.forked_from and isinstance(meta.get("forked_from_ordinal_exclusive"), int):
        found.messages += _parent(path, found.forked_from, meta["forked_from_ordinal_exclusive"], found.problems,
                                  seen | {thread})
    outputs = {str(r.payload["call_id"]): r for r in records if _is_output(r)}
    done = {str(r.payload["item"].get("id")): r.payload["item"] for r in records
            if r.type == "event_msg" and r.payload.get("type") == "item_completed"
            and isinstance(r.payload.get("item"), dict)}
    for record in kept:
        payload, kind = record.payload, record.payload.get("type")
        if record.type == "turn_context" and isinstance(payload.get("model"), str):
            found.model = payload["model"]
        elif record.type == "event_msg" and kind == "token_count" and isinstance(payload.get("info"), dict):
            total = _count(found, payload["info"], total)
        elif record.type == "response_item" and kind == "message" and payload.get("role") in ("user", "assistant"):
            text = _text(payload.get("content"))
            if not text.strip() or (payload["role"] == "user" and _injected(payload, text)):
                continue
            found.messages.append(Said(payload["role"], text, None, record.ts))
            if payload["role"] == "user" and not found.title:
                found.title = summary(text)
        elif _is_call(record):
            call_id = str(payload.get("call_id") or "")
            found.messages.append(_tool(record, outputs.get(call_id), done.get(call_id)))
    return _Reading(found, total)


def _count(found: Transcript, info: Mapping[str, Any], total: int | None) -> int | None:
    """Add one model call's usage; a count repeating the running total it follows is no new call."""
    now = (info.get("total_token_usage") or {}).get("total_tokens")
    if isinstance(now, int) and now == total:
        return total
    last = info.get("last_token_usage") or {}
    used = {k: int(last.get(k) or 0) for k in ("input_tokens", "cached_input_tokens", "cache_write_input_tokens",
                                                 "output_tokens", "total_tokens")}
    # its input counts the whole prompt, cached parts included (as the runner counts it)
    found.tokens_in += max(used["input_tokens"] - used["cached_input_tokens"] - used["cache_write_input_tokens"], 0)
    found.cache_read += used["cached_input_tokens"]
    found.cache_write += used["cache_write_input_tokens"]
    found.tokens_out += used["output_tokens"]
    window = info.get("model_context_window")
    if used["total_tokens"]:
        found.context = (used["total_tokens"], window if isinstance(window, int) else None)
    return now if isinstance(now, int) else total


def _parent(path: str, parent: str, upto: int, problems: list[str], seen: frozenset[str]) -> list[Said]:
    """A fork's inherited history: its parent's messages before the ordinal it forked at."""
    found = _parent_path(path, parent) if parent not in seen else None
    if found is None:
        problems.append(f"the rollout of thread {parent}, which this one was forked from, is not beside it:"
                        " its history is left out")
        return []
    inherited = _read(found, _meta(found), 0, None, upto, seen).transcript
    problems += inherited.problems
    return inherited.messages


# ------------------------------------------------------------------------------ the format


def _found(path: str, cwd: str | None = None) -> Found:
    stat = os.stat(path)
    if cwd is None:
        cwd = str(_meta(path).get("cwd") or "")
    return Found(CLI, thread_of(path), path, cwd, stat.st_mtime, stat.st_size)


def _index(root: Path) -> dict[str, str]:
    """Thread id -> cwd from the CLI's index, read-only ({} when it is missing or unreadable)."""
    db = root / "state_5.sqlite"
    if not db.exists():
        return {}
    try:
        con = sqlite3.connect(f"file:{quote(str(db))}?mode=ro", uri=True, timeout=1.0)
        try:
            return {str(i): str(c) for i, c in con.execute("SELECT id, cwd FROM threads")}
        finally:
            con.close()
    except sqlite3.Error:
        return {}


def _lines(text: str) -> list[str]:
    """A rollout's whole lines (a last one cut short is left out). Split at newlines only:
    the CLI writes U+2028 and other line separators raw inside its JSON strings."""
    return [line + "\n" for line in text.split("\n")[:-1]]


def _remapped(line: str, mapping: Mapping[str, str]) -> str:
    """A record with the paths of its settings moved (``session_meta``, ``turn_context``,
    ``world_state``...); what was said (``response_item``) is left as it was said."""
    record = json.loads(line)
    if record.get("type") == "response_item":
        return line

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return remap(value, mapping) if value.startswith("/") else value
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        return value

    return json.dumps(walk(record), ensure_ascii=False, separators=(",", ":")) + "\n"


def _there(path: Path, text: str, ancestor: bool) -> bool:
    """Whether a rollout to write is there already: the same one (or, for an ancestor, one
    the CLI has appended to since). The thread's own rollout there that is an earlier part of
    it (it was moved away and went on there) is not: it is replaced by the whole. Another
    history of the thread there refuses."""
    if not path.exists():
        return False
    there = path.read_text(encoding="utf-8", errors="replace")
    if there == text or (ancestor and there.startswith(text)):
        return True
    if not ancestor and text.startswith(there):
        return False
    raise Differs(f"Codex thread {thread_of(str(path))} is already at {path}, with another history")


def _write(path: Path, text: str) -> None:
    """A whole rollout at once (the CLI never sees half of it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    part.write_text(text, encoding="utf-8")
    os.replace(part, path)


def _history_items(history: list[Said]) -> Iterator[tuple[float | None, dict[str, Any]]]:
    """Procession's messages as the response items Codex sends the model."""
    for said in history:
        tool = (said.meta or {}).get("tool")
        if said.role == "tool" and isinstance(tool, dict):
            call_id = str(tool.get("id") or f"call_{secrets.token_hex(12)}")
            input = tool.get("input")
            arguments = input if isinstance(input, str) else json.dumps(input if input is not None else {},
                                                                        ensure_ascii=False)
            yield said.ts, {"type": "function_call", "name": str(tool.get("name") or "tool"), "arguments": arguments,
                            "call_id": call_id}
            output = tool.get("output")
            yield said.ts, {"type": "function_call_output", "call_id": call_id,
                            "output": output if isinstance(output, str) else said.content}
        elif said.role in ("user", "assistant", "tool") and said.content.strip():
            role = "user" if said.role == "user" else "assistant"
            part = "input_text" if role == "user" else "output_text"
            yield said.ts, {"type": "message", "role": role, "content": [{"type": part, "text": said.content}]}


class CodexFormat:
    """Codex CLI's rollouts (see the module's docstring)."""

    cli = CLI

    def kept(self, env: Mapping[str, str]) -> str:
        return str(home(env) / "sessions")

    def discover(self, env: Mapping[str, str]) -> Iterator[Found]:
        """Rollouts by their file's last change, newest first: the cwd from the CLI's index
        when it lists the thread, else from the file's first line."""
        root = home(env)
        index = _index(root)
        found = []
        for path in _rollouts(root / "sessions"):
            try:
                found.append(_found(path, index.get(thread_of(path))))
            except (OSError, InvalidArgument):
                continue  # gone meanwhile, or no rollout after all
        return iter(sorted(found, key=lambda f: f.updated, reverse=True))

    def find(self, env: Mapping[str, str], ident: str) -> Found:
        if os.sep in ident or ident.endswith(".jsonl"):
            if not os.path.isfile(ident):
                raise InvalidArgument(f"no such file: {ident}")
            path = os.path.abspath(ident)
            meta = _meta(path)
            stat = os.stat(path)
            return Found(CLI, str(meta["id"]), path, str(meta.get("cwd") or ""), stat.st_mtime, stat.st_size)
        matches = [f for f in self.discover(env) if f.id.startswith(ident)] if ident else []
        exact = [f for f in matches if f.id == ident]
        if exact or len(matches) == 1:
            return (exact or matches)[0]
        if not matches:
            raise InvalidArgument(f"no Codex thread {ident!r} in {home(env) / 'sessions'}")
        raise InvalidArgument(f"{ident!r} is the start of {len(matches)} Codex threads' ids; give more of it")

    def read(self, found: Found, position: Position | None = None) -> Transcript:
        """The conversation after ``position``. ``Position.last`` keeps the thread's running
        token total at the last ``token_count`` read, so a count repeated across two reads
        is not added twice. A tool call whose output is not written yet ends the read before
        it (the next read pairs them); a read from the start of a fork begins with the part
        of its parent's history it was forked with."""
        position = position or Position()
        meta = _meta(found.path)
        total = int(position.last) if position.last.isdigit() else None
        reading = _read(found.path, meta, position.offset, total)
        transcript = reading.transcript
        transcript.position = Position(transcript.position.offset, "" if reading.total is None else str(reading.total))
        return transcript

    def carry(self, ref: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any] | None:
        """The rollout's whole lines, and its ancestors' when it is a fork (the CLI resumes a
        fork only beside its parent's rollout), each with its dated path in a sessions folder;
        None when one of them is gone."""
        path = ref.get("transcript") if isinstance(ref.get("transcript"), str) else None
        if not path or not os.path.isfile(path):
            path = rollout(env, str(ref.get("id") or ""))
        files: list[dict[str, str]] = []
        while path is not None:
            meta, dated = _meta(path), _dated(os.path.basename(path))
            if dated is None:
                raise InvalidArgument(f"{path} is not named as a Codex rollout (rollout-<time>-<thread>.jsonl)")
            with beneath.open_file(path) as fh:  # a rollout that is a link is not followed
                text = fh.read().decode("utf-8", "replace")
            files.insert(0, {"path": dated, "text": "".join(_lines(text))})
            parent = meta.get("forked_from_id")
            if not isinstance(parent, str):
                return {"id": thread_of(files[-1]["path"]), "cwd": str(ref.get("cwd") or ""), "rollouts": files}
            if any(thread_of(f["path"]) == parent for f in files):
                raise InvalidArgument(f"Codex thread {parent} is its own ancestor")
            path = _parent_path(path, parent, env)
        return None

    def place(self, carried: Mapping[str, Any], env: Mapping[str, str], cwd: str,
              mapping: Mapping[str, str]) -> dict[str, Any]:
        """Each carried rollout under this home's sessions folder, by its own dated path, its
        settings' paths moved by ``mapping`` (the thread's old folder going to ``cwd`` unless
        ``mapping`` says otherwise). The CLI indexes it when it first resumes it."""
        files = carried.get("rollouts")
        if not isinstance(files, list) or not files or not all(
                isinstance(f, dict) and isinstance(f.get("path"), str) and isinstance(f.get("text"), str) for f in files):
            raise InvalidArgument("the carried Codex thread holds no rollout")
        moves = {str(carried.get("cwd")): cwd, **mapping} if carried.get("cwd") else dict(mapping)
        sessions = home(env) / "sessions"
        made = []
        for file in files:  # all checked before any is written
            name = os.path.basename(file["path"])
            if _dated(name) != file["path"]:
                raise InvalidArgument(f"the carried Codex rollout path {file['path']!r} is not a dated sessions path")
            try:
                text = "".join(_remapped(line, moves) for line in _lines(file["text"]))
                first = json.loads(text.partition("\n")[0])
            except ValueError:
                raise InvalidArgument(f"the carried Codex rollout {name} is not JSON lines") from None
            if first.get("type") != "session_meta" or (first.get("payload") or {}).get("id") != thread_of(name):
                raise InvalidArgument(f"the carried Codex rollout {name} does not begin with its thread's session_meta")
            existing = _rollouts(sessions, thread_of(name))
            made.append((Path(existing[0]) if existing else sessions / file["path"], text))
        missing = [(path, text) for number, (path, text) in enumerate(made)
                   if not _there(path, text, ancestor=number < len(made) - 1)]
        for path, text in missing:
            _write(path, text)
        target = made[-1][0]
        return {"cli": CLI, "id": thread_of(str(target)), "cwd": cwd, "transcript": str(target),
                **({"already": True} if not missing else {})}

    def write(self, history: list[Said], env: Mapping[str, str], cwd: str, model: str) -> dict[str, Any] | None:
        """A new thread (a UUIDv7 id, as Codex makes) whose rollout holds ``history`` as the
        response items Codex replays to the model when it resumes: user and assistant
        messages, each tool call as a ``function_call`` and its ``function_call_output``.
        System messages are left out: the runner gives the system prompt at every run.
        Accepted by ``codex exec resume`` (0.171.0) with only ``session_meta`` and
        ``turn_context`` besides; the CLI adds its own instructions and context on resume."""
        thread, now = uuid7(), time.time()
        local = time.localtime(now)
        path = home(env) / "sessions" / time.strftime("%Y/%m/%d", local) / (
            f"rollout-{time.strftime('%Y-%m-%dT%H-%M-%S', local)}-{thread}.jsonl")
        context: dict[str, Any] = {"cwd": cwd}
        if model:
            context["model"] = model
        records: list[tuple[float | None, str, dict[str, Any]]] = [
            (now, "session_meta", {"id": thread, "timestamp": _stamp(now), "cwd": cwd, "originator": "codex_exec",
                                   "cli_version": "", "source": "exec"}),
            (now, "turn_context", context),
            *((ts, "response_item", item) for ts, item in _history_items(history))]
        text = "".join(json.dumps({"timestamp": _stamp(ts or now), "type": kind, "payload": payload},
                                  ensure_ascii=False, separators=(",", ":")) + "\n" for ts, kind, payload in records)
        _write(path, text)
        return {"cli": CLI, "id": thread, "cwd": cwd, "transcript": str(path)}


FORMAT = CodexFormat()
