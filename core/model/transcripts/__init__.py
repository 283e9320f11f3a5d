"""The agent CLIs' own session files, read and written: what ``adopt``, ``sync``, ``save -o``
/ ``load`` of an agent session and ``migrate`` between CLIs need to know of each format.

Each CLI keeps its sessions its own way (Claude Code: a JSONL tree per session under its
projects folder; Codex: a JSONL rollout per thread, indexed in ``state_5.sqlite``; opencode: a
SQLite store; Gemini CLI: a JSONL log of changes per chat; Qwen Code: a JSONL tree per chat).
A module per CLI (``claude``, ``codex``, ``opencode``, ``gemini``, ``qwen``) implements
`Format`; ``CLIS`` names them. GitHub Copilot CLI's sessions are not read (its
``session-state`` events are its own, undocumented, and it is run over ACP only). Everything here is plain data and files: no store, no
engine. A format never changes a file of the CLI's it did not write itself (``place`` and
``write`` make new ones), so adopting or carrying a session cannot damage the original.

Reading is incremental: a `Position` says where the last read stopped, and ``read`` returns
only what follows it, so a sync appends exactly the new part. Only whole records are read: a
record cut short at the end of a file (the CLI is writing it) is left for the next read, and a
record that is not valid where a whole one stands is said in ``problems`` and skipped.
"""

from __future__ import annotations

from importlib import import_module

from collections.abc import Mapping
from typing import Any

from ..agents import CLIS as AGENTS
from ..errors import InvalidArgument
from .base import Differs, Format, Found, Position, Said, Transcript, remap, within

__all__ = ["CLIS", "Differs", "Format", "Found", "Position", "Said", "Transcript", "format_of", "read_on", "remap",
           "within"]

#: The CLIs whose files Procession reads, each a module of this package with a ``FORMAT``.
CLIS = ("claude", "codex", "opencode", "gemini", "qwen")


def format_of(cli: str) -> Format:
    """The format of ``cli``'s files; imported when first asked for (``adopt claude`` never
    loads the other two)."""
    if cli not in CLIS:
        raise InvalidArgument(f"unknown agent CLI {cli!r}: one of {', '.join(CLIS)}")
    found: Format = import_module(f"{__name__}.{cli}").FORMAT
    return found


def read_on(ref: Mapping[str, Any]) -> bool:
    """Whether the transcript an agent reference names is the session's to read on (``sync``,
    the engine's follower, after a run): one of a CLI read here, unless the session is run over
    ACP by an agent that runs only so. Then its runs store what it says themselves, and its
    own chat is not the session's record: Gemini CLI makes a new one per run, given the whole
    conversation as one prompt; Qwen Code's, over ACP, misses the replies after a tool call."""
    cli = str(ref.get("cli", ""))
    return cli in CLIS and not (ref.get("acp") and cli in AGENTS and not AGENTS[cli].headless)
