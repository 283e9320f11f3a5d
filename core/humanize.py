"""Short human forms of numbers and times, shared by the CLI and the monitor."""

from __future__ import annotations

import re
import time

_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def count(n: float) -> str:
    """``950``, ``12.3k``, ``4.1M``."""
    n = float(n)
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            value = n / size
            return f"{value:.1f}{unit}" if value < 100 else f"{value:.0f}{unit}"
    return f"{n:.0f}"


def plural(n: int, word: str) -> str:
    """``1 session``, ``2 sessions``."""
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def size(n: float) -> str:
    """Bytes as ``512B``, ``3.2K``, ``41M`` (binary units, as htop shows memory)."""
    n = float(n)
    for unit, step in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= step:
            value = n / step
            return f"{value:.1f}{unit}" if value < 100 else f"{value:.0f}{unit}"
    return f"{n:.0f}B"


def age(then: float | None, now: float | None = None) -> str:
    """How long ago: ``now``, ``45s``, ``12m``, ``3h``, ``5d``."""
    if then is None:
        return "-"
    seconds = max(0.0, (time.time() if now is None else now) - then)
    if seconds < 1:
        return "now"
    for unit, step in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= step:
            return f"{int(seconds // step)}{unit}"
    return f"{int(seconds)}s"


def clock(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def printable(text: str) -> str:
    """Session content made safe for a terminal: control characters (escape sequences
    included) are shown as ``\\xNN`` instead of reaching the terminal; newlines and tabs stay."""
    return _UNSAFE.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
