"""Portable snapshot files: one session as versioned JSON with a content hash.

The file is ``{"format": FORMAT, "version": VERSION, "sha256": H, "payload": {...}}`` where
``H`` is the SHA-256 of the payload's canonical JSON. ``parse`` accepts a file only if it
is exactly that: the right format and version, an intact hash, and a payload whose every
field has the right type and whose history, folds and triggers make sense. Anything else
is a ``SnapshotError`` with one line, raised before the store is touched. Token counts are
not trusted from the file: the loading workspace recounts with its own counter.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Final

from ..model import environ, limits, runner_spec, trigger_spec
from ..model.errors import InvalidArgument, SnapshotError

FORMAT: Final = "procession.snapshot"
VERSION: Final = 1


#: How much deeper than the values it carries (memory values, a message's meta, a trigger's
#: spec) the file's own structure nests: the file, its payload, a list, an item.
STRUCTURE_DEPTH: Final = 4


def canonical_bytes(payload: dict[str, Any]) -> bytes:
    """The payload's one text form; never NaN or Infinity, which no JSON reader takes back (a
    workspace may hold one, or a value too deep to write, stored before they were refused)."""
    try:
        text = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (ValueError, RecursionError):
        raise SnapshotError("the session holds a value that is not JSON (NaN or Infinity) or is nested too deep"
                            " to write, stored before such values were refused; set it again to save") from None
    return text.encode("utf-8", "surrogatepass")


def dump(payload: dict[str, Any]) -> bytes:
    """The file's bytes for ``payload``."""
    body = canonical_bytes(payload)
    digest = hashlib.sha256(body).hexdigest()
    head = json.dumps({"format": FORMAT, "version": VERSION, "sha256": digest}, separators=(",", ":"))
    return head[:-1].encode() + b',"payload":' + body + b"}\n"


@dataclass(slots=True, frozen=True)
class Snapshot:
    """A validated payload."""

    session: dict[str, Any]
    messages: list[dict[str, Any]]
    folds: list[dict[str, Any]]
    memory: dict[str, Any]
    resources: list[dict[str, Any]]
    triggers: list[dict[str, Any]]


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
    if doc.get("version") != VERSION:
        raise SnapshotError(
            f"{source} is snapshot version {doc.get('version')!r}; this Procession reads version {VERSION}"
        )
    payload = doc.get("payload")
    if not isinstance(payload, dict) or not isinstance(doc.get("sha256"), str):
        raise SnapshotError(f"{source} is not a complete snapshot (no payload or no hash)")
    if hashlib.sha256(canonical_bytes(payload)).hexdigest() != doc["sha256"]:
        raise SnapshotError(f"{source} does not match its content hash: it was altered or damaged")
    try:
        return _validate(payload)
    except (SnapshotError, InvalidArgument) as exc:
        raise SnapshotError(f"{source} is not a valid snapshot: {exc}") from None


def _need(cond: bool, what: str) -> None:
    if not cond:
        raise SnapshotError(what)


#: Keys of a session that files written before agent sessions do not have.
AGENT_KEYS: Final = frozenset({"env", "passed", "agent_ref", "agent_seen"})


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
    _keys(p, {"session", "messages", "folds", "memory", "resources", "triggers"}, "the payload")
    s = p["session"]
    _need(isinstance(s, dict), "session must be an object")
    _keys(s, {"uuid", "name", "agent", "goal", "system", "priority", "runner", "window", "timeout", "created"},
          "session", optional=AGENT_KEYS)
    env = s.get("env", {})
    _need(isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()),
          "session.env must be an object of strings")
    for key, value in env.items():
        environ.setting(f"{key}={value}")
    passed = s.get("passed", [])
    _need(isinstance(passed, list) and all(isinstance(k, str) for k in passed), "session.passed must be a list of names")
    for key in passed:
        environ.name(key)
    ref = s.get("agent_ref")
    _need(ref is None or (isinstance(ref, dict) and isinstance(ref.get("cli"), str) and isinstance(ref.get("id"), str)),
          "session.agent_ref must be an object with cli and id")
    _need(_is_int(s.get("agent_seen", 0)) and s.get("agent_seen", 0) >= 0, "session.agent_seen must be an integer")
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

    messages = p["messages"]
    _need(isinstance(messages, list), "messages must be a list")
    for i, m in enumerate(messages, start=1):
        _need(isinstance(m, dict), f"message {i} must be an object")
        _keys(m, {"seq", "role", "content", "author", "pinned", "created", "meta"}, f"message {i}")
        _need(m.get("seq") == i, f"message {i} is out of order")
        _need(m.get("role") in limits.ROLES, f"message {i} has a bad role")
        _text(m.get("content"), f"message {i} content")
        _text(m.get("author"), f"message {i} author")
        _need(isinstance(m.get("pinned"), bool), f"message {i} pinned must be true or false")
        _need(_is_num(m.get("created")), f"message {i} created must be a time")
        _need(m.get("meta") is None or isinstance(m["meta"], dict), f"message {i} meta must be an object")
        if m["meta"] is not None:
            limits.json_value(m["meta"], f"message {i} meta")

    folds = p["folds"]
    _need(isinstance(folds, list), "folds must be a list")
    for i, f in enumerate(folds, start=1):
        _need(isinstance(f, dict), f"fold {i} must be an object")
        _keys(f, {"lo", "hi", "summary"}, f"fold {i}")
        _need(_is_int(f.get("lo")) and _is_int(f.get("hi")), f"fold {i} range must be integers")
        _need(1 <= f["lo"] <= f["hi"] <= len(messages), f"fold {i} range is outside the history")
        _text(f.get("summary"), f"fold {i} summary")

    memory = p["memory"]
    _need(isinstance(memory, dict), "memory must be an object")
    for key, value in memory.items():
        limits.name(key, "a memory key", limits.KEY_MAX)
        limits.json_value(value, f"the value of memory key {key!r}")

    resources = p["resources"]
    _need(isinstance(resources, list), "resources must be a list")
    for i, r in enumerate(resources, start=1):
        _need(isinstance(r, dict), f"resource {i} must be an object")
        _keys(r, {"kind", "uri", "mode"}, f"resource {i}")
        _need(r.get("kind") in limits.RESOURCE_KINDS, f"resource {i} has a bad kind")
        if r["kind"] in limits.PATH_KINDS:
            _need(isinstance(r.get("uri"), str) and r["uri"].startswith("/") and "/../" not in f"{r['uri']}/",
                  f"resource {i} must be an absolute path")
        _text(r.get("uri"), f"resource {i} uri", empty=False)
        _need(r.get("mode") in limits.RESOURCE_MODES, f"resource {i} mode must be ro or rw")

    trigs = p["triggers"]
    _need(isinstance(trigs, list), "triggers must be a list")
    for i, t in enumerate(trigs, start=1):
        _need(isinstance(t, dict), f"trigger {i} must be an object")
        _keys(t, {"kind", "spec"}, f"trigger {i}")
        _need(t["kind"] in trigger_spec.KINDS, f"trigger {i} has a bad kind")
        _need(isinstance(t.get("spec"), dict), f"trigger {i} spec must be an object")
    return Snapshot(s, messages, folds, memory, resources, trigs)
