"""Procession: agent sessions as processes.

The embedded engine: a session store on SQLite and the system-call table that changes it
(``Workspace``). It knows no screen; the CLI (``procession.cli``) and the monitor
(``procession.tui``) are faces over the same calls. The layers, from the faces down:
``cli`` and ``tui`` (faces), ``present`` (their words), ``engine`` (runs steps), ``calls``
(the call table), ``store`` (the SQLite file), ``model`` (the vocabulary).

Names are imported on first use, so that a step started as ``python -m
procession.runners.builtin`` does not pay for the store and its dependencies.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what a type checker reads (``__getattr__`` is Any to it); ``X as X``: exported
    from .calls import Workspace as Workspace
    from .calls.merge import Resolution as Resolution
    from .engine import Engine as Engine
    from .model.calls import Call as Call
    from .model.errors import (
        ContextTooLarge as ContextTooLarge, EngineBusy as EngineBusy, IllegalTransition as IllegalTransition,
        InvalidArgument as InvalidArgument, MergeConflict as MergeConflict, NoneDone as NoneDone,
        NotFound as NotFound, ProcessionError as ProcessionError, SessionNotFound as SessionNotFound, SnapshotError as SnapshotError,
        StoreBusy as StoreBusy, StoreFull as StoreFull, WorkspaceError as WorkspaceError,
    )
    from .model.states import Reason as Reason, State as State

__version__ = "0.1.0"

_EXPORTS = {
    "Workspace": "calls",
    "Engine": "engine",
    "Resolution": "calls.merge",
    "Call": "model.calls",
    "State": "model.states",
    "Reason": "model.states",
    **{name: "model.errors" for name in (
        "ContextTooLarge", "EngineBusy", "IllegalTransition", "InvalidArgument", "MergeConflict", "NoneDone", "NotFound",
        "ProcessionError", "SessionNotFound", "SnapshotError", "StoreBusy", "StoreFull", "WorkspaceError",
    )},
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'procession' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
