"""The pieces of wording every layer needs, the core's refusals and the engine's notifications
included: counts of things, and text made safe for a terminal."""

from __future__ import annotations

import re

_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_UNSAFE_IN_A_LINE = re.compile(r"[\x00-\x1f\x7f-\x9f]")
#: The ASCII that ``_UNSAFE`` leaves as it is.
_SAFE_ASCII = bytes(range(0x20, 0x7f)) + b"\t\n"


def plural(n: int, word: str) -> str:
    """``1 session``, ``2 sessions``."""
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def printable(text: str, *, lines: bool = True) -> str:
    """Session content made safe for a terminal: control characters (escape sequences, C1
    controls included) are shown as ``\\xNN`` instead of reaching the terminal; newlines and
    tabs stay, unless ``lines`` is False (a refusal, a notification title: one line whatever
    user text it quotes). Applying it twice changes nothing more. Text with no control
    character at all, the usual case, is returned after one check in C; so is ASCII text whose
    only controls are newlines and tabs (lines joined to be printed at once)."""
    if text.isprintable():
        return text
    if lines and text.isascii() and not text.encode("ascii").translate(None, _SAFE_ASCII):
        return text
    return (_UNSAFE if lines else _UNSAFE_IN_A_LINE).sub(lambda m: f"\\x{ord(m.group()):02x}", text)
