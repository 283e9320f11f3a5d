"""Counting tokens when a message is written.

The count is stored with the message and summed into the session's active-context total,
so no listing ever re-reads messages. Which counter a workspace uses is fixed when the
workspace is created (recorded in its meta table). Should that counter be missing later
(tiktoken uninstalled), the estimator counts new messages and ``counter`` reports that it did.

``bytes/4`` is the default: no real tokenizer is available offline on a fresh machine
(tiktoken downloads its tables on first use). It estimates a message as
``4 + ceil(utf8_bytes / 4)``: four tokens of chat framing (role, separators, as OpenAI's
chat format spends per message) plus one token per four bytes of UTF-8, the usual rule of
thumb for English; for CJK text (three bytes a character) it gives about 0.75 tokens a
character, under the ~1 a real BPE gives, and it says so by its name wherever a count is
shown. When ``tiktoken`` is installed and its ``cl100k_base`` table is already in the
local cache, new workspaces use it instead and are labelled ``tiktoken:cl100k_base``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

ESTIMATOR = "bytes/4"
MESSAGE_OVERHEAD = 4

Counter = Callable[[str], int]


def estimate(text: str) -> int:
    return MESSAGE_OVERHEAD + (len(text.encode("utf-8", "surrogatepass")) + 3) // 4


def _tiktoken() -> Counter | None:
    """cl100k_base from tiktoken, only if it is installed and needs no network."""
    try:
        import tiktoken
        import tiktoken_ext.openai_public  # noqa: F401
    except ImportError:
        return None
    cache = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    if not cache or not any(Path(cache).iterdir()):
        return None
    try:
        enc = tiktoken.get_encoding("cl100k_base")
    except Exception:  # noqa: BLE001 - any failure means "not available offline"
        return None
    return lambda text: MESSAGE_OVERHEAD + len(enc.encode(text, disallowed_special=()))


def choose() -> str:
    """The name of the best counter available here, for a new workspace."""
    return "tiktoken:cl100k_base" if _tiktoken() else ESTIMATOR


def counter(name: str) -> tuple[str, Counter]:
    """The counter a workspace was created with, or the estimator if that one is gone here."""
    if name.startswith("tiktoken:"):
        found = _tiktoken()
        if found:
            return name, found
    return ESTIMATOR, estimate
