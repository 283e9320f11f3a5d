"""What a user may pass: names, texts and numbers are checked here, once, for every face.

Names (sessions, agents, checkpoints, memory keys) are short labels shown in a table, so
control characters are refused. Message texts are the user's content and are stored
exactly as given, control characters included; faces make them safe when they show them.
Only text that is not Unicode at all (invalid bytes) is refused, since it cannot be stored
as the UTF-8 the store holds.
"""

from __future__ import annotations

import re
from typing import Final

from .errors import InvalidArgument

NAME_MAX: Final = 200
KEY_MAX: Final = 1024
PRIORITY_MIN: Final = -100
PRIORITY_MAX: Final = 100
WINDOW_MAX: Final = 1 << 31
TEXT_MAX: Final = 64 * 1024 * 1024
ROLES: Final = ("system", "user", "assistant", "tool")
RESOURCE_KINDS: Final = ("file", "folder", "db", "mcp", "tool", "url")
RESOURCE_MODES: Final = ("ro", "rw")
#: Resource kinds whose URI is a path on this machine (stored absolute).
PATH_KINDS: Final = ("file", "folder", "db")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


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
    if not isinstance(value, str) or not value.strip():
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
