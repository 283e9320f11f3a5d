"""Short human forms of numbers, times and texts, shared by every face."""

from __future__ import annotations

import time

from rich.cells import cell_len, set_cell_size

from ..model.text import plural, printable

__all__ = ["age", "ago", "cell_len", "clock", "count", "cut", "fit", "one_line", "pad", "plural", "printable", "size"]


def count(n: float) -> str:
    """``950``, ``12.3k``, ``4.1M``."""
    n = float(n)
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            value = n / size
            return f"{value:.1f}{unit}" if value < 100 else f"{value:.0f}{unit}"
    return f"{n:.0f}"


def duration(seconds: float) -> str:
    """``45s``, ``12m``, ``3h05m``, ``2d04h``."""
    s = int(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


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


def ago(then: float | None, now: float | None = None) -> str:
    """``just now``, ``45s ago``, ``3h ago``; ``never`` for no time."""
    if then is None:
        return "never"
    text = age(then, now)
    return "just now" if text == "now" else f"{text} ago"


def clock(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def one_line(text: str, width: int) -> str:
    """``text`` on one line (whitespace runs become one space), safe, cut to ``width`` cells
    with ``…`` (a wide character, CJK or emoji, takes two: columns after it stay aligned)."""
    flat = printable(" ".join(text.split()))
    return cut(flat, width)


def cut(text: str, width: int) -> str:
    """``text`` cut to at most ``width`` cells, ending in ``…`` when anything was cut."""
    if cell_len(text) <= width:
        return text
    return set_cell_size(text, width - 1) + "…" if width > 1 else set_cell_size(text, width)


def pad(text: str, width: int, right: bool = False) -> str:
    """``text`` padded to ``width`` cells (to the left when ``right``), as ``str.ljust`` would
    pad it if every character were one cell: a column of names in Chinese or with emoji
    lines up with the next."""
    room = " " * max(0, width - cell_len(text))
    return room + text if right else text + room


def fit(text: str, width: int, right: bool = False) -> str:
    """``text`` cut or padded to exactly ``width`` cells: a table's cell."""
    return pad(cut(text, width), width, right)
