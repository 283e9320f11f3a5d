"""The runner protocol: one JSON document in, plain text or JSON Lines events out.

A step receives on stdin::

    {"protocol": 1,
     "session": {"id", "uuid", "name", "agent", "goal"},
     "run": {"id", "cause": [...]},
     "system": "...",
     "messages": [{"seq", "role", "content", "author"[, "tool"]}],
     "memory": {...},
     "resources": [{"kind", "uri", "mode"}]}

(a tool call's message carries the structured call, ``tool``: {id, name, input, output,
output_size, is_error}), and answers on stdout either with plain text (one assistant message) or, when its first
non-blank line is a JSON object with a ``type``, with one event per line:

    {"type": "message", "role": "assistant", "content": "..."}
    {"type": "memory", "set": {"key": value}, "delete": ["key"]}
    {"type": "send", "to": 12, "text": "..."}
    {"type": "usage", "in": 1200, "out": 80[, "counted": 1010]}
    {"type": "tool", "id": "c1", "name": "read", "input": {...}, "output": "...", "is_error": false}
    {"type": "status", "text": "what the step is doing now"}
    {"type": "note", "text": "what the run's record should say"}
    {"type": "done"}                      (the session terminates, reason done)

A usage event's ``counted`` is the runner's own count of the prompt it sent, in the
workspace's counter (the ``openai:`` runner's): with the server's ``in`` it calibrates how
the session's context is counted (``store.tokens``).

Events are read as they arrive (``Reader``), so that what a running step has said and done
is in the store before it ends. Plain-text output is bounded: ``Output`` keeps the head and
the tail of what a step prints and counts what it cut, so a step that prints a gigabyte
costs a megabyte.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final

from ...model import limits
from ...model.errors import InvalidArgument
from ...model.records import ContextItem
from ...model.toolcalls import tool_message

VERSION: Final = 1
HEAD_BYTES: Final = 512 * 1024
TAIL_BYTES: Final = 512 * 1024
STDERR_TAIL: Final = 4096
#: The longest event line read (a message of more is refused, as the line it is on).
LINE_MAX: Final = 16 * 1024 * 1024
#: How much deeper an event line may nest than the values it carries (``{"set": {key: value}}``).
EVENT_DEPTH: Final = 2


def document(session: dict[str, Any], run: dict[str, Any], system: str, context: list[ContextItem],
             memory: dict[str, Any], resources: list[dict[str, Any]]) -> bytes:
    """The JSON document a step reads on stdin."""
    doc = {
        "protocol": VERSION,
        "session": session,
        "run": run,
        "system": system,
        "messages": [_message(i) for i in context],
        "memory": memory,
        "resources": resources,
    }
    return json.dumps(doc, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _message(item: ContextItem) -> dict[str, Any]:
    out = {"seq": item.seq, "role": item.role, "content": item.content, "author": item.author}
    if item.role == "tool" and item.meta and isinstance(item.meta.get("tool"), dict):
        out["tool"] = item.meta["tool"]
    return out


class Output:
    """The bounded output of a step: the first ``head`` bytes, the last ``tail`` bytes."""

    def __init__(self, head: int = HEAD_BYTES, tail: int = TAIL_BYTES) -> None:
        self.head_limit, self.tail_limit = head, tail
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.tail_limit:
                del self.tail[: len(self.tail) - self.tail_limit]

    @property
    def cut(self) -> int:
        return self.total - len(self.head) - len(self.tail)

    def text(self) -> str:
        """All that was kept, with a marker where the middle was cut."""
        head = self.head.decode("utf-8", "replace")
        if not self.tail:
            return head
        tail = self.tail.decode("utf-8", "replace")
        if self.cut:
            return f"{head}\n[… {self.cut} bytes of output cut …]\n{tail}"
        return head + tail


@dataclass(slots=True)
class Events:
    """What a step's output asks for, once parsed."""

    #: (role, content, meta): meta holds what an agent CLI said of it (a tool call, its own id)
    messages: list[tuple[str, str, dict[str, Any] | None]] = field(default_factory=list)
    memory_set: dict[str, Any] = field(default_factory=dict)
    memory_delete: list[str] = field(default_factory=list)
    sends: list[tuple[int, str]] = field(default_factory=list)
    tokens_in: int = 0
    tokens_out: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost: float = 0.0  # US dollars, as an agent CLI reported its run's cost (0: it did not)
    #: prompt tokens the server reported and Procession counted, summed over the requests
    #: (``calibrated``) whose usage said both: they calibrate the session's context figure
    reported: int = 0
    counted: int = 0
    calibrated: int = 0
    done: bool = False
    problems: list[str] = field(default_factory=list)
    #: what an agent CLI says of itself that is not how the run ended (its warnings, its
    #: diagnostics): the run's log keeps it, its reason does not
    diagnostics: list[str] = field(default_factory=list)
    #: a reply that is not an event: a plain-text output, or what an HTTP step had received
    #: when it was stopped (it joins the history only if the run ended ok, interrupted or timed out)
    reply: str = ""
    #: an agent CLI's own session, the moment it announces it ({"cli", "id", "cwd", "transcript"})
    agent_ref: dict[str, Any] | None = None
    #: the agent's context as it last reported it: (tokens, window or None)
    context: tuple[int, int | None] | None = None
    #: what the agent reference gains when the run ended (``follow.settle``): its transcript's
    #: path and the position read to, so that what the run stored is never synced again
    followed: dict[str, Any] | None = None
    status: str | None = None  # what the agent is doing now (its last tool call or message)

    def __bool__(self) -> bool:
        return bool(self.messages or self.memory_set or self.memory_delete or self.sends or self.tokens_in
                    or self.tokens_out or self.cost or self.cache_read or self.cache_write or self.done or self.problems
                    or self.diagnostics or self.reply or self.agent_ref or self.context or self.status)

    def journal(self) -> dict[str, Any]:
        """What the journal keeps of a step's output: counts and keys, not contents."""
        data = {"messages": len(self.messages), "memory_set": sorted(self.memory_set),
                "memory_delete": self.memory_delete, "sends": [to for to, _ in self.sends],
                "tokens_in": self.tokens_in, "tokens_out": self.tokens_out, "done": self.done}
        if self.agent_ref:
            data["agent_ref"] = self.agent_ref.get("id")
        return data

    def add(self, later: Events) -> None:
        """Append ``later``'s events to these, in order (the later memory change of a key wins)."""
        self.messages += later.messages
        for key, value in later.memory_set.items():
            self.memory_set[key] = value
            if key in self.memory_delete:
                self.memory_delete.remove(key)
        for key in later.memory_delete:
            self.memory_set.pop(key, None)
            self.memory_delete.append(key)
        self.sends += later.sends
        self.tokens_in += later.tokens_in
        self.tokens_out += later.tokens_out
        self.cost += later.cost
        self.cache_read += later.cache_read
        self.cache_write += later.cache_write
        self.reported += later.reported
        self.counted += later.counted
        self.calibrated += later.calibrated
        self.done = self.done or later.done
        self.problems += later.problems
        self.diagnostics += later.diagnostics
        self.agent_ref = later.agent_ref or self.agent_ref
        self.context = later.context or self.context
        self.followed = later.followed or self.followed
        self.status = later.status or self.status


class Reader:
    """A step's stdout, read as it arrives.

    The first non-blank line decides: a JSON object with a ``type`` makes the output JSON Lines
    events, each applied as soon as its line is complete (``take`` hands over those read so
    far, so that the engine commits them while the step still runs); anything else makes the
    whole output one plain-text message, bounded like ``Output``, handed over at the end
    (``close``). A last line cut off without its newline (the step died mid-line) is parsed if it
    is a whole event and reported as a problem if not.
    """

    reports_cost = False  # a step's events carry tokens, never a cost: the price table says it (``model.prices``)

    def __init__(self) -> None:
        self.mode: str | None = None  # "events" | "text"
        self.partial = bytearray()
        self.text = Output()
        self.pending = Events()
        self.line = 0
        self.skipping = False  # within an event line longer than LINE_MAX, until its newline

    def feed(self, chunk: bytes) -> None:
        if self.mode == "text":
            self.text.feed(chunk)
            return
        self.partial += chunk
        while (end := self.partial.find(b"\n")) >= 0:
            line = bytes(self.partial[:end])
            del self.partial[: end + 1]
            if self.skipping:
                self.skipping = False
                continue
            self._line(line, complete=True)
            if self.mode == "text":  # decided on this line: the rest is text as it came
                self.text.feed(bytes(self.partial))
                self.partial.clear()
                return
        if len(self.partial) > HEAD_BYTES and self.mode is None:  # one huge first line: text
            self.mode = "text"
            self.text.feed(bytes(self.partial))
            self.partial.clear()
        elif len(self.partial) > LINE_MAX or (self.skipping and self.partial):
            if not self.skipping:
                self.line += 1
                self.pending.problems.append(f"line {self.line}: longer than {LINE_MAX >> 20} MiB; ignored")
            self.skipping = True
            self.partial.clear()

    def _line(self, raw: bytes, *, complete: bool) -> None:
        self.line += 1
        line = raw.decode("utf-8", "replace")
        if self.mode is None:
            if not line.strip():
                self.text.feed(raw + b"\n")
                return
            if not _is_event(line):
                self.mode = "text"
                self.text.feed(raw + (b"\n" if complete else b""))
                return
            self.mode = "events"
        if not line.strip():
            return
        try:
            event = limits.json_loads(line, f"line {self.line}", margin=EVENT_DEPTH)
        except limits.NotJson:
            self.pending.problems.append(f"line {self.line}: not JSON" if complete else
                                         f"line {self.line}: cut off before its end (the step stopped mid-line)")
            return
        except InvalidArgument as exc:
            self.pending.problems.append(f"{exc}; ignored")
            return
        if not isinstance(event, dict):
            self.pending.problems.append(f"line {self.line}: not an event object")
            return
        _apply(event, self.pending, self.line)

    def take(self) -> Events:
        """The events read since the last ``take``."""
        events, self.pending = self.pending, Events()
        return events

    def close(self) -> Events:
        """The end of the output: what is left, and a plain-text output's one message."""
        if self.partial and not self.skipping:
            rest, self.partial = bytes(self.partial), bytearray()
            if self.mode == "text":
                self.text.feed(rest)
            else:
                self._line(rest, complete=False)
        events = self.take()
        if self.mode in (None, "text"):
            text = self.text.text()
            if text.strip():
                events.reply = text.rstrip("\n")
            if self.text.cut:
                events.problems.append(f"{self.text.cut} bytes of output cut (kept the first and last"
                                       f" {HEAD_BYTES // 1024} KiB)")
        return events


def _is_event(line: str) -> bool:
    """Whether the first line looks like an event, so that the output is read as events
    (leniently: each line, this one included, is then parsed strictly)."""
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return False
    return isinstance(obj, dict) and isinstance(obj.get("type"), str)


def _storable(value: Any) -> bool:
    """Whether every string in a JSON value can be stored (no lone surrogates from ``\\udcxx``)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (UnicodeEncodeError, TypeError, ValueError):
        return False
    return True


def _apply(event: dict[str, Any], events: Events, n: int) -> None:
    kind = event.get("type")
    if not _storable(event):
        events.problems.append(f"line {n}: holds text that is not valid Unicode; ignored")
        return
    if kind == "message":
        content, role = event.get("content"), event.get("role", "assistant")
        if isinstance(content, str) and role in ("assistant", "user", "system", "tool"):
            events.messages.append((role, content, None))
        else:
            events.problems.append(f"line {n}: a message needs a content string and a valid role")
    elif kind == "memory":
        sets, deletes = event.get("set", {}), event.get("delete", [])
        if isinstance(sets, dict) and isinstance(deletes, list) and all(isinstance(k, str) for k in deletes):
            for key, value in sets.items():
                try:  # the same checks as the memory call's: a runner is not trusted more than a user
                    limits.name(key, "memory key", limits.KEY_MAX)
                    limits.json_value(value, f"the value of memory key {key!r}")
                except InvalidArgument as exc:
                    events.problems.append(f"line {n}: {exc}; ignored")
                    continue
                events.memory_set[key] = value
            events.memory_delete.extend(deletes)
        else:
            events.problems.append(f"line {n}: memory takes set {{key: value}} and delete [keys]")
    elif kind == "send":
        to, text = event.get("to"), event.get("text")
        if isinstance(to, int) and not isinstance(to, bool) and isinstance(text, str):
            events.sends.append((to, text))
        else:
            events.problems.append(f"line {n}: send takes to (a session id) and text")
    elif kind == "usage":
        for key, attr in (("in", "tokens_in"), ("out", "tokens_out")):
            value = event.get(key, 0)
            if isinstance(value, int) and value >= 0:
                setattr(events, attr, getattr(events, attr) + value)
        reported, counted = event.get("in"), event.get("counted")
        if isinstance(reported, int) and isinstance(counted, int) and reported > 0 and counted > 0:
            events.reported += reported
            events.counted += counted
            events.calibrated += 1
    elif kind == "tool":
        name, call_id, output = event.get("name"), event.get("id", ""), event.get("output")
        if isinstance(name, str) and isinstance(call_id, str) and (output is None or isinstance(output, str)):
            events.messages.append(tool_message(call_id, name, event.get("input"), output,
                                                bool(event.get("is_error"))))
        else:
            events.problems.append(f"line {n}: a tool event needs a name, an id and an output string (or null)")
    elif kind == "status":
        if isinstance(event.get("text"), str):
            events.status = event["text"]
    elif kind == "note":  # something the run's record should say (a limit it stopped at)
        if isinstance(event.get("text"), str):
            events.problems.append(event["text"])
    elif kind == "done":
        events.done = True
    else:
        events.problems.append(f"line {n}: unknown event type {kind!r}")
