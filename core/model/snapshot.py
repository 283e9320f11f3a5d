"""Portable snapshot files: one session as versioned JSON with a content hash.

The file is ``{"format": FORMAT, "version": VERSION, "sha256": H, "payload": {...}}`` where
``H`` is the SHA-256 of the payload's canonical JSON. ``parse`` accepts a file only if it
is exactly that: the right format and version, an intact hash, and a payload whose every
field has the right type and whose history, folds and triggers make sense. Anything else
is a ``SnapshotError`` with one line. Token counts are not trusted from the file: the
loading workspace recounts with its own counter.

A file is read as it is written (``read``): a part at a time, the messages a buffer's worth
at a time, the hash taken of the bytes as they go by, so that memory stays flat in the
history (``snapshot_process`` runs that read in a process of its own for a large file); a
file not laid out as ``write`` lays it out (rewritten by another tool, or damaged) is read
whole (``parse``), which checks the hash of its payload written again canonically.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import math
import re
from collections.abc import AsyncIterator, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, BinaryIO, Final, cast

import orjson

from . import bounds, environ, limits, runner_spec, trigger_spec
from .errors import InvalidArgument, SnapshotError

FORMAT: Final = "procession.snapshot"
#: The version written. 2: each fold carries its time (``created``), so that the folds one
#: compress made stay one, apart from another's (one ``expand`` undoes one compress, as in
#: the session saved); a version 1 file's folds are all of the load's time.
VERSION: Final = 2
#: The versions read.
READ: Final = (1, 2)


#: How much deeper than the values it carries (memory values, a message's meta, a trigger's
#: spec) the file's own structure nests: the file, its payload, a list, an item.
STRUCTURE_DEPTH: Final = 4


def canonical_bytes(payload: Any) -> bytes:
    """The payload's one text form (or any part's: a list's is its items' joined by commas);
    never NaN or Infinity, which no JSON reader takes back (a workspace may hold one, or a
    value too deep to write, stored before they were refused)."""
    try:
        text = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (ValueError, RecursionError):
        raise SnapshotError("the session holds a value that is not JSON (NaN or Infinity) or is nested too deep"
                            " to write, stored before such values were refused; set it again to save") from None
    return text.encode("utf-8", "surrogatepass")


def _head(digest: str) -> bytes:
    head = json.dumps({"format": FORMAT, "version": VERSION, "sha256": digest}, separators=(",", ":"))
    return head[:-1].encode() + b',"payload":'


def dump(payload: dict[str, Any]) -> bytes:
    """The file's bytes for ``payload``."""
    body = canonical_bytes(payload)
    return _head(hashlib.sha256(body).hexdigest()) + body + b"}\n"


#: Where a file's digest starts: it is written last, over a placeholder of its own length.
_DIGEST_AT = len(_head("")) - len('","payload":')


async def write(fh: BinaryIO, payload: dict[str, Any], messages: AsyncIterator[list[dict[str, Any]]]) -> tuple[int, str]:
    """Write ``dump(payload)`` to ``fh`` (a new file, open for writing and seeking) with
    ``payload["messages"]`` (absent from ``payload``) taken from ``messages`` a batch at a
    time, hashing while writing: the file is the same, memory stays flat in the history and
    nothing is serialised twice. Returns the bytes written and the digest."""
    digest = hashlib.sha256()
    size = 0

    def put(data: bytes) -> None:
        nonlocal size
        digest.update(data)
        fh.write(data)
        size += len(data)

    fh.write(_head("0" * 64))
    start = fh.tell()
    before = {k: payload[k] for k in sorted(payload) if k < "messages"}
    after = {k: payload[k] for k in sorted(payload) if k > "messages"}
    put(canonical_bytes(before)[:-1] + (b',"messages":[' if before else b'"messages":['))
    first = True
    async for batch in messages:
        if batch:
            put((b"" if first else b",") + canonical_bytes(batch)[1:-1])
            first = False
    put(b"]" + (b"," + canonical_bytes(after)[1:] if after else b"}"))
    fh.write(b"}\n")
    hexdigest = digest.hexdigest()
    fh.seek(_DIGEST_AT)
    fh.write(hexdigest.encode())
    return start + size + 2, hexdigest


@dataclass(slots=True, frozen=True)
class Snapshot:
    """A validated payload."""

    session: dict[str, Any]
    messages: list[dict[str, Any]]
    folds: list[dict[str, Any]]
    memory: dict[str, Any]
    resources: list[dict[str, Any]]
    triggers: list[dict[str, Any]]

    def parts(self) -> Iterator[Part]:
        """The payload as ``read`` gives it, in the file's order."""
        yield "folds", self.folds
        yield "memory", self.memory
        yield "messages", (_row(m) for m in self.messages)
        yield "resources", self.resources
        yield "session", self.session
        yield "triggers", self.triggers


#: One part of a payload: its key and value, checked; ``messages`` an iterator of checked
#: messages as ``(role, content, author, pinned, meta, created)`` (what a history appends),
#: to be read to its end before the next part.
Part = tuple[str, Any]
PARTS: Final = frozenset({"session", "messages", "folds", "memory", "resources", "triggers"})


def _row(m: dict[str, Any]) -> tuple[Any, ...]:
    return m["role"], m["content"], m["author"], m["pinned"], m["meta"], m["created"]


class NotAsWritten(Exception):
    """The file is not laid out as ``write`` lays it out, or its bytes are not those its
    digest was taken of: only a whole read (``parse``) can tell a rewritten file from a
    damaged one, and say which."""


def read(fh: BinaryIO, source: str) -> Generator[Part, None, None]:
    """The parts of the snapshot in ``fh`` (open for reading at its start), each checked as
    it is read; the hash, the keys and the folds' ranges are checked after the last, before
    the iterator ends. ``NotAsWritten`` when the file must be read whole; ``SnapshotError``
    (one line, naming ``source``) when it is as written and not a valid snapshot."""
    text = _Text(fh, source)
    with text.checked():
        text.head()
        seen: set[str] = set()
        folds: list[dict[str, Any]] = []
        count = [0]
        text.expect("{")
        while not text.take("}"):
            if seen:
                text.expect(",")
            key = text.value()
            text.expect(":")
            if not isinstance(key, str) or key in seen:
                raise NotAsWritten
            seen.add(key)
            if key == "messages":
                yield key, _messages(text, count)
                continue
            value = text.value()
            _shape(value, STRUCTURE_DEPTH - 2)
            if key not in PARTS:
                raise SnapshotError(f"the payload has unknown {key}")
            if key == "folds":
                folds = value
            yield key, _PARTS[key](value)
        text.expect("}")
        text.expect("\n")
        text.end()
        _keys(dict.fromkeys(seen), set(PARTS), "the payload")
        _fold_ranges(folds, count[0])
    if not text.drained():
        raise NotAsWritten


class _Shape(InvalidArgument):
    """A value JSON cannot hold, or nested too deep: the file is not a snapshot at all."""


def _shape(value: Any, margin: int) -> None:
    """``value`` is what a whole read of the file would take, ``margin`` levels into it."""
    try:
        limits.json_shape(value, "it", margin=margin)
    except InvalidArgument as exc:
        raise _Shape(str(exc)) from None


def _messages(text: _Text, count: list[int]) -> Iterator[tuple[Any, ...]]:
    """The messages array, one checked message at a time (read a buffer's worth at a time)."""
    with text.checked():
        yield from _items(text, count)


def _items(text: _Text, count: list[int]) -> Iterator[tuple[Any, ...]]:
    text.expect("[")
    if text.take("]"):
        return
    while True:
        buf, at = text.buf, text.at
        last = buf.rfind(_NEXT, at) + 1  # the comma after the last message another follows in the buffer
        batch = _batch(buf, at, last) if last > at else None
        if batch is None:  # none whole but the last, or one json may read otherwise: one at a time
            if (yield from _exact(text, count, last if last > at else len(buf))):
                return
            continue
        for message in batch:
            count[0] += 1
            _message(message, count[0])
            yield _row(message)
        text.at = last + 1


#: Where one message ends and the next begins, as ``write`` lays them out (keys sorted, so a
#: message starts with its author). Met deeper down (a list of objects in a meta), it cuts the
#: text where it is not JSON, so a batch cut there is refused, and read one at a time.
_NEXT: Final = '},{"author":'
def _batch(buf: str, at: int, last: int) -> list[Any] | None:
    """The messages in ``buf[at:last]`` (whole ones, between commas), read in one call of
    ``orjson``: the one parse a million-message file spends its time in, three times as fast
    as ``json`` a message; or None wherever ``json`` may read them otherwise, to read them one
    at a time with it. ``orjson`` never takes a text ``json`` refuses; it refuses some that
    ``json`` takes (NaN, lone surrogates), and reads an integer past 64 bits as a float, so a
    batch with a float as large in a message's time or meta is left to ``json`` too."""
    try:
        batch = orjson.loads("[" + buf[at:last] + "]")
    except orjson.JSONDecodeError:
        return None
    for m in batch:
        if type(m) is dict and (limits.widened(m.get("created"))
                                or m.get("meta") is not None and limits.widened(m["meta"])):
            return None
    return cast("list[Any]", batch)


def _exact(text: _Text, count: list[int], last: int) -> Generator[tuple[Any, ...], None, bool]:
    """Messages read one at a time, as strictly as a whole read, until one ends at or past
    ``last`` (False), the buffer does (refilled; False) or the array (True)."""
    buf, at, n = text.buf, text.at, len(text.buf)
    while True:
        try:
            message, end = limits.json_raw_decode(buf, at, "it")
        except limits.NotJson:
            if text.eof:
                raise
            break  # cut by the end of the buffer (or damaged: then cut by the end of the file)
        except InvalidArgument as exc:
            raise _Shape(str(exc)) from None
        if end >= n:
            break  # the character after it is not read yet
        count[0] += 1
        _message(message, count[0])
        text.at = at = end + 1
        yield _row(message)
        if buf[end] == "]":
            return True
        if buf[end] != ",":
            raise NotAsWritten
        if end >= last:
            return False
    text.more(max(n - at, _CHUNK))
    return False


#: Bytes read at a time: enough that a batch of messages is parsed between reads.
_CHUNK: Final = 1 << 20
_HEAD = re.compile(rb'\{"format":"procession\.snapshot","version":[12],"sha256":"([0-9a-f]{64})","payload":')


class _Text:
    """A snapshot's text as it is read: decoded as ``json.loads`` decodes bytes (UTF-8, lone
    surrogates passed), the payload's bytes hashed as they go by (but for the file's last
    two, ``}\n``, which close the file, not the payload)."""

    def __init__(self, fh: BinaryIO, source: str) -> None:
        self.fh, self.source, self.digest = fh, source, ""
        self.buf, self.at, self.eof = "", 0, False
        self.sha = hashlib.sha256()
        self.held = b""
        self.decoder = codecs.getincrementaldecoder("utf-8")("surrogatepass")

    def head(self) -> None:
        """Read the head, as ``write`` writes it, and the digest it gives."""
        raw = self.fh.read(len(_head("0" * 64)))
        found = _HEAD.fullmatch(raw)
        if found is None:
            raise NotAsWritten
        self.digest = found.group(1).decode()

    @contextmanager
    def checked(self) -> Iterator[None]:
        """A refusal of what was read, if the file is as written (so it says what is wrong
        with it); else ``NotAsWritten``, since a whole read may yet take it, or say better
        why not (its hash)."""
        try:
            yield
        except (SnapshotError, InvalidArgument) as exc:
            if not self.drained():
                raise NotAsWritten from None
            what = "a snapshot" if isinstance(exc, (limits.NotJson, _Shape)) else "a valid snapshot"
            raise SnapshotError(f"{self.source} is not {what}: {exc}") from None

    def more(self, at_least: int = _CHUNK) -> None:
        data = self.fh.read(max(at_least, _CHUNK))
        if not data:
            if self.eof:
                raise NotAsWritten  # truncated
            self.eof = True
        held = self.held + data
        self.sha.update(held[:-2])
        self.held = held[-2:]
        try:
            self.buf = self.buf[self.at:] + self.decoder.decode(data, final=not data)
        except UnicodeDecodeError:
            raise NotAsWritten from None
        self.at = 0

    def take(self, char: str) -> bool:
        """Whether the next character is ``char`` (then read past it)."""
        if self.at >= len(self.buf):
            self.more()
        if self.buf.startswith(char, self.at):
            self.at += 1
            return True
        return False

    def expect(self, char: str) -> None:
        if not self.take(char):
            raise NotAsWritten

    def value(self) -> Any:
        """The next JSON value (its shape unchecked); the text is read on until it holds it
        whole, and one character after it (a number could go on)."""
        while True:
            try:
                value, end = limits.json_raw_decode(self.buf, self.at, "it")
            except limits.NotJson:
                if self.eof:
                    raise
                self.more(len(self.buf) - self.at)
                continue
            except InvalidArgument as exc:
                raise _Shape(str(exc)) from None
            if end >= len(self.buf) and not self.eof:
                self.more()
                continue
            self.at = end
            return value

    def end(self) -> None:
        """The file ends here."""
        while self.at >= len(self.buf) and not self.eof:
            self.more()
        if self.at < len(self.buf):
            raise NotAsWritten

    def drained(self) -> bool:
        """Whether the file, read to its end, has the payload its digest was taken of."""
        while not self.eof:
            data = self.fh.read(_CHUNK)
            if not data:
                break
            held = self.held + data
            self.sha.update(held[:-2])
            self.held = held[-2:]
        return self.held == b"}\n" and self.sha.hexdigest() == self.digest


def parse(data: bytes, source: str) -> Snapshot:
    """Validate a snapshot file's bytes; ``source`` names it in error messages."""
    try:
        doc = limits.json_loads(data, "it", margin=STRUCTURE_DEPTH)
    except limits.NotJson:
        raise SnapshotError(f"{source} is not a snapshot: not valid JSON (truncated or damaged?)") from None
    except InvalidArgument as exc:
        raise SnapshotError(f"{source} is not a snapshot: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise SnapshotError(f"{source} is not a Procession snapshot")
    if doc.get("version") not in READ or isinstance(doc.get("version"), bool):
        raise SnapshotError(f"{source} is snapshot version {doc.get('version')!r}; this Procession reads"
                            f" versions {' and '.join(map(str, READ))}")
    payload = doc.get("payload")
    if not isinstance(payload, dict) or not isinstance(doc.get("sha256"), str):
        raise SnapshotError(f"{source} is not a complete snapshot (no payload or no hash)")
    digest = doc["sha256"]
    if not _hashed_as_written(data, digest) and hashlib.sha256(canonical_bytes(payload)).hexdigest() != digest:
        raise SnapshotError(f"{source} does not match its content hash: it was altered or damaged")
    try:
        return _validate(payload)
    except (SnapshotError, InvalidArgument) as exc:
        raise SnapshotError(f"{source} is not a valid snapshot: {exc}") from None


def _hashed_as_written(data: bytes, digest: str) -> bool:
    """Whether the file is laid out as ``dump`` writes it and its payload's bytes, as they
    stand, have the digest: then they are the canonical bytes the digest was taken of (and
    the payload parsed from them is that payload), and nothing needs serialising again. A
    file rewritten by another tool (indented, keys reordered) is checked the slow way."""
    head = _head(digest)
    return (data.startswith(head) and data.endswith(b"}\n")
            and hashlib.sha256(memoryview(data)[len(head):-2]).hexdigest() == digest)


def _need(cond: bool, what: str) -> None:
    if not cond:
        raise SnapshotError(what)


#: Keys of a session that files written before agent sessions (and before bounds) do not have.
AGENT_KEYS: Final = frozenset({"env", "passed", "agent_ref", "agent_seen", "cwd", "agent_session", "confine", "net",
                                  "permissions"})


def _keys(obj: dict[str, Any], keys: set[str], what: str, optional: frozenset[str] = frozenset()) -> None:
    """An object has exactly these keys (and maybe the optional ones): a file either says
    everything we write, or is not ours."""
    missing, extra = keys - obj.keys(), obj.keys() - keys - optional
    _need(not missing, f"{what} lacks {', '.join(sorted(missing))}")
    _need(not extra, f"{what} has unknown {', '.join(sorted(extra))}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


def _text(v: Any, what: str, *, empty: bool = True) -> str:
    _need(isinstance(v, str) and (empty or bool(v.strip())), f"{what} must be {'a' if empty else 'a non-empty'} string")
    return str(v)


def _validate(p: dict[str, Any]) -> Snapshot:
    _keys(p, set(PARTS), "the payload")
    session = _session(p["session"])
    messages = p["messages"]
    _need(isinstance(messages, list), "messages must be a list")
    for i, m in enumerate(messages, start=1):
        _message(m, i)
    folds = _folds(p["folds"])
    _fold_ranges(folds, len(messages))
    return Snapshot(session, messages, folds, _memory(p["memory"]), _resources(p["resources"]),
                    _triggers(p["triggers"]))


def _session(s: Any) -> dict[str, Any]:
    _need(isinstance(s, dict), "session must be an object")
    _keys(s, {"uuid", "name", "agent", "goal", "system", "priority", "runner", "window", "timeout", "created"},
          "session", optional=AGENT_KEYS)
    env = s.get("env", {})
    _need(isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()),
          "session.env must be an object of strings")
    for key, value in env.items():
        if key in environ.RESERVED:  # an older version's (TMPDIR): loaded without it
            environ.name(key, reserved=True)
            continue
        environ.setting(f"{key}={value}")
    passed = s.get("passed", [])
    _need(isinstance(passed, list) and all(isinstance(k, str) for k in passed), "session.passed must be a list of names")
    for key in passed:
        environ.name(key)
    ref = s.get("agent_ref")
    _need(ref is None or (isinstance(ref, dict) and isinstance(ref.get("cli"), str) and isinstance(ref.get("id"), str)),
          "session.agent_ref must be an object with cli and id")
    _need(_is_int(s.get("agent_seen", 0)) and s.get("agent_seen", 0) >= 0, "session.agent_seen must be an integer")
    _need(s.get("agent_session") is None or (isinstance(s["agent_session"], dict) and ref is not None),
          "session.agent_session must be an object, beside an agent_ref")
    _need(s.get("cwd") is None or (isinstance(s["cwd"], str) and s["cwd"].startswith("/")),
          "session.cwd must be an absolute path")
    _need(s.get("confine", bounds.BOUND) in bounds.CONFINES, f"session.confine must be one of {', '.join(bounds.CONFINES)}")
    _need(s.get("net", bounds.ANY) in bounds.NETS, f"session.net must be one of {', '.join(bounds.NETS)}")
    _need(s.get("permissions", bounds.BOUND) in bounds.PERMISSIONS,
          f"session.permissions must be one of {', '.join(bounds.PERMISSIONS)}")
    for key in ("name", "agent"):
        _text(s.get(key), f"session.{key}", empty=False)
    for key in ("goal", "system", "runner", "uuid"):
        _text(s.get(key), f"session.{key}")
    runner_spec.parse(s["runner"])
    _need(_is_int(s.get("priority")), "session.priority must be an integer")
    limits.priority(s["priority"])
    _need(_is_int(s.get("window")), "session.window must be an integer")
    limits.window(s["window"])
    limits.name(s["name"], "session.name")
    limits.name(s["agent"], "session.agent")
    _need(s.get("timeout") is None or (_is_num(s["timeout"]) and s["timeout"] > 0), "session.timeout is bad")
    _need(_is_num(s.get("created")), "session.created must be a time")
    return cast("dict[str, Any]", s)


_MESSAGE_KEYS: Final = frozenset({"seq", "role", "content", "author", "pinned", "created", "meta"})


def _message(m: Any, i: int) -> None:
    """Message ``i`` is one: the common case (no meta) checked in one expression, since a
    history may hold millions; anything else the long way, which says what is wrong."""
    if (type(m) is dict and m.keys() == _MESSAGE_KEYS and m["meta"] is None and m["seq"] == i
            and m["role"] in limits.ROLES and type(m["content"]) is str and type(m["author"]) is str
            and type(m["pinned"]) is bool and type(m["created"]) is float and math.isfinite(m["created"])):
        return
    _shape(m, STRUCTURE_DEPTH - 3)
    _need(isinstance(m, dict), f"message {i} must be an object")
    _keys(m, set(_MESSAGE_KEYS), f"message {i}")
    _need(m.get("seq") == i, f"message {i} is out of order")
    _need(m.get("role") in limits.ROLES, f"message {i} has a bad role")
    _text(m.get("content"), f"message {i} content")
    _text(m.get("author"), f"message {i} author")
    _need(isinstance(m.get("pinned"), bool), f"message {i} pinned must be true or false")
    _need(_is_num(m.get("created")), f"message {i} created must be a time")
    _need(m.get("meta") is None or isinstance(m["meta"], dict), f"message {i} meta must be an object")
    if m["meta"] is not None:
        limits.json_value(m["meta"], f"message {i} meta")


def _folds(folds: Any) -> list[dict[str, Any]]:
    _need(isinstance(folds, list), "folds must be a list")
    for i, f in enumerate(folds, start=1):
        _need(isinstance(f, dict), f"fold {i} must be an object")
        _keys(f, {"lo", "hi", "summary"}, f"fold {i}", optional=frozenset({"created"}))
        _need(_is_int(f.get("lo")) and _is_int(f.get("hi")), f"fold {i} range must be integers")
        created = f.get("created", 0.0)
        _need(isinstance(created, int | float) and not isinstance(created, bool) and math.isfinite(created),
              f"fold {i} created must be a time")
        _text(f.get("summary"), f"fold {i} summary")
    return cast("list[dict[str, Any]]", folds)


def _fold_ranges(folds: list[dict[str, Any]], length: int) -> None:
    for i, f in enumerate(folds, start=1):
        _need(1 <= f["lo"] <= f["hi"] <= length, f"fold {i} range is outside the history")


def _memory(memory: Any) -> dict[str, Any]:
    _need(isinstance(memory, dict), "memory must be an object")
    for key, value in memory.items():
        limits.name(key, "a memory key", limits.KEY_MAX)
        limits.json_value(value, f"the value of memory key {key!r}")
    return cast("dict[str, Any]", memory)


def _resources(resources: Any) -> list[dict[str, Any]]:
    _need(isinstance(resources, list), "resources must be a list")
    for i, r in enumerate(resources, start=1):
        _need(isinstance(r, dict), f"resource {i} must be an object")
        _keys(r, {"kind", "uri", "mode"}, f"resource {i}")
        _need(isinstance(r.get("kind"), str), f"resource {i} kind must be a string")
        r["kind"] = limits.KIND_ALIASES.get(r["kind"], r["kind"])
        _need(r["kind"] in limits.RESOURCE_KINDS, f"resource {i} has a bad kind")
        if r["kind"] in limits.PATH_KINDS:
            _need(isinstance(r.get("uri"), str) and r["uri"].startswith("/") and "/../" not in f"{r['uri']}/",
                  f"resource {i} must be an absolute path")
        _text(r.get("uri"), f"resource {i} uri", empty=False)
        _need(r.get("mode") in limits.RESOURCE_MODES, f"resource {i} mode must be ro or rw")
    return cast("list[dict[str, Any]]", resources)


def _triggers(trigs: Any) -> list[dict[str, Any]]:
    _need(isinstance(trigs, list), "triggers must be a list")
    for i, t in enumerate(trigs, start=1):
        _need(isinstance(t, dict), f"trigger {i} must be an object")
        _keys(t, {"kind", "spec"}, f"trigger {i}")
        _need(t["kind"] in trigger_spec.KINDS, f"trigger {i} has a bad kind")
        _need(isinstance(t.get("spec"), dict), f"trigger {i} spec must be an object")
    return cast("list[dict[str, Any]]", trigs)


#: How each part but the messages is checked, read alone.
_PARTS: Final = {"session": _session, "folds": _folds, "memory": _memory, "resources": _resources,
                 "triggers": _triggers}
