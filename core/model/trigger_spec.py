"""Trigger kinds: what may wake a session, checked when the trigger is added.

A trigger is stored as a kind and a JSON spec. ``parse`` turns the user's words into that
spec and refuses anything malformed, so the engine that fires triggers never meets a bad
one. Paths of a watch are made absolute against the session's folder at this point.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Final

from .errors import InvalidArgument

KINDS: Final = ("watch", "cron", "every", "inbox", "after")
DEFAULT_DEBOUNCE_MS: Final = 500
MIN_EVERY_S: Final = 1.0
MAX_EVERY_S: Final = 10 * 365 * 86400.0

_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def duration(text: str) -> float:
    """Seconds in ``90s``, ``5m``, ``1h30m``, ``2d``, ``250ms``."""
    compact = text.strip().replace(" ", "")
    parts = _DURATION.findall(compact)
    if not parts or "".join(n + u for n, u in parts) != compact:
        raise InvalidArgument(f"bad duration {text!r}: use forms like 30s, 5m, 1h30m, 2d")
    return sum(float(n) * _UNIT[u] for n, u in parts)


def parse(kind: str, args: list[str], *, cwd: str, debounce_ms: int | None = None) -> dict[str, Any]:
    """The stored spec of a trigger of ``kind`` given the CLI's words ``args``."""
    if kind not in KINDS:
        raise InvalidArgument(f"unknown trigger kind {kind!r}; kinds are {', '.join(KINDS)}")
    if kind != "watch" and debounce_ms is not None:
        raise InvalidArgument("--debounce applies to watch triggers only")
    match kind:
        case "watch":
            if not args:
                raise InvalidArgument("watch needs at least one path or glob")
            debounce = DEFAULT_DEBOUNCE_MS if debounce_ms is None else debounce_ms
            if not 0 <= debounce <= 3_600_000:
                raise InvalidArgument("--debounce must be between 0 and 3600000 ms")
            return {"paths": [absolute(p, cwd) for p in args], "debounce_ms": debounce}
        case "cron":
            if len(args) != 1:
                raise InvalidArgument('cron takes one expression, quoted: cron "0 9 1 * *"')
            from croniter import croniter

            if not croniter.is_valid(args[0]):
                raise InvalidArgument(f"bad cron expression {args[0]!r}")
            return {"expr": args[0]}
        case "every":
            if len(args) != 1:
                raise InvalidArgument("every takes one duration, like 5m")
            seconds = duration(args[0])
            if not MIN_EVERY_S <= seconds <= MAX_EVERY_S:
                raise InvalidArgument(f"every must be between {MIN_EVERY_S:g}s and 3650d")
            return {"seconds": seconds, "text": args[0]}
        case "inbox":
            if args:
                raise InvalidArgument("inbox takes no argument")
            return {}
        case _:  # after
            if len(args) != 1 or not args[0].isdigit():
                raise InvalidArgument("after takes one session id")
            return {"session": int(args[0])}


def absolute(path: str, cwd: str) -> str:
    """``path`` made absolute against ``cwd`` and normalised; globs are kept as globs."""
    if not path or "\x00" in path:
        raise InvalidArgument(f"bad path {path!r}")
    p = Path(path).expanduser()
    if not p.is_absolute():
        p = Path(cwd) / p
    parts: list[str] = []
    for part in p.parts:
        if part == "..":
            if len(parts) > 1:
                parts.pop()
        elif part != ".":
            parts.append(part)
    return str(Path(*parts))


def revalidate(kind: str, spec: Any) -> dict[str, Any]:
    """A stored spec (from a snapshot file, say) checked as if the user had typed it."""
    if not isinstance(spec, dict):
        raise InvalidArgument(f"bad {kind} trigger spec")
    try:
        match kind:
            case "watch":
                if not isinstance(spec["paths"], list):
                    raise TypeError
                return parse(kind, spec["paths"], cwd="/", debounce_ms=spec.get("debounce_ms"))
            case "cron":
                return parse(kind, [spec["expr"]], cwd="/")
            case "every":
                return parse(kind, [spec["text"]], cwd="/")
            case "inbox":
                return parse(kind, [], cwd="/")
            case "after":
                return parse(kind, [str(spec["session"])], cwd="/")
            case _:
                return parse(kind, [], cwd="/")
    except (KeyError, TypeError, AttributeError):
        raise InvalidArgument(f"bad {kind} trigger spec") from None
