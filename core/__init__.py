"""Procession: agent sessions as processes.

The embedded engine: a session store on SQLite and the system-call table that changes it
(``Workspace``). It knows no screen; the CLI (``procession.cli``) and the monitor
(``procession.tui``) are faces over the same calls.
"""

from .errors import (
    ContextTooLarge,
    IllegalTransition,
    InvalidArgument,
    MergeConflict,
    NotFound,
    ProcessionError,
    SessionNotFound,
    SnapshotError,
    StoreBusy,
    WorkspaceError,
)
from .merge import Resolution
from .states import Reason, State
from .workspace import Workspace

__all__ = [
    "ContextTooLarge", "IllegalTransition", "InvalidArgument", "MergeConflict", "NotFound", "ProcessionError",
    "Reason", "Resolution", "SessionNotFound", "SnapshotError", "State", "StoreBusy", "Workspace", "WorkspaceError",
]
__version__ = "0.1.0"
