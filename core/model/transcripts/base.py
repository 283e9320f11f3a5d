"""The types every transcript format shares (see the package's docstring)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from .. import beneath, limits
from ..errors import InvalidArgument


class Differs(InvalidArgument):
    """``place`` found the carried session's id here already, with another history (it went on
    after the snapshot was saved, say): nothing is written."""


@dataclass(slots=True)
class Said:
    """One message of a transcript, as Procession stores it.

    ``role``: ``user``, ``assistant`` or ``tool`` (a tool call paired with its result, made by
    ``model.toolcalls.tool_message``). ``meta`` keeps what resumes or forks the agent's own
    session at this message (Claude: ``agent_uuid``, the record's uuid). ``ts``: when the CLI
    wrote it (seconds since the epoch), None when the transcript does not say.
    """

    role: str
    content: str
    meta: dict[str, Any] | None = None
    ts: float | None = None


@dataclass(slots=True, frozen=True)
class Position:
    """Where a read of a transcript stopped. ``offset``: bytes of the file read, whole records
    only (JSONL formats); ``last``: the id of the last record imported (Claude: the uuid of the
    last record on the conversation's chain; opencode: the last message id)."""

    offset: int = 0
    last: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"offset": self.offset, "last": self.last}

    @classmethod
    def of(cls, data: Mapping[str, Any] | None) -> Position:
        data = data or {}
        return cls(int(data.get("offset") or 0), str(data.get("last") or ""))


@dataclass(slots=True, frozen=True)
class Found:
    """A transcript found where a CLI keeps them (not read yet)."""

    cli: str
    id: str  # the CLI's own session id (Claude: the session uuid; Codex: the thread id; opencode: ses_...)
    path: str  # the file (opencode: its database)
    cwd: str  # the folder the session ran in ("" when the listing does not say)
    updated: float  # last change, seconds since the epoch
    size: int = 0  # bytes (0 when unknown)


@dataclass(slots=True)
class Transcript:
    """What a read found: the messages after the position, and what the session is."""

    cli: str
    id: str
    path: str
    cwd: str = ""
    model: str = ""
    title: str = ""  # the CLI's own title or first prompt, short
    started: float | None = None
    messages: list[Said] = field(default_factory=list)
    # token use over the part read (summed per model call), and the agent's context after it
    tokens_in: int = 0
    tokens_out: int = 0
    cache_read: int = 0
    cache_write: int = 0
    context: tuple[int, int | None] | None = None  # (tokens, window)
    position: Position = Position()
    forked_from: str | None = None  # the CLI's id of the session this one was forked from
    problems: list[str] = field(default_factory=list)  # records skipped, and why (one line each)
    branched: bool = False  # the conversation no longer passes through position.last (rewound in the CLI)

    def journal(self) -> dict[str, Any]:
        """What a call's journal row keeps of a read: which transcript, how far, not its text."""
        return {"cli": self.cli, "id": self.id, "path": self.path, "messages": len(self.messages),
                "position": self.position.as_json()}

    def ref(self) -> dict[str, Any]:
        """The agent reference a session adopted from this transcript keeps (as the runners do)."""
        return {"cli": self.cli, "id": self.id, "cwd": self.cwd, "transcript": self.path}


class Format(Protocol):
    """One CLI's files. ``env`` is the environment the CLI runs with (its HOME, and the
    ``CLAUDE_CONFIG_DIR`` / ``CODEX_HOME`` / ``XDG_DATA_HOME`` it honours)."""

    cli: str

    def discover(self, env: Mapping[str, str]) -> Iterator[Found]:
        """Every session this CLI keeps under ``env``'s home, newest first; cheap (no full read)."""
        ...

    def kept(self, env: Mapping[str, str]) -> str:
        """Where ``discover`` looks (said when it finds nothing)."""
        ...

    def find(self, env: Mapping[str, str], ident: str) -> Found:
        """One session by its id, an unambiguous id prefix, or its file's path; ``InvalidArgument``
        (one line) when there is none."""
        ...

    def read(self, found: Found, position: Position | None = None) -> Transcript:
        """The conversation after ``position`` (all of it when None): its linear history
        (Claude: the ``parentUuid`` chain back from the newest leaf, without sidechains,
        attachments and meta records; Codex: response items without developer messages and
        injected context), token use, context, and the position to read on from. A file that
        is not this format at all: ``InvalidArgument`` (one line)."""
        ...

    def carry(self, ref: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any] | None:
        """The agent's own session as JSON-able data for a snapshot file (``save -o``), enough
        for ``place`` to rebuild it on another machine; None when its files are gone."""
        ...

    def place(self, carried: Mapping[str, Any], env: Mapping[str, str], cwd: str,
              mapping: Mapping[str, str]) -> dict[str, Any]:
        """Write a carried session where this machine's CLI (under ``env``) finds it, for a
        session whose folder is now ``cwd``; ``mapping`` (old path prefix -> new) rewrites the
        paths inside it. Returns the new agent reference (``Transcript.ref`` shape), with
        ``"already": True`` when that very session was here before. Refuses, with ``Differs``,
        to overwrite a session of the same id that differs."""
        ...

    def write(self, history: list[Said], env: Mapping[str, str], cwd: str, model: str) -> dict[str, Any] | None:
        """A new native session of this CLI holding ``history`` (for ``migrate`` from another
        runner), which the real CLI resumes; returns its agent reference, or None when this
        format cannot be written (the caller then gives the history as a first prompt)."""
        ...


def iso_time(stamp: Any) -> float | None:
    """An ISO 8601 time as the CLIs write them (``2026-12-01T18:00:00.000Z``), in seconds
    since the epoch; None for anything else."""
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def within(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or inside it (whole path components)."""
    stem = folder.rstrip("/")
    return path == stem or path.startswith(stem + "/")


def remap(path: str, mapping: Mapping[str, str]) -> str:
    """``path`` with the longest ``mapping`` prefix it starts with (whole path components)
    replaced by its new value (``load --map OLD=NEW``); unchanged when none applies."""
    for old in sorted(mapping, key=len, reverse=True):
        if within(path, old):
            return mapping[old].rstrip("/") + path[len(old.rstrip("/")):]
    return path


@dataclass(slots=True)
class Lines:
    """The whole records of a JSONL file from some offset, the offset after the last whole
    one, and what was skipped."""

    records: list[dict[str, Any]] = field(default_factory=list)
    end: int = 0
    problems: list[str] = field(default_factory=list)


def read_lines(path: str, start: int, what: str) -> Lines:
    """The records of the JSONL file at ``path`` from byte ``start``: a line cut short at the
    end (the CLI is writing it) is left for the next read; a line that is not a JSON object
    where a whole one stands is said in ``problems`` and skipped. ``what`` names the file in
    the refusal when it is missing (``Claude Code transcript``)."""
    try:
        with beneath.open_file(path) as file:  # a transcript that is a link is not followed
            file.seek(start)
            data = file.read()
    except FileNotFoundError:
        raise InvalidArgument(f"no {what} at {path}") from None
    except OSError as error:
        raise InvalidArgument(f"cannot read {path}: {error.strerror or error}") from None
    out = Lines(end=start)
    at = 0
    while at < len(data):
        stop = data.find(b"\n", at)
        if stop < 0:
            break  # cut short: the CLI is writing it
        line, offset, at = data[at:stop], start + at, stop + 1
        if not line.strip():
            out.end = start + at
            continue
        try:
            record = limits.json_loads(line, f"the record at byte {offset} of {path}")
        except InvalidArgument as error:
            if at >= len(data):
                break  # the last line: it may be whole only later
            out.problems.append(f"{error}; skipped")
            out.end = start + at
            continue
        out.end = start + at
        if not isinstance(record, dict):
            out.problems.append(f"the record at byte {offset} of {path} is not an object; skipped")
            continue
        out.records.append(record)
    return out


def chats(folder: str, named: Callable[[str], bool]) -> list[tuple[os.stat_result, str]]:
    """The files ``folder/<project>/chats/<name>`` whose name is ``named``, newest first (Gemini
    CLI's and Qwen Code's layout)."""
    listed: list[tuple[os.stat_result, str]] = []
    try:
        projects = list(os.scandir(folder))
    except OSError:
        return listed
    for project in projects:
        try:
            for entry in os.scandir(os.path.join(project.path, "chats")):
                if named(entry.name) and entry.is_file(follow_symlinks=False):
                    listed.append((entry.stat(follow_symlinks=False), entry.path))
        except OSError:
            continue
    return sorted(listed, key=lambda pair: pair[0].st_mtime, reverse=True)


def find_in(fmt: Format, env: Mapping[str, str], ident: str, what: str, found: Callable[[str], Found]) -> Found:
    """``Format.find`` for a CLI whose sessions ``discover`` lists with their ids: ``ident`` a
    file's path, an id or an unambiguous prefix of one. ``what``: the CLI's name (``Qwen Code``)."""
    if os.sep in ident or ident.endswith(".jsonl"):
        if not os.path.isfile(ident):
            raise InvalidArgument(f"no {what} session at {ident}")
        return found(os.path.abspath(ident))
    if not ident:
        raise InvalidArgument(f"name a {what} session: its id, a prefix of it, or its file")
    matches = [f for f in fmt.discover(env) if f.id.startswith(ident.lower())]
    exact = [f for f in matches if f.id == ident.lower()]
    if len(exact) == 1 or len(matches) == 1:
        return (exact or matches)[0]
    if not matches:
        raise InvalidArgument(f"no {what} session {ident!r} in {fmt.kept(env)}")
    raise InvalidArgument(f"{len(matches)} {what} sessions start with {ident!r}: give more of the id")
