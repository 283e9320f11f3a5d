"""The ids of the monitor's key bindings, which ``[keys]`` of the config file remaps
(``suspend = "z"``), read without Textual: a ``[keys]`` entry no binding has (a typo like
``suspnd``) is said, not ignored without a word. A test holds this list equal to the
bindings the monitor declares (its own, and one for each call its registry binds)."""

from __future__ import annotations

from typing import Final

#: Every binding id ``[keys]`` may name.
BINDING_IDS: Final = frozenset((
    "actions", "activate", "adopt", "allow", "approve", "attach", "attention", "bind", "cancel", "clear",
    "compress", "deny", "details", "env", "expand", "filter", "follow", "forget", "fork", "help", "interrupt",
    "invert", "limit", "load", "memory", "merge", "migrate", "move", "nice", "nice_down", "nice_up", "pause",
    "quit", "resume", "said", "sampling", "save", "search", "send", "set", "setup", "sort", "sort_next", "sort_prev",
    "spawn", "suspend", "sync", "tag", "terminated", "tree", "trigger", "unbind", "untag"))
