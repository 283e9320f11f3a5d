"""Claude Code's sessions: one JSONL file per session, ``projects/<folder>/<uuid>.jsonl`` under
its home (``$CLAUDE_CONFIG_DIR``, else ``~/.claude``), one record per line.

The file is a tree, not a log: every conversation record (``user``, ``assistant``,
``attachment``, ``system``) names its ``parentUuid``, and a rewind, an edit or a
``--resume-session-at`` appends a new branch that starts from an older record. The
conversation is the chain back from the newest leaf, found as the CLI finds it (the last
``last-prompt`` record's ``leafUuid``, or the newest record when that descends from it),
through compactions (a ``compact_boundary`` continues at its ``logicalParentUuid``, so the
whole conversation is read and the summary the CLI wrote in its place is left out).
Sidechains, attachments, meta records and system records are walked through, never said.
Each assistant record holds one content block (a call's text and its tool uses are records of
the same ``message.id``, its usage repeated on each), as the runner's stream events do, so an
adopted session and one the runner ran store the same messages with the same ``agent_uuid``.

Reading on: a position keeps the bytes read and the uuid of the last chain record imported.
A read parses only the lines after that offset when the new records chain back to that uuid
by themselves (a turn appended after a finished one: the usual sync); otherwise (the read
before stopped inside a model call or before a tool's result, or the user rewound) it parses
the whole file, which is correct in every case. A tool use whose result is not written yet
ends the part read, so the call and its result are stored together by the next read.

Carrying takes the records as JSON and the text files of the session's own folder (beside
the transcript: tool outputs too long for it, which the transcript names by path);
placing maps the records' ``cwd`` and moves that folder's path with them. ``write`` makes
the chain the CLI itself writes, which ``claude -p --resume`` takes (tried with 2.1.197): a
conversation ending on the user is answered, when resumed, by the CLI's own ``No response
requested.`` before the new prompt.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Final

from .. import beneath
from ..errors import InvalidArgument
from ..toolcalls import one_line, tool_message
from .base import Differs, Found, Position, Said, Transcript, iso_time, read_lines, remap

CLI: Final = "claude"
TITLE: Final = "Claude Code transcript"
#: The CLI's own limit on a project folder's name; a longer one is cut and given a hash.
FOLDER_MAX: Final = 200
#: How much of a file's head ``discover`` reads for the session's folder (its first records say it).
HEAD_LINES: Final = 12
HEAD_BYTES: Final = 256 * 1024
TITLE_MAX: Final = 80
#: The largest file of a session's own folder a snapshot carries (tool outputs, subagents).
CARRIED_MAX: Final = 64 * 1024 * 1024
#: The conversation's records; everything else (queue operations, titles, modes, snapshots)
#: is about the session, not in its chain.
CHAIN: Final = ("user", "assistant", "attachment", "system")
#: What the CLI writes as a user's turn when it was interrupted: a marker, not the user's words.
INTERRUPTED: Final = re.compile(r"^\[Request interrupted by user[^\]]*\]$")
#: The version written into sessions ``write`` makes (the one they were tried with).
VERSION: Final = "2.1.197"
#: The model the CLI names in the answers it makes up itself.
SYNTHETIC: Final = "<synthetic>"
_SESSION_FILE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.jsonl$")


# ------------------------------------------------------------------------------ where

def home(env: Mapping[str, str]) -> str:
    return env.get("CLAUDE_CONFIG_DIR") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".claude")


def folder_name(cwd: str) -> str:
    """The CLI's name for a working folder's project folder: every UTF-16 unit that is not an
    ASCII letter or digit made ``-``; past ``FOLDER_MAX`` cut, with its (Java-style) hash."""
    name = "".join(c if c.isascii() and c.isalnum() else "-" * (2 if ord(c) > 0xFFFF else 1) for c in cwd)
    if len(name) <= FOLDER_MAX:
        return name
    digest, units = 0, cwd.encode("utf-16-le")
    for i in range(0, len(units), 2):
        digest = (digest * 31 + int.from_bytes(units[i:i + 2], "little")) & 0xFFFFFFFF
    digest = abs(digest - (1 << 32) if digest >= 1 << 31 else digest)
    return f"{name[:FOLDER_MAX]}-{_base36(digest)}"


def _base36(n: int) -> str:
    digits = ""
    while True:
        n, d = divmod(n, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[d] + digits
        if not n:
            return digits


def transcript(env: Mapping[str, str], cwd: str, agent_id: str) -> str:
    """Where Claude Code keeps a session's transcript: one folder per working folder, named
    for its real path (a session run through a symbolic link is filed under its target)."""
    return os.path.join(home(env), "projects", folder_name(os.path.realpath(cwd)), f"{agent_id}.jsonl")


# ------------------------------------------------------------------------------ the tree

def _parent(record: Mapping[str, Any]) -> str | None:
    """The record before this one in the conversation; past a compaction, what it compacted."""
    parent = record.get("parentUuid")
    if parent is None and record.get("type") == "system" and record.get("subtype") == "compact_boundary":
        parent = record.get("logicalParentUuid")
    return parent if isinstance(parent, str) else None


class _Tree:
    """The records of (part of) a file by uuid, and the leaf the CLI would resume from: its
    rules (``progress`` records bridged over, a non-explicit ``last-prompt`` overtaken by a
    newer record that descends from it)."""

    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, Any]] = {}
        self.bridged: dict[str, str | None] = {}
        self.newest: str | None = None
        self.pointed: str | None = None  # the last last-prompt's leafUuid
        self.explicit = False
        self.pointers: list[str] = []  # every leafUuid named
        self.title = ""

    def add(self, record: dict[str, Any]) -> None:
        kind, uid = record.get("type"), record.get("uuid")
        if kind == "progress" and isinstance(uid, str):
            parent = record.get("parentUuid")
            self.bridged[uid] = self.bridged.get(parent, parent) if isinstance(parent, str) else None
        elif kind in CHAIN and isinstance(uid, str):
            parent = record.get("parentUuid")
            if isinstance(parent, str) and parent in self.bridged:
                record = {**record, "parentUuid": self.bridged[parent]}
            self.nodes[uid] = record
            if not record.get("isSidechain"):
                self.newest, self.explicit = uid, False
        elif kind == "last-prompt" and isinstance(record.get("leafUuid"), str):
            leaf = record["leafUuid"]
            self.explicit = record.get("explicit") is True or (self.explicit and leaf == self.pointed)
            self.pointed = leaf
            self.pointers.append(leaf)
        elif kind == "custom-title" and isinstance(record.get("customTitle"), str):
            self.title = record["customTitle"]
        elif kind == "ai-title" and isinstance(record.get("aiTitle"), str) and not self.title:
            self.title = record["aiTitle"]

    def descends(self, uid: str, ancestor: str) -> bool:
        seen: set[str] = set()
        at: str | None = uid
        while at is not None and at not in seen:
            if at == ancestor:
                return True
            seen.add(at)
            node = self.nodes.get(at)
            at = _parent(node) if node else None
        return False

    def leaf(self) -> str | None:
        """The newest user or assistant record of the conversation the CLI would resume."""
        start = self.pointed if self.pointed in self.nodes else None
        if start and not self.explicit and self.newest and self.newest != start and self.descends(self.newest, start):
            start = self.newest
        at = start or self.newest
        seen: set[str] = set()
        while at is not None and at in self.nodes and at not in seen:
            seen.add(at)
            if self.nodes[at].get("type") in ("user", "assistant"):
                return at
            at = _parent(self.nodes[at])
        return None

    def back(self, leaf: str | None, stop: str) -> tuple[list[dict[str, Any]], str | None]:
        """The records from ``leaf`` back to ``stop`` (excluded; "" is before the root), oldest
        first, and where the walk left this tree (None: it reached ``stop``)."""
        chain: list[dict[str, Any]] = []
        seen: set[str] = set()
        at = leaf
        while at is not None and at != stop:
            node = self.nodes.get(at)
            if node is None or at in seen:
                return chain[::-1], at
            seen.add(at)
            chain.append(node)
            at = _parent(node)
        if at is None and stop:
            return chain[::-1], ""  # the root, without passing ``stop``
        return chain[::-1], None


# ------------------------------------------------------------------------------ records as messages


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif isinstance(block, dict) and block.get("type") == "image":
            parts.append("[image]")
    return "\n\n".join(parts)


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(("[image]" if b.get("type") == "image" else str(b.get("text", ""))) if isinstance(b, dict)
                         else str(b) for b in content)
    return "" if content is None else json.dumps(content, ensure_ascii=False)


@dataclass(slots=True)
class _Said:
    """The messages, usage and facts of a run of chain records."""

    messages: list[Said] = field(default_factory=list)
    calls: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)  # message id -> in, out, read, write
    context: int = 0
    model: str = ""
    cwd: str = ""


def _message(record: Mapping[str, Any]) -> dict[str, Any]:
    message = record.get("message")
    return message if isinstance(message, dict) else {}


def _spoken(record: Mapping[str, Any]) -> bool:
    """A user record the agent was given: not the CLI's meta records, nor the summary it put
    in place of what it compacted (the conversation is read past the compaction)."""
    return record.get("type") == "user" and not (record.get("isMeta") or record.get("isCompactSummary")
                                                 or record.get("isVisibleInTranscriptOnly") or _local_command(record))


#: How the CLI records a command of its own typed at its prompt (``/exit``, ``/clear``) and
#: what it printed: kept in its transcript, never sent to the model, so not conversation.
LOCAL_COMMAND: Final = ("<command-name>", "<command-message>", "<command-args>", "<local-command-stdout>",
                        "<local-command-stderr>", "<local-command-caveat>")


def _local_command(record: Mapping[str, Any]) -> bool:
    content = _message(record).get("content")
    if isinstance(content, list):  # text blocks: a local command's record is one
        texts = [b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        content = texts[0] if len(texts) == 1 and len(content) == 1 else None
    return isinstance(content, str) and content.lstrip().startswith(LOCAL_COMMAND)


def _filler(record: Mapping[str, Any]) -> bool:
    """An answer the CLI made up, not the model's: ``No response requested.`` where a resumed
    conversation ended on the user (its API errors, also made up, are said: the runner says them)."""
    return _message(record).get("model") == SYNTHETIC and not record.get("isApiErrorMessage")


def _pending(chain: list[dict[str, Any]]) -> int:
    """How many of ``chain``'s records can be said now: all, but for a tool use still waiting
    for its result at the end (it is said with its result, by a later read)."""
    cut = len(chain)
    while True:
        waiting: dict[str, int] = {}
        for index, record in enumerate(chain[:cut]):
            content = _message(record).get("content")
            blocks = content if isinstance(content, list) else []
            if record.get("type") == "assistant":
                waiting.update({str(b.get("id")): index for b in blocks if isinstance(b, dict)
                                and b.get("type") == "tool_use"})
            elif _spoken(record):
                for block in blocks:
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        waiting.pop(str(block.get("tool_use_id")), None)
                if _text(content).strip():
                    waiting.clear()  # the user spoke: those tools never returned
        if not waiting:
            return cut
        cut = min(waiting.values())


def _say(chain: list[dict[str, Any]], seen_calls: set[str]) -> _Said:
    said = _Said()
    tools: dict[str, tuple[str, Any]] = {}

    def stopped(ts: float | None) -> None:
        for call_id, (name, value) in tools.items():
            said.messages.append(Said(*tool_message(call_id, name, value, None, True), ts=ts))
        tools.clear()

    for record in chain:
        if record.get("isSidechain"):
            continue
        if isinstance(record.get("cwd"), str):
            said.cwd = record["cwd"]
        kind, uid, ts = record.get("type"), record.get("uuid"), iso_time(record.get("timestamp"))
        message = _message(record)
        content = message.get("content")
        if kind == "assistant" and _filler(record):
            continue
        if kind == "assistant":
            model = message.get("model")
            if isinstance(model, str) and model and model != SYNTHETIC:
                said.model = model
            _usage(said, message, seen_calls)
            for block in content if isinstance(content, list) else []:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "text" and str(block.get("text", "")).strip():
                    said.messages.append(Said("assistant", str(block["text"]), {"agent_uuid": uid}, ts))
                elif block.get("type") == "tool_use":
                    tools[str(block.get("id"))] = (str(block.get("name")), block.get("input"))
        elif _spoken(record):
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    call_id = str(block.get("tool_use_id"))
                    name, value = tools.pop(call_id, ("tool", None))
                    said.messages.append(Said(*tool_message(call_id, name, value, _result_text(block.get("content")),
                                                            bool(block.get("is_error")), agent_uuid=uid), ts=ts))
            text = _text(content)
            if text.strip():
                stopped(ts)
            if text.strip() and not INTERRUPTED.match(text.strip()):
                said.messages.append(Said("user", text, None, ts))
    return said


def _first_prompt(chain: list[dict[str, Any]]) -> str:
    """The first words of the user's first prompt: the session's title when it has none."""
    for record in chain:
        text = _text(_message(record).get("content")) if _spoken(record) and not record.get("isSidechain") else ""
        if text.strip() and not INTERRUPTED.match(text.strip()):
            return one_line(text, TITLE_MAX)
    return ""


def _usage(said: _Said, message: Mapping[str, Any], seen: set[str]) -> None:
    """One model call's usage, once per call (its records repeat it; the last is the final)."""
    usage: dict[str, Any] = message["usage"] if isinstance(message.get("usage"), dict) else {}
    call = tuple(v if isinstance(v := usage.get(k), int) else 0 for k in ("input_tokens", "output_tokens", "cache_read_input_tokens",
                                                   "cache_creation_input_tokens"))
    key = message.get("id")
    if not isinstance(key, str) or not any(call) or key in seen:
        return
    said.calls[key] = (call[0], call[1], call[2], call[3])
    said.context = call[0] + call[2] + call[3]


# ------------------------------------------------------------------------------ the format

def _head_cwd(path: str) -> str:
    """The session's folder, from the first records that say it."""
    try:
        with open(path, "rb") as file:
            for _ in range(HEAD_LINES):
                line = file.readline(HEAD_BYTES)
                if not line.endswith(b"\n"):
                    break
                if b'"cwd"' in line:
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(record, dict) and isinstance(record.get("cwd"), str):
                        return str(record["cwd"])
    except OSError:
        pass
    return ""


def _found(path: str, stat: os.stat_result | None = None) -> Found:
    stat = stat or os.stat(path)
    return Found(CLI, Path(path).stem, path, _head_cwd(path), stat.st_mtime, stat.st_size)


class ClaudeFormat:
    """Claude Code's transcripts (see the module's docstring)."""

    cli = CLI

    def kept(self, env: Mapping[str, str]) -> str:
        return os.path.join(home(env), "projects")

    def discover(self, env: Mapping[str, str]) -> Iterator[Found]:
        projects = self.kept(env)
        listed: list[tuple[os.stat_result, str]] = []
        try:
            folders = list(os.scandir(projects))
        except OSError:
            return
        for folder in folders:
            if not folder.is_dir():
                continue
            try:
                for entry in os.scandir(folder.path):
                    if _SESSION_FILE.match(entry.name) and entry.is_file():
                        listed.append((entry.stat(), entry.path))
            except OSError:
                continue
        for stat, path in sorted(listed, key=lambda pair: pair[0].st_mtime, reverse=True):
            yield _found(path, stat)

    def find(self, env: Mapping[str, str], ident: str) -> Found:
        if os.sep in ident or ident.endswith(".jsonl"):
            if not os.path.isfile(ident):
                raise InvalidArgument(f"no Claude Code transcript at {ident}")
            return _found(os.path.abspath(ident))
        projects = os.path.join(home(env), "projects")
        if not ident:
            raise InvalidArgument("name a Claude Code session: its id, a prefix of it, or its file")
        matches: list[str] = []
        for folder in os.scandir(projects) if os.path.isdir(projects) else []:
            if folder.is_dir():
                matches += [e.path for e in os.scandir(folder.path)
                            if _SESSION_FILE.match(e.name) and e.name.startswith(ident.lower())]
        exact = [m for m in matches if Path(m).stem == ident.lower()]
        if len(exact) == 1 or len(matches) == 1:
            return _found((exact or matches)[0])
        if not matches:
            raise InvalidArgument(f"no Claude Code session {ident!r} in {projects}")
        raise InvalidArgument(f"{len(matches)} Claude Code sessions start with {ident!r}: give more of the id")

    def read(self, found: Found, position: Position | None = None) -> Transcript:
        """See the module's docstring. With a position the conversation no longer passes
        through, nothing is read: ``branched``, and the position is given back unchanged (a
        read from the start takes the conversation as it is now). A read of the new lines
        alone names the title only if they rename the session."""
        position = position or Position()
        out = Transcript(CLI, found.id, found.path, cwd=found.cwd)
        if position.offset and self._read_on(found, position, out):
            return out
        lines = read_lines(found.path, 0, TITLE)
        if (lines.records or lines.problems) and not any(
                isinstance(r.get("type"), str) and "sessionId" in r for r in lines.records):
            raise InvalidArgument(f"{found.path} is not a Claude Code transcript")
        tree = _Tree()
        for record in lines.records:
            tree.add(record)
        chain, _ = tree.back(tree.leaf(), "")
        out.problems += lines.problems
        out.title = tree.title or _first_prompt(chain)
        out.started = iso_time(chain[0].get("timestamp")) if chain else None
        forked = chain[0].get("forkedFrom") if chain else None
        out.forked_from = forked.get("sessionId") if isinstance(forked, dict) else None
        index = -1
        if position.last:
            found_at = next((i for i, r in enumerate(chain) if r.get("uuid") == position.last), None)
            if found_at is None:
                out.branched, out.position = True, position
                return out
            index = found_at
        self._fill(out, chain[index + 1:], chain[:index + 1], position.last, lines.end)
        return out

    def _read_on(self, found: Found, position: Position, out: Transcript) -> bool:
        """The part after ``position`` from the new lines alone, when they chain back to
        ``position.last`` by themselves and start no model call the last read saw begin."""
        try:
            with open(found.path, "rb") as file:
                file.seek(position.offset - 1)
                if file.read(1) != b"\n":
                    return False  # not where a line ended: the file is not the one read before
        except OSError:
            return False
        lines = read_lines(found.path, position.offset, TITLE)
        tree = _Tree()
        for record in lines.records:
            tree.add(record)
        if any(p not in tree.nodes and p != position.last for p in tree.pointers):
            return False  # a rewind to a record read before
        leaf = tree.leaf()
        if leaf is None:
            if tree.newest is not None:
                return False
            out.problems += lines.problems
            out.position = Position(lines.end, position.last)
            return True
        chain, left = tree.back(leaf, position.last)
        spoken = [r.get("type") for r in chain if r.get("type") in ("user", "assistant")]
        if left is not None or spoken[:1] == ["assistant"]:
            return False  # reaches before the new lines, or goes on with a model call begun there
        out.problems += lines.problems
        out.title = tree.title
        self._fill(out, chain, [], position.last, lines.end)
        return True

    def _fill(self, out: Transcript, chain: list[dict[str, Any]], before: list[dict[str, Any]], last: str,
              end: int) -> None:
        """``out`` given the messages of ``chain`` (after ``before``, whose model calls are
        counted already), and the position after them."""
        chain = chain[:_pending(chain)]
        seen = {str(_message(r).get("id")) for r in before if r.get("type") == "assistant"}
        said = _say(chain, seen)
        out.messages = said.messages
        out.model, out.cwd = said.model, said.cwd or out.cwd
        for tokens_in, tokens_out, read, write in said.calls.values():
            out.tokens_in += tokens_in
            out.tokens_out += tokens_out
            out.cache_read += read
            out.cache_write += write
        if said.context:
            out.context = (said.context, None)
        out.position = Position(end, str(chain[-1]["uuid"]) if chain else last)

    # -------------------------------------------------------------------------- carrying

    def carry(self, ref: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any] | None:
        """The records, and the files of the session's own folder (tool outputs too large for
        the transcript, subagents' transcripts) that are text: the transcript names them."""
        path = str(ref.get("transcript") or transcript(env, str(ref.get("cwd", "")), str(ref.get("id", ""))))
        if not os.path.isfile(path):
            return None
        folder, files = path[:-len(".jsonl")], {}
        if os.path.isdir(folder) and not os.path.islink(folder):
            with beneath.Folder(folder) as own:  # no link followed out of it (a secret it points to)
                for rel, _ in own.files():
                    try:
                        files[rel] = own.read(rel, CARRIED_MAX).decode("utf-8")
                    except (OSError, UnicodeDecodeError, InvalidArgument):
                        continue
        return {"cli": CLI, "id": str(ref.get("id") or Path(path).stem), "cwd": str(ref.get("cwd") or _head_cwd(path)),
                "folder": folder, "records": read_lines(path, 0, TITLE).records, "files": files}

    def place(self, carried: Mapping[str, Any], env: Mapping[str, str], cwd: str,
              mapping: Mapping[str, str]) -> dict[str, Any]:
        """The session under this home's folder for ``cwd``: its records' ``cwd`` mapped (the
        carried folder becoming ``cwd`` unless ``mapping`` says otherwise), the paths of its
        own folder's files moved with them. Placing the same session again changes nothing; a
        copy here that is an earlier part of it (it was moved away and went on there) is
        replaced by the whole; one that went another way is ``Differs``, left as it is."""
        ident, records, files = str(carried.get("id", "")), carried.get("records"), carried.get("files") or {}
        if not _SESSION_FILE.match(f"{ident}.jsonl") or not isinstance(records, list) or not isinstance(files, dict):
            raise InvalidArgument("the carried Claude Code session has no session id or no records")
        path = transcript(env, cwd, ident)
        old_folder, folder = str(carried.get("folder") or ""), path[:-len(".jsonl")]
        paths = {str(carried.get("cwd", "")): cwd, **mapping} if carried.get("cwd") else dict(mapping)
        placed = [_moved(r, paths, old_folder, folder) for r in records if isinstance(r, dict)]
        if not any(r.get("type") in ("user", "assistant") and isinstance(r.get("uuid"), str) for r in placed):
            raise InvalidArgument("the carried Claude Code session holds no conversation (no user or assistant record)")
        kept: dict[str, str] = {}
        for name, text in files.items():
            parts = Path(str(name)).parts
            if not isinstance(text, str) or not parts or os.path.isabs(name) or ".." in parts:
                raise InvalidArgument(f"the carried Claude Code session has a file outside its folder: {name!r}")
            kept[os.path.join(folder, *parts)] = text.replace(old_folder, folder) if old_folder else text
        for file, text in kept.items():
            if os.path.exists(file) and Path(file).read_text("utf-8", "replace") != text:
                raise Differs(f"Claude Code session {ident} is already at {path}, with another history")
        there = read_lines(path, 0, TITLE).records if os.path.exists(path) else None
        if there is not None and placed[:len(there)] != there:
            raise Differs(f"Claude Code session {ident} is already at {path}, with another history")
        for file, text in kept.items():
            if not os.path.exists(file):
                os.makedirs(os.path.dirname(file), exist_ok=True)
                Path(file).write_text(text, "utf-8")
        already = there == placed
        if not already:  # new here, or an earlier part of it is (it left, went on elsewhere, came back)
            _write(path, placed, replace=there is not None)
        return {"cli": CLI, "id": ident, "cwd": cwd, "transcript": path, **({"already": True} if already else {})}

    # -------------------------------------------------------------------------- writing

    def write(self, history: list[Said], env: Mapping[str, str], cwd: str, model: str) -> dict[str, Any] | None:
        session = str(uuid.uuid4())
        records = _Writer(session, cwd, model).records(history)
        path = transcript(env, cwd, session)
        _write(path, records)
        return {"cli": CLI, "id": session, "cwd": cwd, "transcript": path}


def _moved(record: dict[str, Any], paths: Mapping[str, str], old_folder: str, folder: str) -> dict[str, Any]:
    """A record with the folders the CLI reads from it moved: ``cwd`` and a relocation's by
    ``paths``, and the session's own folder (where it saved a tool's long output, which the
    record names) wherever it appears."""
    moved = _replaced(record, old_folder, folder) if old_folder and old_folder != folder else dict(record)
    for key in ("cwd", "relocatedCwd"):
        if isinstance(moved.get(key), str):
            moved[key] = remap(moved[key], paths)
    return moved


def _replaced(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str):
        return value.replace(old, new) if old in value else value
    if isinstance(value, dict):
        return {k: _replaced(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_replaced(v, old, new) for v in value]
    return value


def _write(path: str, records: list[dict[str, Any]], *, replace: bool = False) -> None:
    """A new session file, whole or not at all (the CLI may look at the folder meanwhile);
    ``replace``: the file there is replaced (never written into)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    text = "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in records)
    partial = f"{path}.{os.getpid()}.tmp"
    with open(partial, "w", encoding="utf-8") as out:
        out.write(text)
    if replace:
        os.replace(partial, path)
        return
    try:
        os.link(partial, path)  # refuses a file that appeared meanwhile
    except FileExistsError:
        raise InvalidArgument(f"a Claude Code session is already at {path}") from None
    finally:
        os.unlink(partial)


def _api_name(value: Any, limit: int) -> str:
    """An id or a tool name another CLI gave, as Anthropic's API takes them (``[A-Za-z0-9_-]``)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", str(value or ""))[:limit]


class _Writer:
    """Said messages as the records Claude Code writes: a chain of user and assistant records,
    a tool call as a ``tool_use`` in an assistant record and its ``tool_result`` in the user
    record after it; an assistant's text and the tool uses right after it share one model call
    (``message.id``), as the CLI's own records do."""

    def __init__(self, session: str, cwd: str, model: str) -> None:
        self.session, self.cwd, self.model = session, cwd, model or "unknown"
        self.out: list[dict[str, Any]] = []
        self.parent: str | None = None
        self.call: str | None = None  # the model call the next assistant block joins
        self.prompt = ""

    def records(self, history: list[Said]) -> list[dict[str, Any]]:
        for said in history:
            tool = (said.meta or {}).get("tool")
            if said.role != "tool" and not said.content.strip():
                continue  # nothing said (the API refuses an empty text)
            if said.role == "assistant":
                self.assistant({"type": "text", "text": said.content}, said.ts)
            elif said.role == "tool" and isinstance(tool, dict):
                call_id = _api_name(tool.get("id"), 200) or f"toolu_{uuid.uuid4().hex[:24]}"
                value = tool.get("input")
                self.assistant({"type": "tool_use", "id": call_id, "name": _api_name(tool.get("name"), 64) or "tool",
                                "input": value if isinstance(value, dict) else {} if value is None else {"input": value}},
                               said.ts)
                output = tool.get("output")
                self.user([{"tool_use_id": call_id, "type": "tool_result",
                            "content": output if isinstance(output, str) else "(no result: the run stopped first)",
                            "is_error": bool(tool.get("is_error")) or output is None}], said.ts)
            else:  # user, system, and a tool message that lost its call: words the agent was given
                self.user(said.content, said.ts)
                self.prompt = said.content
        if self.parent:
            self.out.append({"type": "last-prompt", "lastPrompt": one_line(self.prompt, TITLE_MAX),
                             "leafUuid": self.parent, "sessionId": self.session})
        return self.out

    def _record(self, kind: str, message: dict[str, Any], ts: float | None) -> None:
        uid = str(uuid.uuid4())
        stamp = datetime.fromtimestamp(ts if ts is not None else time.time(), timezone.utc)
        self.out.append({"parentUuid": self.parent, "isSidechain": False, "type": kind, "message": message,
                         "uuid": uid, "timestamp": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                         "userType": "external", "entrypoint": "sdk-cli", "cwd": self.cwd,
                         "sessionId": self.session, "version": VERSION})
        self.parent = uid

    def user(self, content: str | list[dict[str, Any]], ts: float | None) -> None:
        self.call = None
        self._record("user", {"role": "user", "content": content}, ts)

    def assistant(self, block: dict[str, Any], ts: float | None) -> None:
        self.call = self.call if block["type"] == "tool_use" and self.call else f"msg_{uuid.uuid4().hex[:24]}"
        self._record("assistant", {"id": self.call, "type": "message", "role": "assistant", "model": self.model,
                                   "content": [block], "stop_reason": None, "stop_sequence": None,
                                   "usage": {"input_tokens": 0, "output_tokens": 0}}, ts)


FORMAT: Final = ClaudeFormat()
