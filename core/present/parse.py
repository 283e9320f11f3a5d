"""What a person types, read once for every face: paths, JSON values, ``KEY=JSON``, trigger
words, transcripts. A mistake is an ``InvalidArgument`` with one line that says how to
write it right; nothing here touches the store."""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

import orjson

from ..model import limits
from ..model.errors import InvalidArgument

if TYPE_CHECKING:
    from ..calls.merge import Resolution


#: How much of a mistyped value a refusal quotes back.
QUOTED_MAX = 60


class Malformed(InvalidArgument):
    """The shape of what was typed is wrong (``--set`` without ``=``): a usage mistake, not a
    refusal of what it says."""


def here(path: str) -> str:
    """A path the user typed, made absolute against the folder they typed it in, as every
    shell command reads it (an engine would read it against the session's folder)."""
    return os.path.abspath(os.path.expanduser(path))


def local_paths(kind: str, words: Sequence[str]) -> list[str]:
    """The words of a bind, a watch or a commit trigger with their paths made absolute here;
    other words as typed."""
    return [here(w) for w in words] if kind in (*limits.PATH_KINDS, "watch", "commit") else list(words)


def path_map(items: Sequence[str], *, here_: bool = True) -> dict[str, str]:
    """``--map OLD=NEW`` pairs (``load``, ``move``): paths of this machine made absolute here
    (``here_``); else paths of another host, taken as typed and refused unless absolute."""
    found = {}
    for item in items:
        old, sep, new = item.partition("=")
        if not sep or not old or not new:
            raise Malformed(f"--map takes OLD=NEW, not {item[:QUOTED_MAX]!r}")
        if here_:
            old, new = here(old), here(new)
        elif not (os.path.isabs(old) and os.path.isabs(new)):
            raise Malformed(f"--map takes absolute paths, OLD=NEW (OLD where it is, NEW on the other host):"
                            f" {item[:QUOTED_MAX]!r}")
        found[old] = new
    return found


def json_value(text: str, what: str = "the value") -> Any:
    """A JSON value typed by a person, read strictly (``limits.json_loads``); a mistake says
    how to write text: what was typed (its start) as a JSON string, which is valid JSON
    itself, its quotes and backslashes escaped (quotes put around it were not, where it held one)."""
    try:
        return limits.json_loads(text, what)
    except limits.NotJson:
        shown = text if len(text) <= QUOTED_MAX else text[:QUOTED_MAX] + "…"
        raise InvalidArgument(f"{what} must be JSON; for text, quote it: {json.dumps(shown, ensure_ascii=False)}"
                              ) from None


def json_object(text: str, file: str) -> dict[str, Any]:
    """One JSON object read from ``file`` (``-``: standard input), strictly, or a one-line refusal."""
    what = "standard input" if file == "-" else file
    try:
        value = limits.json_loads(text, what, margin=1)  # the object holding the values is one level
    except limits.NotJson:
        raise InvalidArgument(f"{what} is not JSON") from None
    if not isinstance(value, dict):
        raise InvalidArgument(f"{what} must hold one JSON object (keys and their values)")
    return value


def key_json(item: str, flag: str = "--set") -> tuple[str, str]:
    """``KEY=JSON`` as the key and the value's canonical JSON text (checked as a memory value)."""
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise Malformed(f"{flag} takes KEY=JSON, got {item!r}")
    what = f"{flag} {key}: the value"
    return key, limits.json_value(json_value(raw, what), what)


def key_side(item: str) -> tuple[str, str]:
    """``KEY=ours`` or ``KEY=theirs``."""
    key, _, side = item.partition("=")
    if side not in ("ours", "theirs") or not key:
        raise Malformed(f"--pick takes KEY=ours or KEY=theirs, got {item!r}")
    return key, side


def memory_edit(text: str) -> tuple[str, Any] | str:
    """The monitor's memory line: ``KEY=JSON`` sets (a pair), ``-KEY`` deletes (the key)."""
    if text.startswith("-") and "=" not in text:
        return text[1:]
    key, sep, raw = text.partition("=")
    if not sep:
        raise Malformed("write KEY=JSON to set a key, -KEY to delete one")
    return key.strip(), json_value(raw.strip(), f"{key.strip()}: the value")


@dataclass(slots=True, frozen=True)
class TriggerWords:
    """A trigger typed on one line: its words, and the options the CLI would take."""

    args: list[str]
    debounce_ms: int | None = None
    branch: str | None = None
    paths: list[str] = field(default_factory=list)


def trigger_options(typed: Sequence[str]) -> TriggerWords:
    """``--debounce MS``, ``--branch B`` and ``--path GLOB`` (repeatable) out of a trigger's
    words, as ``trigger add`` reads them; the other words as they are."""
    args: list[str] = []
    debounce, branch, paths = None, None, []
    items = iter(typed)
    for word in items:
        flag, eq, given = word.partition("=")
        if flag not in ("--debounce", "--branch", "--path"):
            args.append(word)
            continue
        value = given if eq else next(items, None)
        if value is None:
            raise Malformed(f"{flag} needs a value")
        if flag == "--debounce":
            if not value.isdigit():
                raise Malformed(f"--debounce takes milliseconds, not {value!r}")
            debounce = int(value)
        elif flag == "--branch":
            branch = value
        else:
            paths.append(value)
    return TriggerWords(args, debounce, branch, paths)


def words(text: str) -> list[str]:
    """A line split as a shell would (quotes keep spaces)."""
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise InvalidArgument(f"cannot read that line: {exc}") from None


def text_message(text: str) -> str:
    """A message typed on a command line or in a prompt: an empty one is a mistake."""
    if not text.strip():
        raise InvalidArgument("the message is empty (an empty one is likely a mistake)")
    return text


#: What JSON takes for white space.
_BLANK = re.compile(r"[ \t\n\r]*")


def _blanks(line: str, at: int) -> int:
    """Where the white space from ``at`` ends."""
    found = _BLANK.match(line, at)
    return found.end() if found else at


#: The longest line of a JSON Lines transcript, in characters: one message of the largest
#: text the store keeps, with room for its escapes and fields. A line is never read past it
#: (standard input from ``/dev/zero`` has no end of line).
JSONL_LINE_MAX = 2 * limits.TEXT_MAX


def jsonl(fh: IO[str], name: str) -> Iterator[dict[str, Any]]:
    """The objects of a JSON Lines transcript, one a line (blank lines skipped), read as they
    are taken, each refused (naming its line) as ``limits.json_loads`` would refuse it, and a
    line longer than ``JSONL_LINE_MAX`` refused as it is read."""
    try:
        for n, line in enumerate(iter(lambda: fh.readline(JSONL_LINE_MAX + 1), ""), start=1):
            if len(line) > JSONL_LINE_MAX:
                raise InvalidArgument(f"{name} line {n} is longer than {JSONL_LINE_MAX >> 20} Mi characters; refused")
            start = 0 if line[:1] == "{" else _blanks(line, 0)
            if start == len(line):
                continue
            try:  # orjson reads a well-formed line (the usual one) in a third of the time
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:  # the standard library's strict parse says what is wrong
                obj = None
            if type(obj) is not dict or limits.widened(obj):  # an integer past 64 bits: json keeps it
                try:
                    obj, end = limits.json_raw_decode(line, start, f"{name} line {n}")
                except limits.NotJson:
                    raise InvalidArgument(f"{name} line {n}: not a JSON object") from None
                if not isinstance(obj, dict) or (line[end:] != "\n" and _blanks(line, end) != len(line)):
                    raise InvalidArgument(f"{name} line {n}: not a JSON object")
            limits.json_shape(obj, f"{name} line {n}")
            yield obj
    except UnicodeDecodeError:
        raise InvalidArgument(f"{name} is not UTF-8 text") from None


def history_range(text: str) -> tuple[int, int | None]:
    """``A:B``: history positions A to B, both included; either end may be left out. As
    ``(after, upto)``: the messages after ``after`` up to ``upto``."""
    lo, sep, hi = text.partition(":")
    try:
        first = int(lo) if lo else 1
        last = int(hi) if hi else None
    except ValueError:
        raise InvalidArgument(f"not a range A:B of positions: {text!r}") from None
    if not sep or first < 1 or (last is not None and last < first):
        raise InvalidArgument(f"not a range A:B of positions (1 <= A <= B): {text!r}")
    return first - 1, last


def history_window(after: int, limit: int | None, positions: tuple[int, int | None] | None) -> tuple[int, int | None]:
    """What ``history`` reads: the messages after ``after`` (and within ``positions``), at most
    ``limit`` of them."""
    lo, hi = positions if positions else (0, None)
    lo = max(lo, after)
    if limit is not None:
        hi = lo + limit if hi is None else min(hi, lo + limit)
    return lo, hi


#: ``--ours`` / ``--theirs`` given without a path: every conflict.
ALL = ""


def resolution(ours: Sequence[str], theirs: Sequence[str], values: Sequence[str], picks: Sequence[str],
               flags: str = "--", usage: type[Exception] = InvalidArgument) -> "Resolution":
    """How a merge's conflicts are settled, from ``--ours``/``--theirs`` (``ALL``, or paths),
    ``--set KEY=JSON`` and ``--pick KEY=ours|theirs`` (named ``flags`` + ours... in refusals:
    the MCP face's fields have no dashes; sides given both ways raise ``usage``)."""
    from ..calls.merge import Resolution

    if ALL in ours and ALL in theirs:
        raise usage(f"give {flags}ours or {flags}theirs, not both")
    if (set(ours) & set(theirs)) - {ALL}:
        raise usage(f"a path is given to both {flags}ours and {flags}theirs")
    files = {p: "ours" for p in ours if p != ALL} | {p: "theirs" for p in theirs if p != ALL}
    side = "ours" if ALL in ours else "theirs" if ALL in theirs else None
    return Resolution(side, dict(key_side(item) for item in picks), dict(key_json(item) for item in values), files)
