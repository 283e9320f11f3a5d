"""What a user may pass: names, texts and numbers are checked here, once, for every face.

Names (sessions, agents, checkpoints, memory keys) are short labels shown in a table, so
control characters are refused. Message texts are the user's content and are stored
exactly as given, control characters included; faces make them safe when they show them.
Only text that is not Unicode at all (invalid bytes) is refused, since it cannot be stored
as the UTF-8 the store holds.

JSON values (memory values, ``--set`` values, a runner's memory events, snapshot files,
transcripts) are checked here too, where they enter: a value nested deeper than
``JSON_DEPTH`` or larger than its size limit would be stored and then break every later
step that encodes it (a step's document, a snapshot), so it is refused before it is stored.
``json_loads`` is the one strict parser for JSON from a person, a file or a runner: NaN and
Infinity (which Python's ``json`` accepts) are not JSON, and neither an integer too long
for Python to convert nor a nesting too deep for its parser is a traceback.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Iterable
from typing import Any, Final

from .errors import InvalidArgument

NAME_MAX: Final = 200
KEY_MAX: Final = 1024
PRIORITY_MIN: Final = -100
PRIORITY_MAX: Final = 100
WINDOW_MAX: Final = 1 << 31
TEXT_MAX: Final = 64 * 1024 * 1024
ROLES: Final = ("system", "user", "assistant", "tool")
#: ``db`` and ``sqlite`` are alike: the ``openai:`` runner opens either as a SQLite database.
RESOURCE_KINDS: Final = ("file", "folder", "sqlite", "mcp", "tool", "url")
#: Names a kind had before (a script's, a snapshot's): taken as the kind they name now.
KIND_ALIASES: Final = {"db": "sqlite"}
RESOURCE_MODES: Final = ("ro", "rw")
#: Resource kinds whose URI is a path on this machine (stored absolute).
PATH_KINDS: Final = ("file", "folder", "sqlite")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
#: The deepest nesting of lists and objects a JSON value may have (a scalar is depth 0).
JSON_DEPTH: Final = 64
#: The largest memory value (or ``--set`` value), in bytes of its canonical JSON.
JSON_VALUE_MAX: Final = 1 << 20


def is_unicode(value: str) -> bool:
    """Whether the store can keep ``value``: SQLite stores UTF-8, and a lone surrogate (from
    invalid bytes decoded with surrogateescape, or a JSON ``\\udcff`` escape) has no UTF-8 form."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _unicode(value: str, what: str) -> None:
    if not is_unicode(value):
        raise InvalidArgument(f"{what} is not valid Unicode text (it holds a lone surrogate)")


def name(value: str, what: str = "name", limit: int = NAME_MAX) -> str:
    if not isinstance(value, str):  # from JSON: 5 is no name, and no empty one either
        raise InvalidArgument(f"{what} must be a name (a string)")
    if not value.strip():
        raise InvalidArgument(f"{what} must not be empty")
    _unicode(value, what)
    if len(value) > limit:
        raise InvalidArgument(f"{what} is longer than {limit} characters")
    if _CONTROL.search(value):
        raise InvalidArgument(f"{what} must not contain control characters")
    return value


def text(value: str, what: str = "text") -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"{what} must be text")
    if len(value) > TEXT_MAX:
        raise InvalidArgument(f"{what} is larger than {TEXT_MAX // (1024 * 1024)} MiB")
    _unicode(value, what)
    return value


def priority(value: int) -> int:
    if not PRIORITY_MIN <= value <= PRIORITY_MAX:
        raise InvalidArgument(f"priority must be between {PRIORITY_MIN} and {PRIORITY_MAX}")
    return value


def window(value: int) -> int:
    if not 0 < value <= WINDOW_MAX:
        raise InvalidArgument(f"the context window must be between 1 and {WINDOW_MAX} tokens")
    return value


def positive(value: float | None, what: str) -> float | None:
    if value is not None and not 0 < value < 1e9:
        raise InvalidArgument(f"{what} must be a positive number")
    return value


def role(value: str) -> str:
    if value not in ROLES:
        raise InvalidArgument(f"bad role {value!r}; roles are {', '.join(ROLES)}")
    return value


# ---------------------------------------------------------------- JSON


class NotJson(InvalidArgument):
    """The text is not JSON at all (a syntax error): callers say so in their own words."""


class _Constant(ValueError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _refuse_constant(name: str) -> Any:
    raise _Constant(name)


def canonical(value: Any) -> str:
    """The one text form of a JSON value that memory stores and merges compare; it never
    writes NaN or Infinity (``ValueError``), which no other JSON reader accepts."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


_is_text = str.__instancecheck__
#: The exact types of values ``json_shape`` need not look into (a float may be NaN).
_is_flat = frozenset((str, int, bool, type(None))).__contains__


def json_shape(value: Any, what: str, depth: int = JSON_DEPTH, margin: int = 0) -> None:
    """Refuse what JSON cannot say: deeper nesting than ``depth`` (plus ``margin`` levels of
    a document's own structure around the values it carries), a non-finite number, an object
    key that is not text, a value of another type. Walked without recursion, so that a value
    nested a million deep is refused, not a ``RecursionError`` (and a cycle ends at the depth
    limit); texts and integers, most of any value, are never pushed. An object of texts,
    integers, flags and nulls (a transcript's usual message) is passed in one look."""
    if type(value) is dict and all(map(_is_text, value)) and all(map(_is_flat, map(type, value.values()))):
        return
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        children: Iterable[Any]
        if isinstance(item, dict):
            if not all(map(_is_text, item)):
                raise InvalidArgument(f"{what} is not JSON: an object key is not text")
            children = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise InvalidArgument(f"{what} holds {item!r}: JSON has no NaN or infinite number"
                                      " (one beyond ±1.8e308 overflows to infinite)")
            continue
        elif item is None or isinstance(item, (str, int)):
            continue
        else:
            raise InvalidArgument(f"{what} is not JSON (it holds a {type(item).__name__})")
        if level >= depth + margin:
            raise _too_deep(what, depth, margin)
        for child in children:
            if not isinstance(child, (str, int)):
                stack.append((child, level + 1))


def json_value(value: Any, what: str, limit: int = JSON_VALUE_MAX, depth: int = JSON_DEPTH) -> str:
    """Check a JSON value that is about to be stored and return its canonical text: nested
    at most ``depth`` deep, finite numbers, Unicode text, at most ``limit`` bytes of
    canonical JSON. ``what`` names it in the one-line refusal."""
    json_shape(value, what, depth)
    try:
        text = canonical(value)
    except ValueError:  # the only one left: an integer longer than Python converts to text
        raise InvalidArgument(
            f"{what} holds an integer longer than {sys.get_int_max_str_digits()} digits") from None
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidArgument(f"{what} is not valid Unicode text (it holds a lone surrogate)") from None
    if size > limit:
        raise InvalidArgument(f"{what} is {size:,} bytes of JSON; the limit is {size_words(limit)}")
    return text


#: ``orjson`` reads an integer past 64 bits as a float: one this large may have been one.
_WIDE: Final = float(1 << 63)


def widened(value: Any) -> bool:
    """Whether ``value`` (as ``orjson`` read it) holds a float as large as an integer it would
    make one of: to be read again by ``json``, which keeps the integer."""
    if type(value) is float:
        return not -_WIDE < value < _WIDE
    if type(value) is dict:
        return any(widened(v) for v in value.values())
    if type(value) is list:
        return any(widened(v) for v in value)
    return False


def json_loads(text: str | bytes, what: str, depth: int = JSON_DEPTH, margin: int = 0) -> Any:
    """Parse JSON from a person, a file or a runner, strictly: ``NotJson`` for a syntax
    error, and a one-line ``InvalidArgument`` for NaN or Infinity, a number that overflows
    a float, an integer too long to convert, or nesting deeper than ``depth`` (``margin``:
    as ``json_shape``)."""
    try:
        if isinstance(text, (bytes, bytearray)):  # as json.loads reads bytes
            text = text.decode(json.detect_encoding(text), "surrogatepass")
        value = _DECODER.decode(text)
    except (ValueError, RecursionError) as exc:
        raise _refusal(exc, what, depth, margin) from None
    json_shape(value, what, depth, margin)
    return value


#: One decoder for every parse (``json.loads`` with an argument builds one a call).
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def json_raw_decode(text: str, at: int, what: str, depth: int = JSON_DEPTH, margin: int = 0) -> tuple[Any, int]:
    """One JSON value of ``text`` starting at ``at`` and where it ends, as strictly as
    ``json_loads`` (its shape unchecked: the caller checks what it keeps, as a whole read
    would); a file read a part at a time (a snapshot) is parsed with it. A value that
    ``text`` ends in the middle of is ``NotJson``."""
    try:
        return _DECODER.raw_decode(text, at)
    except (ValueError, RecursionError) as exc:
        raise _refusal(exc, what, depth, margin) from None


def _refusal(exc: ValueError | RecursionError, what: str, depth: int, margin: int) -> InvalidArgument:
    """What a failed parse says (``UnicodeDecodeError`` and ``JSONDecodeError`` are ``ValueError`` too)."""
    if isinstance(exc, _Constant):
        return InvalidArgument(f"{what} holds {exc.name}, which is not JSON")
    if isinstance(exc, RecursionError):
        return _too_deep(what, depth, margin)
    if isinstance(exc, UnicodeDecodeError):
        return NotJson(f"{what} is not UTF-8 text")
    if isinstance(exc, json.JSONDecodeError):
        return NotJson(f"{what} is not valid JSON")
    # not a syntax error: an integer longer than Python converts
    return InvalidArgument(f"{what} holds an integer longer than {sys.get_int_max_str_digits()} digits")


def _too_deep(what: str, depth: int, margin: int) -> InvalidArgument:
    if margin:
        return InvalidArgument(f"{what} nests a value deeper than {depth} levels")
    return InvalidArgument(f"{what} is nested deeper than {depth} levels")


def size_words(n: int) -> str:
    """A size as a person reads it: ``64 MiB``, ``512 KiB``, ``1,000 bytes``."""
    return f"{n >> 20} MiB" if n % (1 << 20) == 0 else f"{n >> 10} KiB" if n % 1024 == 0 else f"{n:,} bytes"


def resource_kind(kind: str) -> str:
    """A resource kind by its one name (``db`` was ``sqlite``'s too: one file was bound twice)."""
    kind = KIND_ALIASES.get(kind, kind)
    if kind not in RESOURCE_KINDS:
        raise InvalidArgument(f"unknown resource kind {kind!r}; kinds are {', '.join(RESOURCE_KINDS)}")
    return kind
