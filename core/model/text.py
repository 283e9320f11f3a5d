"""The one piece of wording every layer needs, the core's refusals included: counts of things."""

from __future__ import annotations


def plural(n: int, word: str) -> str:
    """``1 session``, ``2 sessions``."""
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"
