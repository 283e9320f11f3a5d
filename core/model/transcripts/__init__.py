"""The agent CLIs' own session files, read and written: what ``adopt``, ``sync``, ``save -o``
/ ``load`` of an agent session and ``migrate`` between CLIs need to know of each format.

Each CLI keeps its sessions its own way (Claude Code: a JSONL tree per session under its
projects folder; Codex: a JSONL rollout per thread, indexed in ``state_5.sqlite``; opencode: a
SQLite store). A module per CLI (``claude``, ``codex``, ``opencode``) implements `Format`;
``FORMATS`` names them by runner kind. Everything here is plain data and files: no store, no
engine. A format never changes a file of the CLI's it did not write itself (``place`` and
``write`` make new ones), so adopting or carrying a session cannot damage the original.

Reading is incremental: a `Position` says where the last read stopped, and ``read`` returns
only what follows it, so a sync appends exactly the new part. Only whole records are read: a
record cut short at the end of a file (the CLI is writing it) is left for the next read, and a
record that is not valid where a whole one stands is said in ``problems`` and skipped.
"""

from __future__ import annotations

from importlib import import_module

from ..errors import InvalidArgument
from .base import Differs, Format, Found, Position, Said, Transcript, remap, within

__all__ = ["CLIS", "Differs", "Format", "Found", "Position", "Said", "Transcript", "format_of", "remap", "within"]

#: The CLIs whose files Procession reads, each a module of this package with a ``FORMAT``.
CLIS = ("claude", "codex", "opencode")


def format_of(cli: str) -> Format:
    """The format of ``cli``'s files; imported when first asked for (``adopt claude`` never
    loads the other two)."""
    if cli not in CLIS:
        raise InvalidArgument(f"unknown agent CLI {cli!r}: one of {', '.join(CLIS)}")
    found: Format = import_module(f"{__name__}.{cli}").FORMAT
    return found
